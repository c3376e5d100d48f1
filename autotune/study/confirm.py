"""The confirmation phase: the candidates worth confirming, rounds of fresh baselines and candidates (recorded
after each round, so a killed run resumes them), the race, the exclusions and the verdict (``race``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import TrialConfig
from autotune.errors import ConfirmationFailed, StartsFailed
from autotune.measure import FRESH_STARTS, measure_fresh
from autotune.records import (
    BaselineCheck,
    ConfirmationState,
    Exclusion,
    FailedCandidate,
    Round,
    RoundLevels,
    RoundStarts,
    StartRecord,
    SuspectPrune,
    TrialRecord,
)
from autotune.stats import SETTLE_MOST_ROUNDS, Spread, log_ratios, rounds_to_settle, start_prior
from autotune.study import baseline_check, race
from autotune.study.context import Event, StudyContext
from autotune.study.search import RESOLUTION, SETTLE_SAMPLES, fastest_baseline, log_value, surrogate
from autotune.study.settle import baseline_draws, change_bar
from autotune.surrogate import Model
from autotune.verdict import ToSettle, Verdict, clearly_loses, loses_on, with_unweighed

#: confirmation candidates are ranked by posterior mean + ``CANDIDATE_KAPPA`` sd of the surrogate (``candidate_sets``)
CANDIDATE_KAPPA = 2.0
#: with load levels, the fastest measured configs per level confirmed for that level's sake (``_level_winners``)
LEVEL_CANDIDATES = 2
#: a candidate after the first joins only while the surrogate gives it at least this probability of changing the
#: answer (``thin``). Each candidate costs a server start per round.
JOIN_PROBABILITY = 0.05
#: the race among confirmed candidates ends once every one still racing beside the leader is, at the race's
#: confidence, at most this much faster than the leader (``race.Race.tied``): which of near-ties to deploy
#: changes tok/s by less than this, and racing them costs a start of each per round up to ``max_rounds``
RACE_TIE = 0.01
NOT_CONFIRMED = "not confirmed (verdict.confirm_top 0 or verdict.repeats < 2)"


def candidates(ctx: StudyContext, scale: dict[str, float] | None = None) -> list[FrozenTrial]:
    """``candidate_sets``, the objective's first."""
    ours, levels = candidate_sets(ctx, scale)
    return ours + levels


def candidate_sets(
    ctx: StudyContext, scale: dict[str, float] | None = None
) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """(the objective's candidates, the level-only ones: ``_level_winners``). The objective's are the configs
    worth confirming (lossless, not clearly losing to their baseline): the best ``verdict.confirm_top`` by the
    surrogate's posterior mean (by measured tok/s without a surrogate), plus the fastest single measurement when
    the surrogate ranked it lower (a sharp peak on the space's edge is what a smooth model underrates).

    ``scale`` (``{cuda_graph: fresh baselines / search baseline}``, from ``baseline_check.fast``): judged against
    the search's baseline scaled by it, and the trials the baseline rule pruned are weighed too."""
    space = ctx.space
    complete = [t for t in records.trials(ctx.study, (TrialState.COMPLETE,)) if records.is_measured_speculative(t)]
    if scale:
        complete += [
            t
            for t in records.trials(ctx.study, (TrialState.PRUNED,))
            if records.is_measured_speculative(t) and TrialRecord(t).prune_rule == "baseline" and t.intermediate_values
        ]
    measured = {t.number: math.log(t.value) if t.value and t.value > 0 else -math.inf for t in complete}
    model = surrogate(ctx) if complete else None
    score = dict(measured)
    if model is not None:
        # optimistic ranking (posterior mean + CANDIDATE_KAPPA sd): a config whose neighbours are also fast
        # beats a lucky start, and a config on the space's edge, which a smooth model underrates, still gets
        # its chance in the race
        mean, sd = model.predict([TrialRecord(t).effective_config() for t in complete])
        score = {t.number: float(m + CANDIDATE_KAPPA * v) for t, m, v in zip(complete, mean, sd, strict=True)}

    baselines = {cg: records.find_baseline(ctx.study, cg) for cg in {TrialRecord(t).cuda_graph for t in complete}}

    def eligible(t: FrozenTrial) -> bool:
        if TrialRecord(t).lossy:
            return False
        baseline = baselines[TrialRecord(t).cuda_graph]
        if baseline is None:
            return False
        ratio = (scale or {}).get(str(TrialRecord(t).cuda_graph), 1.0)
        if space.benchmark.loaded:  # the objective's bound over prompts x levels
            d = ctx.pruner.decide(ctx.study, t)
            return d is None or not clearly_loses(d.upper_bound / ratio)
        tv = [t.intermediate_values[s] for s in sorted(t.intermediate_values)]
        bv = [_scaled(baseline.intermediate_values.get(s), ratio) for s in sorted(t.intermediate_values)]
        # the verdict's confidence here (the pruner's is ``pruning.confidence``), no pooled spread
        logs = log_ratios(tv, bv)
        return not loses_on(logs, confidence=space.verdict.confidence, start_noise=space.pruning.start_noise)

    seen: set[str | None] = set()
    out: list[FrozenTrial] = []
    for t in sorted(complete, key=lambda t: score[t.number], reverse=True):
        if len(out) >= space.verdict.confirm_top:
            break
        key = TrialRecord(t).config_key
        if key not in seen and eligible(t):
            seen.add(key)
            out.append(t)

    def contends(t: FrozenTrial) -> bool:
        # a method's best that has clearly lost to the leader (the leader prune's rule, which holds a method's
        # configs only once it has its own evidence) keeps its search figure: confirming it changes no answer
        if not eligible(t):
            return False
        d = ctx.pruner.decide(ctx.study, t)
        return not (d is not None and d.prune and d.rule == "leader")

    out += _method_bests(complete, score, contends, seen)
    if model is not None and out:
        fastest = next(
            (t for t in sorted(complete, key=lambda t: measured[t.number], reverse=True) if eligible(t)), None
        )
        if fastest is not None and TrialRecord(fastest).config_key not in seen:
            seen.add(TrialRecord(fastest).config_key)
            out.append(fastest)
    if model is not None and len(out) > 1 and not space.benchmark.loaded:
        out = thin(ctx, model, out)
    if space.benchmark.loaded and out:
        return out, _level_winners(ctx, complete, seen)
    return out, []


def thin(ctx: StudyContext, model: Model, cands: list[FrozenTrial]) -> list[FrozenTrial]:
    """Confirmation sized by what it can change: each round measures every candidate (a server start each), so a
    candidate joins only while the surrogate's joint posterior gives it a real chance (``JOIN_PROBABILITY``) of
    beating the best-ranked candidate (by posterior mean) by more than the study's resolution (``search.RESOLUTION``)
    or clearing the bar over the fastest baseline, whichever is higher: a near-tie of the best costs rounds and
    cannot change the answer by more than the resolution. A method's best (``_method_bests``) always stays: every
    method's figure in the report is a confirmed interval."""
    configs = [TrialRecord(t).effective_config() for t in cands]
    mean, _sd = model.predict(configs)
    top = int(np.argmax(mean))
    rng = np.random.default_rng(records.design_seed(ctx.study))
    draws = model.sample(configs, SETTLE_SAMPLES, rng)
    fastest = fastest_baseline(ctx)
    b = None if fastest is None else baseline_draws(log_value(fastest), model.noise_floor, len(draws), rng)
    change = change_bar(draws[:, top], RESOLUTION, b, ctx.space.verdict.min_gain)
    methods = {TrialRecord(t).method for t in cands} - {None}
    firsts = {m: next(t.number for t in cands if TrialRecord(t).method == m) for m in methods}
    out = []
    for i, t in enumerate(cands):
        chance = float(np.mean(draws[:, i] > change))
        if i == top or chance >= JOIN_PROBABILITY or firsts.get(TrialRecord(t).method) == t.number:
            out.append(t)
        else:
            ctx.emit(
                Event(
                    "note",
                    t.number,
                    {
                        "message": f"trial {t.number} is not confirmed: the surrogate gives it P = {chance:.3f} of "
                        f"beating trial {cands[top].number} by more than {RESOLUTION:.0%}"
                        + (f" or clearing the {ctx.space.verdict.min_gain:.0%} bar" if fastest is not None else "")
                    },
                )
            )
    return out


def _method_bests(
    complete: list[FrozenTrial],
    score: dict[int, float],
    eligible: Callable[[FrozenTrial], bool],
    seen: set[str | None],
) -> list[FrozenTrial]:
    """In a space with ``search.methods``: the best-scored eligible (lossless, not clearly losing to the baseline
    nor to the leader) config of each method not among the candidates yet, so that every method still in contention
    has a confirmed interval in the report (one that clearly lost keeps its search figure, as a pruned one does).
    Nothing elsewhere (trials without a method param)."""
    out: list[FrozenTrial] = []
    have = {TrialRecord(t).method for t in complete if TrialRecord(t).config_key in seen}
    for t in sorted(complete, key=lambda t: score[t.number], reverse=True):
        method = TrialRecord(t).method
        if method is None or method in have:
            continue
        key = TrialRecord(t).config_key
        if key not in seen and eligible(t):
            have.add(method)
            seen.add(key)
            out.append(t)
    return out


def _scaled(v: float | None, ratio: float) -> float | None:
    return None if v is None else v * ratio


def _level_winners(ctx: StudyContext, complete: list[FrozenTrial], seen: set[str | None]) -> list[FrozenTrial]:
    """With load levels: of the ``LEVEL_CANDIDATES`` fastest measured configs at each level (by their
    speedup over the baseline's same level, above 1 and within the latency limits there), those that are not
    candidates yet, so that each level's winner is confirmed. On a level's plateau the single fastest measurement is
    often a lucky start, so two are looked at; they are judged by their level, not by the objective (a deep tree
    that wins at one stream loses the objective), and the race keeps them only while they lead a level
    (``race.Race.level_only_out``)."""
    out: list[FrozenTrial] = []
    for c in ctx.space.benchmark.concurrency:
        ranked: list[tuple[float, FrozenTrial]] = []
        for t in complete:
            x = TrialRecord(t).level(c)
            if x is None or x.speedup is None or x.slo_broken or TrialRecord(t).lossy:
                continue
            ranked.append((float(x.speedup), t))
        ranked.sort(key=lambda p: (p[0], -p[1].number), reverse=True)
        for speedup, t in ranked[:LEVEL_CANDIDATES]:
            key = TrialRecord(t).config_key
            if speedup > 1.0 and key not in seen:
                seen.add(key)
                out.append(t)
    return out


def fastest_baseline_setting(ctx: StudyContext) -> bool | None:
    """The CUDA-graph setting of the fastest baseline of the search: what a user would deploy without
    speculation, and so what the headline speedup is measured against."""
    best: tuple[float, bool] | None = None
    for cg in sorted({bool(b) for b in ctx.space.search.cuda_graph}, reverse=True):
        b = records.find_baseline(ctx.study, cg)
        if b is not None and b.value and (best is None or b.value > best[0]):
            best = (float(b.value), cg)
    return None if best is None else best[1]


def confirm(ctx: StudyContext) -> ConfirmationState:
    """Re-measure the candidates in rounds, each round after a fresh baseline of the same CUDA-graph setting
    (so drift cancels in the pair) and of the fastest baseline's setting (the deployable comparison):
    ``verdict.repeats`` rounds of every candidate, then more rounds, up to ``verdict.max_repeats``, of those
    still racing (see ``race.race_survivors``) while two or more are left. The verdict comes from the interval of
    the best survivor against the fastest baseline; it names what it rests on (``basis``) and every excluded
    config (``exclusions``), and is never "the baseline wins" while a config it could not weigh is left."""
    spec = ctx.space.verdict
    ours, level_only = candidate_sets(ctx)
    if not ours and spec.confirm_top > 0 and spec.repeats >= 2 and _any_measured(ctx):
        # "the baseline wins" on the search's figures alone rests on one baseline start: check it first
        ratios = baseline_check.fast(_checks(ctx, _baseline_only_rounds(ctx)))
        if ratios:
            ours, level_only = candidate_sets(ctx, scale=ratios)
    cands = ours + level_only
    excluded = records.find_exclusions(ctx.study)
    if cands and (spec.confirm_top == 0 or spec.repeats < 2):
        # configs worth confirming exist but the space asks for no (usable) confirmation: nothing is proven
        state = ConfirmationState.not_confirmed(NOT_CONFIRMED, excluded)
        records.set_confirmation(ctx.study, state)
        return state
    keys = [TrialRecord(t).config_key for t in cands]
    previous = records.confirmation(ctx.study)
    if previous and previous.keys == keys and previous.done and previous.recorded("rests_on"):
        return previous
    # the same candidates: resume the recorded rounds (which of them still race is recomputed from the rounds)
    if previous and previous.keys == keys:
        state = previous
    else:
        state = ConfirmationState(keys=keys, rounds=[])
        state.done = False
    state.level_only = [t.number for t in level_only]
    if not state.recorded("deploy_cuda_graph"):
        state.deploy_cuda_graph = fastest_baseline_setting(ctx)
    ctx.emit(Event("confirm-start", data={"candidates": [t.number for t in cands], "repeats": spec.repeats}))
    _rounds(ctx, cands, state)
    _verdict(ctx, _live(cands, state), state, excluded + _failed_exclusions(cands, state))
    ctx.emit(
        Event(
            "verdict",
            data={
                "verdict": state.verdict,
                "rounds": len(state.rounds),
                "best": state.best,
                "basis": state.rests_on,
                "excluded": [e.to_dict() for e in excluded],
            },
        )
    )
    return state


def _rounds(ctx: StudyContext, cands: list[FrozenTrial], state: ConfirmationState) -> None:
    """Rounds as ``race.Race.next_round`` asks for them (the race, then more rounds while the verdict is open)."""
    spec = ctx.space.verdict
    graph_settings = sorted({TrialRecord(t).cuda_graph for t in cands}, key=str)
    while True:
        the_race = _race(ctx, _live(cands, state), state)  # a candidate whose starts failed is out of the race
        racing = the_race.still_racing(state.rounds, [t.number for t in cands])
        active = the_race.next_round(state.rounds)
        if not active:
            break
        n = len(state.rounds)
        which = ", ".join(map(str, active))
        if racing is None:
            ctx.emit(
                Event(
                    "note",
                    data={
                        "message": f"after {n} rounds it is still open whether trial(s) {which} clear "
                        f"the {spec.min_gain:.0%} bar: one more round (at most {spec.max_rounds} in all)"
                    },
                )
            )
        state.rounds.append(_round(ctx, cands, active, graph_settings, state))
        records.set_confirmation(ctx.study, state)


def _live(cands: list[FrozenTrial], state: ConfirmationState) -> list[FrozenTrial]:
    """The candidates still in confirmation: all but those whose starts failed in a round."""
    out = {f.trial for f in state.failed or []}
    return [t for t in cands if t.number not in out]


def _failed_exclusions(cands: list[FrozenTrial], state: ConfirmationState) -> list[Exclusion]:
    """The candidates whose starts failed in confirmation, as exclusions: the verdict could not weigh them, and a
    config whose server fails on fresh starts is no deployment."""
    by_number = {t.number: t for t in cands}
    return [
        f.exclusion(TrialRecord(by_number[f.trial]).shown_config if f.trial in by_number else None)
        for f in state.failed or []
    ]


def _drop(ctx: StudyContext, state: ConfirmationState, t: FrozenTrial, e: StartsFailed) -> None:
    """Take a candidate whose starts failed out of confirmation, on record (a resumed study keeps it out)."""
    k = len(state.rounds) + 1
    reason = f"its server failed on {FRESH_STARTS} fresh starts in confirmation round {k}: {e}"
    state.failed = [*(state.failed or []), FailedCandidate(t.number, e.kind, reason, k, tuple(e.failed_s))]
    records.set_confirmation(ctx.study, state)
    label = TrialRecord(t).effective_config().label()
    ctx.emit(Event("note", data={"message": f"trial {t.number} ({label}) is out of confirmation: {reason}"}))


def _prior(ctx: StudyContext) -> Spread:
    """What the spread of a round's paired log ratio is known to be before confirmation measures it: the space's
    start-to-start noise (``stats.start_prior``)."""
    return start_prior(ctx.space.pruning.start_noise)


def _race(ctx: StudyContext, cands: list[FrozenTrial], state: ConfirmationState) -> race.Race:
    """The race among ``cands`` under the space's rules, with ``RACE_TIE`` and the space's start-to-start noise."""
    return race.Race(
        [race.Candidate(t.number, TrialRecord(t).effective or {}, TrialRecord(t).cuda_graph) for t in cands],
        ctx.space.verdict,
        state.deploy_cuda_graph,
        list(ctx.space.benchmark.concurrency) if ctx.space.benchmark.loaded else None,
        frozenset(state.level_only or []),
        _prior(ctx),
        RACE_TIE,
    )


def _round(
    ctx: StudyContext, cands: list[FrozenTrial], active: list[int], graph_settings: list[Any], state: ConfirmationState
) -> Round:
    """A fresh baseline of each CUDA-graph setting with candidates still racing, then those candidates; and the
    deployable baseline when no candidate racing runs under its setting. A candidate whose starts fail leaves
    confirmation (``_drop``); a baseline whose starts fail stops it (``ConfirmationFailed``)."""
    deploy_cg = state.deploy_cuda_graph
    starts = RoundStarts()
    rnd = Round(starts=starts)
    lv = RoundLevels()  # per-level tok/s (with load levels)
    base = _Into(lv.baseline, starts.baseline)
    cand = _Into(lv.candidates, starts.candidates)
    for cg in graph_settings:
        racing = [t for t in cands if TrialRecord(t).cuda_graph == cg and t.number in active]
        if not racing:
            continue
        rnd.baseline[bool(cg)] = _baseline(ctx, bool(cg), base, state)
        for t in racing:
            try:
                rnd.candidates[t.number] = _measure_once(ctx, TrialRecord(t).effective_config(), cand, t.number)
            except StartsFailed as e:
                _drop(ctx, state, t, e)
    if deploy_cg is not None and deploy_cg not in rnd.baseline:
        rnd.baseline[deploy_cg] = _baseline(ctx, bool(deploy_cg), base, state)
    if ctx.space.benchmark.loaded:
        rnd.levels = lv
    return rnd


def _baseline(ctx: StudyContext, cg: bool, into: _Into, state: ConfirmationState) -> float:
    """A round's fresh baseline (``_measure_once``); when its starts all fail, their server time is kept on
    record (``state.lost_s``, billed) before confirmation stops."""
    try:
        return _measure_once(ctx, TrialConfig.baseline(cg), into, cg)
    except ConfirmationFailed as e:
        state.lost_s = [*(state.lost_s or []), *e.failed_s]
        records.set_confirmation(ctx.study, state)
        raise


@dataclass(frozen=True)
class _Into:
    """Where ``_measure_once`` puts a start's detail: each level's tok/s and the start's record (``StartRecord``)."""

    levels: dict[Any, dict[int, float]]
    starts: dict[Any, StartRecord]


def _verdict(ctx: StudyContext, cands: list[FrozenTrial], state: ConfirmationState, excluded: list[Exclusion]) -> None:
    seen = _race(ctx, cands, state).look(state.rounds)
    state.results = seen.results
    if seen.level_verdicts is not None:
        state.level_results, state.level_verdicts, state.level_text = (
            seen.level_results,
            seen.level_verdicts,
            seen.level_text,
        )
    state.confidence = seen.confidence
    state.exclusions = excluded
    decided = race.decide(seen.results, excluded, state.deploy_cuda_graph, ctx.space.verdict.min_gain)
    state.verdict = decided.verdict
    state.best = decided.best
    state.basis = decided.basis
    state.rests_on = decided.rests_on
    _check_baselines(ctx, state)
    state.to_settle = _to_settle(ctx, state)
    state.done = True
    records.set_confirmation(ctx.study, state)


def _to_settle(ctx: StudyContext, state: ConfirmationState) -> ToSettle | None:
    """An inconclusive verdict whose pick's interval straddles the ``min_gain`` bar: how many fresh rounds of the
    pick against the fastest baseline (``autotune reverify --repeats``) would settle which side of the bar it lies
    on, at the spread confirmation measured and the verdict's confidence, if its point estimate stays
    (``stats.rounds_to_settle``; None: more than ``stats.SETTLE_MOST_ROUNDS``). None otherwise: the user decides
    whether the last percent is worth those starts, not the study."""
    if state.verdict != Verdict.INCONCLUSIVE or state.best is None:
        return None
    best = next((r for r in state.results or [] if r.trial == state.best), None)
    iv = best.headline if best is not None else None
    bar = 1.0 + ctx.space.verdict.min_gain
    if iv is None or not iv.low <= bar <= iv.high:
        return None
    confidence = ctx.space.verdict.confidence
    n = rounds_to_settle(iv.sd, iv.point, bar, confidence, _prior(ctx).df)
    # a start of the config and one of its baseline per round
    return ToSettle(state.best, iv, bar, confidence, iv.sd, n, SETTLE_MOST_ROUNDS, None if n is None else 2 * n)


def _any_measured(ctx: StudyContext) -> bool:
    return any(
        records.is_measured_speculative(t) for t in records.trials(ctx.study, (TrialState.COMPLETE, TrialState.PRUNED))
    )


def _baseline_only_rounds(ctx: StudyContext) -> list[Round]:
    """``baseline_check.CHECK_ROUNDS`` rounds of fresh baselines of each setting the search measured (recorded after
    each, so a resumed study does not measure them again)."""
    rounds = records.baseline_check_rounds(ctx.study)
    settings = [
        cg
        for cg in sorted({bool(b) for b in ctx.space.search.cuda_graph}, reverse=True)
        if records.find_baseline(ctx.study, cg) is not None
    ]
    while settings and len(rounds) < baseline_check.CHECK_ROUNDS:
        ctx.emit(
            Event(
                "note",
                data={
                    "message": "nothing is left to confirm: a fresh baseline start checks the search's before the "
                    f"verdict ({len(rounds) + 1} of {baseline_check.CHECK_ROUNDS})"
                },
            )
        )
        starts = RoundStarts()
        into = _Into({}, starts.baseline)
        rounds.append(
            Round(
                baseline={cg: _measure_once(ctx, TrialConfig.baseline(cg), into, cg) for cg in settings}, starts=starts
            )
        )
        records.set_baseline_check_rounds(ctx.study, rounds)
    return rounds


def _checks(ctx: StudyContext, rounds: list[Round]) -> list[BaselineCheck]:
    """``baseline_check.check`` of the search's baselines against the fresh ones in ``rounds``."""
    search: dict[bool, float] = {}
    for cg in sorted({k for r in rounds for k in r.baseline}):
        b = records.find_baseline(ctx.study, cg)
        if b is not None and b.value:
            search[cg] = float(b.value)
    return baseline_check.check(
        rounds, search, confidence=ctx.space.verdict.confidence, start_noise=ctx.space.pruning.start_noise
    )


def _check_baselines(ctx: StudyContext, state: ConfirmationState) -> None:
    """The search's baseline of each setting against confirmation's fresh ones (``baseline_check``): recorded, said
    in the live view when it is off, and while a config pruned against a baseline that ran fast might have won,
    the verdict is not "the baseline wins"."""
    extra = records.baseline_check_rounds(ctx.study)
    if extra:
        state.check_rounds = extra
    checks = _checks(ctx, [*extra, *state.rounds])
    # after the check before a search-only verdict found the baseline fast (``confirm``), the candidates were chosen
    # against the fresh baselines from every measured config, pruned ones too: nothing was left unweighed
    rescued = bool(extra) and bool(baseline_check.fast(_checks(ctx, extra)))
    pruned = [
        SuspectPrune(t.number, str(TrialRecord(t).cuda_graph), TrialRecord(t).speedup_upper)
        for t in records.trials(ctx.study, (TrialState.PRUNED,))
        if TrialRecord(t).prune_rule == "baseline" and not TrialRecord(t).is_duplicate
    ]
    confirmed = {r.trial for r in state.results or []}
    sus = [] if rescued else [p for p in baseline_check.suspects(checks, pruned) if p.trial not in confirmed]
    if rescued:
        state.rests_on = f"{state.rests_on}; the search's baseline ran faster than fresh starts of it, " + (
            "so the candidates were chosen against those" if state.rounds else "and no config beat those either"
        )
    state.baseline_check = checks
    state.suspect_prunes = sus
    for c in checks:
        if c.flagged:
            ctx.emit(Event("note", data={"message": baseline_check.text(c)}))
    if sus:
        numbers = ", ".join(str(p.trial) for p in sus)
        state.rests_on = f"{state.rests_on}" + (
            f"; {len(sus)} config(s) pruned against a search baseline that ran fast (trial(s) {numbers}) were not "
            "weighed against the fresh baselines"
        )
        state.verdict = with_unweighed(state.verdict or Verdict.INCONCLUSIVE)


def _measure_once(ctx: StudyContext, config: TrialConfig, into: _Into | None = None, key: Any = None) -> float:
    """One start of ``config``: its objective (tok/s without load levels); each level's tok/s into
    ``into.levels[key]``, the start's record into ``into.starts[key]``.
    A start that fails gets a fresh one (``measure.measure_fresh``); a baseline whose starts all failed raises
    ``ConfirmationFailed``, a candidate's ``StartsFailed``."""

    def retry(line: str) -> None:
        message = f"confirmation: {config.label()}: the server failed ({line}); a fresh start"
        ctx.emit(Event("note", data={"message": message}))

    try:
        m = measure_fresh(ctx.runner, config, ctx.space, on_retry=retry)
    except StartsFailed as e:
        if not config.is_baseline:
            raise
        failed = ConfirmationFailed(
            f"confirmation: the fresh baseline ({config.label()}) could not be measured: its server failed on "
            f"{FRESH_STARTS} starts ({e}); nothing can be confirmed without it. The study and its rounds are kept: "
            "run the study again to resume confirmation."
        )
        failed.failed_s = e.failed_s
        raise failed from e
    tps = m.tok_per_s
    if into is not None and key is not None:
        if m.levels:
            into.levels[key] = {lv.level: lv.tok_per_s for lv in m.levels}
        seconds = sum(r.seconds for r in m.results) + sum(lv.seconds for lv in m.levels if lv.level > 1)
        into.starts[key] = StartRecord(m.pass_tok_per_s(), m.info.startup_s, seconds, m.warmup, m.failed_s)
    if config.is_baseline and ctx.space.benchmark.greedy:  # each prompt's own temperature: sampled answers differ
        ctx.confirmation_floor(config, [r.text for r in m.results])
    ctx.emit(Event("confirm-measure", data={"config": config.label(), "tok_per_s": tps}))
    return tps

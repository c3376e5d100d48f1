"""The confirmation's math, pure over the recorded rounds: who is still racing, each candidate's intervals, the
pick and what the verdict rests on. A round is a ``records.Round`` (fresh baselines by CUDA-graph setting,
candidates by trial number); candidates are named by their trial numbers."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from autotune.records import Round
from autotune.space import VerdictSpec
from autotune.stats import Interval, Spread, speedup_interval, start_prior, two_sided_t, upper_bound
from autotune.study.levels import level_intervals, level_verdicts, raised, summary_text
from autotune.verdict import verdict

#: the prior on the spread of a round's paired log ratio when the caller names none: the default start-to-start
#: noise (a study passes its own ``pruning.start_noise``: ``stats.start_prior``)
DEFAULT_PRIOR = start_prior()


def measured_prior(rounds: list[Round], prior: Spread | None) -> Spread | None:
    """``prior`` (the space's start-to-start noise) raised to what the recorded rounds show, when they show more:
    the pooled sd of each config's log tok/s around its own mean over the rounds (each start is independent),
    times sqrt 2 for a pair of starts. Only ever raised: a server noisier than ``pruning.start_noise`` must not make
    a tie look precise, while rounds that happen to agree closely are the luck the prior is there to discount."""
    if prior is None:
        return None
    groups: list[list[float]] = []
    for cg in {k for r in rounds for k in r.baseline}:
        groups.append([math.log(r.baseline[cg]) for r in rounds if r.baseline.get(cg)])
    for k in {k for r in rounds for k in r.candidates}:
        groups.append([math.log(r.candidates[k]) for r in rounds if r.candidates.get(k)])
    return raised(prior, groups)


def _mean_log(rounds: list[Round], key: int) -> float:
    xs = [math.log(r.candidates[key]) for r in rounds if r.candidates.get(key)]
    return sum(xs) / len(xs) if xs else -math.inf


def _paired(rounds: list[Round], k: int, leader: int) -> list[float]:
    """The within-round log ratios of candidate ``k`` to ``leader`` over the rounds both were measured in."""
    return [
        math.log(r.candidates[k] / r.candidates[leader])
        for r in rounds
        if r.candidates.get(k) and r.candidates.get(leader)
    ]


def race_survivors(rounds: list[Round], keys: list[int], spec: VerdictSpec) -> list[int]:
    """The candidates (trial numbers) still racing after ``rounds`` of confirmation.

    A candidate leaves the race once the one-sided ``spec.race_confidence`` upper bound of its mean log
    tok/s ratio to the current leader, over the rounds both were measured in, is below 0: it is clearly
    slower. The ratio is taken within a round (same fresh baseline, same conditions), so drift cancels. Dropped
    candidates stay dropped; nobody is dropped before ``spec.repeats`` rounds."""
    active = list(keys)
    for i in range(spec.repeats, len(rounds) + 1):
        done = rounds[:i]
        if len(active) <= 1:
            break
        means = {k: _mean_log(done, k) for k in active}
        leader = max(active, key=means.__getitem__)
        keep = [leader]
        for k in active:
            if k == leader:
                continue
            diffs = _paired(done, k, leader)
            if len(diffs) < 2 or upper_bound(diffs, spec.race_confidence, 0.0) >= 1.0:
                keep.append(k)
        active = [k for k in active if k in keep]
    return active


def in_contention(rounds: list[Round], keys: list[int], spec: VerdictSpec) -> int:
    """How many candidates the pick is chosen among: those still racing after the first ``spec.repeats`` rounds
    (before them, every one). Counted there and not later: a tie dropped by chance in an extra round of the race
    was still a chance the pick had to be lucky."""
    return len(race_survivors(rounds[: spec.repeats], keys, spec)) if len(rounds) >= spec.repeats else len(keys)


def still_racing(
    rounds: list[Round], keys: list[int], spec: VerdictSpec, points: Points | None = None, tie: Tie | None = None
) -> list[int] | None:
    """The candidates the race still measures after ``rounds`` (every one for ``spec.repeats`` rounds, then those
    not clearly slower while two or more are), or None once the race is over (what follows is extra rounds).

    With ``points`` (each candidate's point estimate against the fastest baseline; ``bar_points``) the race is
    also over once no candidate still racing has its point estimate above ``1 + min_gain``: which of several
    configs under the bar is fastest changes nothing (the baseline is what to deploy), and more rounds shrink an
    interval around its point, so they would not lift one over the bar (``_could_win``).

    With ``tie`` (``tie_rule``) the race is also over once the leader is a proven winner and every other candidate
    still racing is proven at most a little faster than it: which of them to deploy then changes tok/s by less
    than that, while the race would go on to ``spec.max_rounds`` between near-ties."""
    active = race_survivors(rounds, keys, spec)
    if len(rounds) < spec.repeats:
        return active
    if len(active) <= 1:
        return None
    if points is not None:
        bar = 1.0 + spec.min_gain
        if all((points(rounds, k) or 0.0) <= bar for k in active):
            return None
    if tie is not None and tie(rounds, active):
        return None
    return active


#: ``tie_rule``'s test: whether the race among ``active`` over these rounds is between a proven winner and near-ties
Tie = Callable[[list[Round], list[int]], bool]


def tie_rule(
    cands: list[Candidate],
    spec: VerdictSpec,
    deploy_cuda_graph: bool | None,
    tie: float | None,
    prior: Spread | None = DEFAULT_PRIOR,
) -> Tie | None:
    """The race's end among near-ties (``confirm.RACE_TIE`` in a study; None: no such end): the leader (the best mean
    log tok/s over the rounds) is a proven winner, its interval against the fastest baseline above ``1 +
    min_gain`` at a confidence that shares the space's error among the candidates in contention and every round
    the race could end at (ending a race is a look), and every other candidate racing has the one-sided
    ``spec.race_confidence`` upper bound of its paired ratio to the leader (within each round) below ``1 + tie``.
    Not at the space's confidence alone: the rule ends the race just when the leader looks good."""
    if tie is None:
        return None
    graphs = {n: cg for n, _, cg in cands}
    bar = 1.0 + spec.min_gain

    keys = [n for n, _, _ in cands]
    looks = spec.max_rounds - spec.repeats + 1

    def over(rounds: list[Round], active: list[int]) -> bool:
        leader = max(active, key=lambda k: _mean_log(rounds, k))
        # each round at which the race could end this way is a look: the error is shared by all of them
        strict = 1.0 - (1.0 - spec.confidence) / (max(1, in_contention(rounds, keys, spec)) * looks)
        h = _headline_over(rounds, leader, graphs.get(leader), deploy_cuda_graph, strict, prior)
        if h is None or not h["low"] > bar:
            return False
        for k in active:
            if k == leader:
                continue
            diffs = _paired(rounds, k, leader)
            if len(diffs) < 2 or upper_bound(diffs, spec.race_confidence, 0.0) >= 1.0 + tie:
                return False
        return True

    return over


def first_look(
    rounds: list[Round], keys: list[int], spec: VerdictSpec, points: Points | None = None, tie: Tie | None = None
) -> int | None:
    """The number of rounds at which the race alone ends (``spec.repeats`` done and at most one candidate racing,
    or none above the bar, or the rest tied with the leader (``still_racing``), or ``spec.max_rounds``): the
    verdict's first look. None while fewer rounds are recorded."""
    for n in range(spec.repeats, spec.max_rounds + 1):
        if n > len(rounds):
            return None
        if n >= spec.max_rounds or still_racing(rounds[:n], keys, spec, points, tie) is None:
            return n
    return None


#: a candidate's point estimate (speedup) against the fastest baseline over the given rounds, None before two
Points = Callable[[list[Round], int], float | None]


def bar_points(
    cands: list[Candidate],
    deploy_cuda_graph: bool | None,
    levels: list[int] | None,
    prior: Spread | None = DEFAULT_PRIOR,
) -> Points | None:
    """Each candidate's headline point estimate (``headline``: against the deployable baseline, else its own
    setting's) as ``still_racing`` weighs it against the bar; None with load levels (a level's winner is a question
    of its own: the race goes on as before)."""
    if levels:
        return None
    graphs = {n: cg for n, _, cg in cands}

    def point(rounds: list[Round], number: int) -> float | None:
        h = _headline_over(rounds, number, graphs.get(number), deploy_cuda_graph, 0.95, prior)
        return None if h is None else float(h["point"])

    return point


def _headline_over(
    rounds: list[Round],
    number: int,
    cuda_graph: Any,
    deploy_cuda_graph: bool | None,
    confidence: float,
    prior: Spread | None,
) -> dict[str, Any] | None:
    """``headline`` of ``number``'s ``candidate_result`` over ``rounds``, the prior raised to what they show."""
    result = candidate_result(
        number,
        {},
        cuda_graph,
        rounds,
        deploy_cuda_graph,
        confidence=confidence,
        dropped=False,
        prior=measured_prior(rounds, prior),
    )
    return headline(result)


def look_confidence(spec: VerdictSpec, first: int | None, n: int, candidates: int = 1) -> float:
    """The confidence of the verdict's interval after ``n`` rounds of ``candidates`` confirmed candidates. At the
    first look, the space's own. An inconclusive verdict gets more rounds, up to ``spec.max_rounds``, and a look
    after each; each of those looks spends an equal share of the space's error (Bonferroni over the extra looks
    allowed), so that looking again cannot turn a config that is not ``min_gain`` faster into a winner much more
    often than one look would. And the verdict rests on the pick, the best of the ``candidates`` still racing
    (those not dropped as clearly slower than the leader: they cannot be the pick): each spends an equal share of
    the error (Bonferroni over them)."""
    error = (1.0 - spec.confidence) / max(1, candidates)
    if first is None or n <= first:
        return 1.0 - error
    extra = max(1, spec.max_rounds - first)
    return 1.0 - error / extra


def _interval(pairs: list[tuple[Any, Any]], confidence: float, prior: Spread | None) -> dict[str, float] | None:
    logs = [math.log(c / b) for c, b in pairs if c and b]
    return speedup_interval(logs, confidence, prior).to_dict() if len(logs) >= 2 else None


def candidate_result(
    number: int,
    config: dict[str, Any],
    cuda_graph: Any,
    rounds: list[Round],
    deploy_cuda_graph: bool | None,
    *,
    confidence: float,
    dropped: bool,
    prior: Spread | None = DEFAULT_PRIOR,
) -> dict[str, Any]:
    """One candidate's figures over the rounds it was measured in: against the fresh baseline of its own
    CUDA-graph setting (``speedup_ci``) and against the deployable one (``deploy_speedup_ci``). The intervals'
    spread is pooled with ``prior`` (the start-to-start noise, ``stats.speedup_interval``)."""
    mine = [r for r in rounds if r.candidates.get(number)]
    pairs = [(r.candidates[number], r.baseline.get(cuda_graph)) for r in mine]
    dep = [
        (r.candidates[number], r.baseline.get(deploy_cuda_graph) if deploy_cuda_graph is not None else None)
        for r in mine
    ]
    return {
        "trial": number,
        "config": config,
        "tok_per_s": [c for c, _ in pairs],
        "baseline_tok_per_s": [b for _, b in pairs],
        "speedup_ci": _interval(pairs, confidence, prior),
        "deploy_baseline_tok_per_s": [b for _, b in dep],
        "deploy_speedup_ci": _interval(dep, confidence, prior),
        "dropped": dropped,
    }


def headline(result: dict[str, Any]) -> dict[str, Any] | None:
    """A confirmed candidate's interval against the fastest baseline (the same-setting one when that is missing)."""
    return result.get("deploy_speedup_ci") or result.get("speedup_ci")


def pick(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best point estimate against the fastest baseline among the candidates still racing (the others were
    clearly slower than the leader of their rounds)."""
    racing = [(h, r) for r in results if (h := headline(r)) and not r["dropped"]]
    best = max(racing, key=lambda hr: hr[0]["point"], default=None)
    return best[1] if best is not None else None


def decide(
    results: list[dict[str, Any]], excluded: list[dict[str, Any]], deploy_cuda_graph: bool | None, min_gain: float
) -> dict[str, Any]:
    """The verdict (``verdict``, ``best``, ``basis``, ``rests_on``) of confirmed ``results``: never
    "the baseline wins" while a config could not be weighed (``excluded``)."""
    best = pick(results)
    h = headline(best) if best is not None else None
    iv = Interval(**{k: h[k] for k in ("point", "low", "high", "n", "confidence")}) if h is not None else None
    return {
        "verdict": verdict(iv, min_gain, unweighed=bool(excluded)).value,
        "best": None if best is None else best["trial"],
        "basis": "confirmed" if any(headline(r) for r in results) else ("not-confirmed" if results else "search"),
        "rests_on": basis(results, excluded, deploy_cuda_graph),
    }


def basis(results: list[dict[str, Any]], excluded: list[dict[str, Any]], deploy_cg: bool | None) -> str:
    """What a verdict rests on, in words."""
    graphs = {True: "graphs on", False: "graphs off"}.get(deploy_cg, "") if deploy_cg is not None else ""
    confirmed = [r for r in results if headline(r)]
    if confirmed:
        rounds = sorted({h["n"] for r in confirmed if (h := headline(r))})
        n = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
        text = f"confirmed: {len(confirmed)} candidate(s), {n} rounds each against fresh baselines" + (
            f"; speedups against the fastest baseline ({graphs})" if graphs else ""
        )
    elif results:
        text = "not confirmed: no candidate got two complete rounds"
    elif excluded:
        text = (
            "search only: no speculative config left to confirm (each was excluded or clearly slower than its baseline)"
        )
    else:
        text = "search only: no speculative config was worth confirming (each clearly slower than its baseline)"
    if excluded:
        kinds = Counter(e["kind"] for e in excluded)
        text += "; excluded: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return text


# ------------------------------------------------------------------------------------------ looks and rounds

#: a candidate as the confirmation's math needs it: (trial number, effective config, CUDA-graph setting)
Candidate = tuple[int, dict[str, Any], Any]


#: rounds a level-only candidate (confirmed for one level's sake, ``confirm._level_winners``) gets before it must
#: have the best point estimate at some level to stay
LEVEL_ONLY_ROUNDS = 2


def level_only_out(
    rounds: list[Round], cands: list[Candidate], levels: list[int] | None, level_only: frozenset[int]
) -> set[int]:
    """The level-only candidates that, after ``LEVEL_ONLY_ROUNDS`` rounds, have the best point estimate at no
    level (against every candidate, over those rounds): they are measured no more and weigh in no verdict."""
    if not levels or not level_only or len(rounds) < LEVEL_ONLY_ROUNDS:
        return set()
    done = rounds[:LEVEL_ONLY_ROUNDS]
    per = {str(n): level_intervals(n, cg, done, levels, confidence=0.95) for n, _, cg in cands}
    leaders = {v["trial"] for v in level_verdicts(per, levels, 0.0) if v["trial"] is not None}
    return {k for k in level_only if k not in leaders}


def look(
    rounds: list[Round],
    cands: list[Candidate],
    spec: VerdictSpec,
    deploy_cuda_graph: bool | None,
    levels: list[int] | None = None,
    level_only: frozenset[int] = frozenset(),
    prior: Spread | None = DEFAULT_PRIOR,
    tie: float | None = None,
) -> dict[str, Any]:
    """The verdict the recorded rounds give at this look's confidence (``look_confidence``): each candidate's
    result, the pick and, with load levels, each level's interval and verdict. Exclusions are left out here (see
    ``decide``): more rounds cannot weigh a config that could not be measured. ``level_only``: the candidates
    confirmed for a level's sake (``level_only_out``)."""
    gone = level_only_out(rounds, cands, levels, level_only)
    keys = [n for n, _, _ in cands if n not in gone]
    points = bar_points(cands, deploy_cuda_graph, levels, prior)
    active = race_survivors(rounds, keys, spec)
    first = first_look(rounds, keys, spec, points, tie_rule(cands, spec, deploy_cuda_graph, tie, prior))
    conf = look_confidence(spec, first, len(rounds), in_contention(rounds, keys, spec))
    level_prior = prior
    prior = measured_prior(rounds, prior)
    results = [
        candidate_result(
            n, config, cg, rounds, deploy_cuda_graph, confidence=conf, dropped=n not in active, prior=prior
        )
        for n, config, cg in cands
    ]
    out: dict[str, Any] = {"results": results, "confidence": conf}
    if levels:
        per = {
            str(n): level_intervals(n, cg, rounds, levels, confidence=conf, prior=level_prior)
            for n, _, cg in cands
            if n not in gone
        }
        out["level_results"] = per
        out["level_verdicts"] = level_verdicts(per, levels, spec.min_gain)
        out["level_text"] = summary_text(out["level_verdicts"])
    out.update(decide(results, [], deploy_cuda_graph, spec.min_gain))
    return out


def next_round(
    rounds: list[Round],
    cands: list[Candidate],
    spec: VerdictSpec,
    deploy_cuda_graph: bool | None,
    levels: list[int] | None = None,
    level_only: frozenset[int] = frozenset(),
    prior: Spread | None = DEFAULT_PRIOR,
    tie: float | None = None,
) -> list[int]:
    """Which candidates the next round measures (none: confirmation is over). Every candidate for
    ``spec.repeats`` rounds (a level-only one: ``LEVEL_ONLY_ROUNDS``, then only while it leads a level), then those
    still racing while two or more are; then, while it is open whether the pick clears ``1 + min_gain`` (its point
    estimate above it, its interval's low end not), the pick, and with load levels the best of each level where
    that is open, up to ``spec.max_rounds`` rounds in all."""
    gone = level_only_out(rounds, cands, levels, level_only)
    keys = [n for n, _, _ in cands if n not in gone]
    if not cands or len(rounds) >= spec.max_rounds:
        return []
    racing = still_racing(
        rounds,
        keys,
        spec,
        bar_points(cands, deploy_cuda_graph, levels, prior),
        tie_rule(cands, spec, deploy_cuda_graph, tie, prior),
    )
    if racing is not None:
        return racing
    seen = look(rounds, cands, spec, deploy_cuda_graph, levels, level_only, prior, tie)
    bar = 1.0 + spec.min_gain
    out: list[int] = []
    best = next((r for r in seen["results"] if r["trial"] == seen["best"]), None)
    if best is not None and (
        _could_win(headline(best), bar)
        or _could_settle_below(headline(best), bar, len(rounds), spec, in_contention(rounds, keys, spec))
    ):
        out.append(best["trial"])
    for lv in seen.get("level_verdicts") or []:
        if (
            lv["trial"] is not None
            and _could_win(lv["speedup_ci"], bar)
            and _could_clear(lv["speedup_ci"], bar, len(rounds), spec, in_contention(rounds, keys, spec))
            and lv["trial"] not in out
        ):
            out.append(lv["trial"])
    return out


def _could_clear(interval: dict[str, Any] | None, bar: float, n: int, spec: VerdictSpec, candidates: int = 1) -> bool:
    """Whether the rounds left can lift a level's winner over the bar (``_could_win``'s question, with load
    levels): its interval's half-width projected to ``spec.max_rounds`` rounds (the spread measured so far, at the
    last look's confidence) must fit between the bar and the point estimate, as ``_could_settle_below`` asks
    below the bar."""
    if interval is None or n < 2:
        return True
    return math.log(interval["point"]) - math.log(bar) > _projected(interval, n, spec, candidates)


def _could_settle_below(
    interval: dict[str, Any] | None, bar: float, n: int, spec: VerdictSpec, candidates: int = 1
) -> bool:
    """Open on the other question more rounds can answer: whether the pick's gain lies under the bar (its point
    estimate below ``1 + min_gain``, its interval's high end not yet): "no worthwhile gain" instead of
    "inconclusive". Bought only when the rounds left can settle it: the interval's half-width projected to
    ``spec.max_rounds`` rounds (the spread measured so far, at the last look's confidence) must fit between the
    point estimate and the bar."""
    if interval is None or not interval["point"] < bar <= interval["high"] or n < 2:
        return False
    return math.log(bar) - math.log(interval["point"]) > _projected(interval, n, spec, candidates)


def _projected(interval: dict[str, Any], n: int, spec: VerdictSpec, candidates: int) -> float:
    """The half-width (log) ``interval``, measured over ``n`` rounds, would have after ``spec.max_rounds`` rounds
    at the last look's confidence, if the spread stays what it is."""
    iv = Interval(**{k: interval[k] for k in ("point", "low", "high", "n", "confidence")}, df=interval.get("df"))
    rounds = spec.max_rounds
    last = look_confidence(spec, spec.repeats, rounds, candidates)
    df = rounds - 1 + (iv.df - (n - 1) if iv.df is not None else 0.0)
    return two_sided_t(last, df) * iv.sd / math.sqrt(rounds)


def _could_win(interval: dict[str, Any] | None, bar: float) -> bool:
    """Open on the one question more rounds can answer: whether it clears the bar. The point estimate must be
    above it: more rounds shrink the interval around the point, so one below the bar will not clear it (a tie with
    the baseline would only buy rounds towards "inconclusive"), and an interval below the bar is no winner,
    whether or not it also proves a loss (for a schedule both mean off)."""
    return interval is not None and interval["low"] <= bar < interval["point"]

"""Study -> ``Report``, built once by ``build_report``: the study's result (``autotune.study.result``) with the
trials' rows, the cost and the checks. ``Report.to_json`` is ``report --json``; ``autotune.render`` and
``autotune.html`` render it as text and HTML. Sections other modules record are carried as they recorded them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import acceptance, bill, lossless, records, warmup
from autotune.acceptance import AcceptPositions
from autotune.bill import bench_seconds, confirmation_starts, warmup_seconds
from autotune.config import Config, LevelSummary
from autotune.errors import DrafterNotEngaged, ServerOOM
from autotune.lossless import LosslessRecord
from autotune.objective import Objective, ObjectiveLine
from autotune.records import (
    BaselineCheck,
    CandidateResult,
    ConfirmationState,
    Exclusion,
    GreedyLossless,
    LevelVerdict,
    SubsetCheckRecord,
    SuspectPrune,
    TrialRecord,
)
from autotune.space.model import TrafficInfo
from autotune.stats import Interval
from autotune.study import methods as _methods
from autotune.study.levels import summary_text
from autotune.study.result import (
    Best,
    Recommendation,
    StudyResult,
    objective_speedup,
    study_result,
)
from autotune.traffic import Guard, LengthThird, acceptance_guards, by_length, length_text
from autotune.verdict import Verdict, point_verdict, to_settle_text
from autotune.warmup import WarmUpSummary

VERDICT_TEXT: dict[str, str] = {
    Verdict.SPECULATION_WINS: "speculation wins: the best config's confirmed speedup interval clears the minimum gain",
    Verdict.BASELINE_WINS: "the baseline wins: no speculative config beats it",
    Verdict.NO_WORTHWHILE_GAIN: "no worthwhile gain: the best config's confirmed speedup interval lies below the "
    "minimum gain (verdict.min_gain); whatever it gains is under the bar: deploy the baseline",
    Verdict.INCONCLUSIVE: "inconclusive: no config is proven faster than the baseline; deploy the baseline",
}

COMPARISONS = (
    "every speculative trial is paired with the baseline measured under the same CUDA-graph "
    "setting, prompt by prompt (pruning, intervals); the headline speedup and the verdict are against the "
    "fastest baseline (what would be deployed without speculation); every speedup is the objective's "
    "(a trial stopped early: over what it measured, its basis says what)"
)


@dataclass(frozen=True)
class TrialRow:
    """One trial as the report shows it: its outcome, config, figures and why it ended so."""

    number: int
    state: str
    role: str | None
    seeded: Any
    params: dict[str, object]
    config: Config | None
    tok_per_s: float | None
    speedup: float | None  # over its own baseline (a trial stopped early: over what it measured)
    speedup_upper: float | None
    prompts_measured: int
    accept_length: float | None
    accept_per_pos: AcceptPositions | None  # with drafts: an explanation, never a ranking
    startup_s: float | None
    duplicate_of: int | None
    prune_reason: str | None
    prune_rule: str | None
    pruned_against: int | None
    fail_kind: str | None
    fail_reason: str | None
    lossless: LosslessRecord | None
    lossless_summary: str | None
    log_path: str | None
    argv: list[str] | None
    levels: list[LevelSummary]  # with load levels: each level's figures
    levels_measured: list[int]
    slo_broken: list[str] | None
    reason: str | None  # why it ended so (every PRUNED and FAIL trial; a COMPLETE one when there is something to say)
    gpu_s: float  # its server time, as gpu_time bills it (a duplicate: none)
    speedup_vs_fastest: float | None  # the objective's speedup over the fastest baseline (speculative trials)
    speedup_basis: str | None  # what that speedup rests on
    confirmed: bool  # a confirmation candidate: it has a confirmed interval
    speedup_ci: Interval | None  # confirmation's interval against its own baseline

    @property
    def speculative(self) -> bool:
        return self.role == records.ROLE_SPECULATIVE

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {name: getattr(self, name) for name in _ROW_KEYS}
        out["levels"] = [x.to_dict() for x in self.levels]
        out["accept_per_pos"] = acceptance.summary(self.accept_per_pos)
        if self.confirmed:
            out["speedup_ci"] = None if self.speedup_ci is None else self.speedup_ci.to_dict()
        out["speedup_vs_fastest"] = self.speedup_vs_fastest
        out["speedup_basis"] = self.speedup_basis
        return out


_ROW_KEYS = list(TrialRow.__dataclass_fields__)[: list(TrialRow.__dataclass_fields__).index("speedup_vs_fastest")]


@dataclass(frozen=True)
class GpuTime:
    """Server time (hardware seconds the GPUs were held) of the search and confirmation (``gpu_time``)."""

    search_s: float
    search_starts: int
    failed_starts: int  # of both: refused, timed out, out of memory, crashed
    failed_s: float
    confirmation_s: float
    confirmation_starts: int
    total_s: float
    saved_by_pruning_s: float
    saved_by_dedup_s: float
    note: str = (
        "server time: startups, warm-up passes, timed prompts and load levels, and the starts that failed "
        "until they did (warm-up requests and reference answers not counted); confirmation as its rounds recorded "
        "it (rounds recorded without it: estimated from their tok/s)"
    )

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BestConfig:
    """One of the best measured speculative configs against the fastest baseline: ``speedup`` the search's,
    ``confirmed_speedup`` confirmation's where it measured it."""

    trial: int
    config: Config | None
    tok_per_s: float | None
    speedup: float | None
    speedup_ci: Interval | None
    confirmed_speedup: float | None
    recommended: bool
    accept_length: float | None
    accept_per_pos: AcceptPositions | None  # where the server reported it

    def to_json(self) -> dict[str, object]:
        out = {**self.__dict__, "speedup_ci": None if self.speedup_ci is None else self.speedup_ci.to_dict()}
        if self.accept_per_pos:
            out["accept_per_pos"] = acceptance.summary(self.accept_per_pos)
        else:
            del out["accept_per_pos"]
        return out


@dataclass(frozen=True)
class Lossless:
    """The lossless check over the study: near-tie flips, lossy trials, the tolerance and the baselines' floor; in
    a space whose prompts sample, the winner's check at temperature 0 (``greedy``) and which figures come from which
    measurement."""

    numerics: int
    lossy_trials: list[int]
    tolerance: float | None
    tolerance_source: str | None
    baseline_divergences: list[records.FloorEntry]
    baselines_compared: int
    greedy: GreedyLossless | None = None
    greedy_text: str | None = None
    figures_from: str | None = None

    def to_json(self) -> dict[str, object]:
        out = dict(self.__dict__)
        out["baseline_divergences"] = [f.to_dict() for f in self.baseline_divergences]
        if self.greedy is None:
            for k in ("greedy", "greedy_text", "figures_from"):
                del out[k]
        return out


@dataclass(frozen=True)
class Load:
    """With load levels: a trial's per-level figures with the per-level verdict of its search measurement, and
    confirmation's per-level winners and verdicts."""

    trial: int
    levels: list[LevelSummary]
    text: str
    confirmed: list[LevelVerdict] | None
    confirmed_text: str | None

    def to_json(self) -> dict[str, object]:
        confirmed = None if self.confirmed is None else [v.to_dict() for v in self.confirmed]
        return {**self.__dict__, "levels": [x.to_dict() for x in self.levels], "confirmed": confirmed}


@dataclass(frozen=True)
class Traffic:
    """A request-log study: the subset and its guards (``TrafficInfo`` as recorded), the holdout checks as recorded
    (``records.traffic_holdout`` / ``traffic_acceptance``) with a line each, and the recommended config's speedup by
    input and output length third (``traffic.by_length``)."""

    info: TrafficInfo
    holdout_check: SubsetCheckRecord | None
    holdout_text: str
    acceptance_check: SubsetCheckRecord | None
    acceptance_text: str | None  # None: the space has no holdout
    by_length: list[LengthThird]
    by_length_text: str | None
    by_output_length: list[LengthThird]
    by_output_length_text: str | None

    def to_json(self) -> dict[str, object]:
        rest = {k: v for k, v in self.__dict__.items() if k != "info" and (k != "acceptance_text" or v is not None)}
        rest["by_length"] = [x.to_dict() for x in self.by_length]
        rest["by_output_length"] = [x.to_dict() for x in self.by_output_length]
        return {**asdict(self.info), "guards": [list(g) for g in self.info.guards], **rest}


@dataclass(frozen=True)
class Report:
    """A study's report. ``result``: what the study found (verdict, baselines, confirmation, recommendation);
    the rest presents the trials, the cost and the checks."""

    result: StudyResult
    trials: tuple[TrialRow, ...]
    counts: dict[str, int]  # trials per state
    pruned_before_last_prompt: int
    pruned_by: dict[str, int]  # pruning rule -> speculative trials
    reasons: dict[str, dict[str, int]]  # PRUNED / FAIL -> why -> trials
    gpu_time: GpuTime
    search_settled: records.Settled | None  # why the search stopped before its budget (``study.settle``)
    to_settle: dict[str, object] | None  # what settling an open verdict would take (``verdict.to_settle_text``)
    warmup: WarmUpSummary | None
    best_configs: tuple[BestConfig, ...]
    verdict_text: str
    baseline_check: list[BaselineCheck]
    lossless: Lossless
    flags: list[str]  # alarms
    acceptance_guards: tuple[Guard, ...]
    load: Load | None
    objective: ObjectiveLine
    interval_note: str | None
    traffic: Traffic | None  # request-log studies only
    methods: dict[str, Any] | None  # spaces with search.methods only (``study.methods.summarize``)
    running: dict[str, object] | None = None  # a study an autotune runs now (``commands.study.progress``)

    @property
    def study(self) -> str:
        return self.result.study

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict

    @property
    def recommended(self) -> Recommendation:
        return self.result.recommended

    def row(self, number: int | None) -> TrialRow | None:
        return next((r for r in self.trials if r.number == number), None)

    def to_json(self) -> dict[str, object]:
        """``report --json``."""
        res = self.result
        out: dict[str, object] = {
            "study": res.study,
            "simulated": res.simulated,
            "units": res.units,
            "baseline": {k: b.to_json() for k, b in res.baselines.items()},
            "trials": [r.to_json() for r in self.trials],
            "counts": self.counts,
            "pruned_before_last_prompt": self.pruned_before_last_prompt,
            "pruned_by": self.pruned_by,
            "reasons": self.reasons,
            "gpu_time": self.gpu_time.to_json(),
            "search_settled": None
            if self.search_settled is None
            else {**self.search_settled.to_dict(), "text": self.search_settled.text},
            "to_settle": self.to_settle,
            "warmup": None if self.warmup is None else self.warmup.to_dict(),
            "best_configs": [b.to_json() for b in self.best_configs],
            "best": res.best.to_json() if res.best is not None else None,
            "confirmed": [c.summary() for c in res.confirmed],
            "verdict": res.verdict.value,
            "verdict_basis": res.basis,
            "verdict_rests_on": res.rests_on,
            "verdict_text": self.verdict_text,
            "exclusions": [e.to_dict() for e in res.exclusions],
            "baseline_check": [c.to_dict() for c in self.baseline_check],
            "suspect_prunes": [p.to_dict() for p in res.confirmation.suspect_prunes or []],
            "fastest_baseline": res.fastest_baseline.to_json() if res.fastest_baseline is not None else None,
            "lossless": self.lossless.to_json(),
            "recommended": res.recommended.to_json(),
            "flags": self.flags,
            "acceptance_guards": [{"name": g.name, "text": g.text} for g in self.acceptance_guards],
            "load": self.load.to_json() if self.load is not None else None,
            "objective": self.objective.to_dict(),
            "interval_note": self.interval_note,
            "comparisons": COMPARISONS,
        }
        if self.traffic is not None:
            out["traffic"] = self.traffic.to_json()
        if self.methods is not None:
            out["methods"] = self.methods
        if self.running is not None:
            out["running"] = self.running
        return out


def build_report(study: optuna.Study, running: dict[str, object] | None = None) -> Report:
    """The study's report, from its records (``running``: the study is running now, ``commands.study.progress``)."""
    res = study_result(study)
    trials = list(res.trials)
    conf = res.confirmation
    by_number = {t.number: t for t in trials}
    obj = getattr(study.pruner, "objective", None) or Objective()  # every worker's pruner is built from the space
    n_prompts = len(records.prompt_ids(study)) or max((len(TrialRecord(t).prompt_results()) for t in trials), default=0)
    fastest_trial = by_number.get(res.fastest_baseline.trial) if res.fastest_baseline else None
    cis = {c.trial: c.speedup_ci for c in res.confirmed}
    rows: list[TrialRow] = []
    for t in trials:
        r = TrialRecord(t)
        vs_fastest: tuple[float | None, str | None] = (None, None)
        speedup = r.speedup
        if r.role == records.ROLE_SPECULATIVE:
            vs_fastest = objective_speedup(t, fastest_trial, obj, n_prompts)
            if speedup is None and r.duplicate_of is None:  # stopped between levels: none recorded
                own = by_number.get(r.baseline_trial) if r.baseline_trial is not None else None
                speedup = objective_speedup(t, own, obj, n_prompts)[0] if own is not None else None
        rows.append(_trial_row(t, speedup, vs_fastest, t.number in cis, cis.get(t.number)))
    spec = [r for r in rows if r.speculative]
    gpu = gpu_time(trials, conf)
    greedy = records.greedy_lossless(study)
    describe = obj.describe()
    traffic = records.traffic(study)  # spaces measured from a request log only
    report = Report(
        result=res,
        trials=tuple(rows),
        counts={
            s.name: sum(1 for t in trials if t.state == s)
            for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
        },
        pruned_before_last_prompt=sum(
            1 for r in spec if r.state == "PRUNED" and r.prompts_measured > 0 and r.duplicate_of is None
        ),
        pruned_by={
            rule: sum(1 for r in spec if r.prune_rule == rule and r.duplicate_of is None)
            for rule in ("baseline", "leader")
        },
        reasons=_reasons(trials),
        gpu_time=gpu,
        search_settled=records.search_settled(study),
        to_settle=to_settle_text(conf.to_settle if conf.done else None, gpu.to_json()),
        warmup=_warmups(trials, conf),
        best_configs=_best_configs(rows, res.confirmed, res.recommended.trial),
        verdict_text=_verdict_text(res.verdict, res.exclusions, conf.suspect_prunes or []),
        baseline_check=conf.baseline_check or [],
        lossless=_lossless_summary(rows, records.lossless_floor(study), greedy),
        flags=_flags(rows, greedy),
        acceptance_guards=_acceptance_guards(rows, by_number, records.drafter_references(study)),
        load=_load(rows, res.best, conf),
        objective=describe,
        interval_note=interval_note(conf),
        traffic=None
        if traffic is None
        else _traffic(traffic, records.traffic_holdout(study), records.traffic_acceptance(study), res, by_number),
        methods=None,
        running=running,
    )
    return _with_methods(study, report)


def _trial_row(
    t: FrozenTrial,
    speedup: float | None,
    vs_fastest: tuple[float | None, str | None],
    confirmed: bool,
    ci: Interval | None,
) -> TrialRow:
    r = TrialRecord(t)
    return TrialRow(
        number=t.number,
        state=t.state.name,
        role=r.role,
        seeded=r.seeded,
        params=dict(t.params),
        config=r.shown_config,
        tok_per_s=t.value if t.state == TrialState.COMPLETE else None,
        speedup=speedup,
        speedup_upper=r.speedup_upper,
        prompts_measured=len(t.intermediate_values),
        accept_length=r.accept_length
        if r.accept_length is not None
        else _mean([p.accept_length for p in r.prompt_results()]),
        accept_per_pos=p if (p := r.accept_positions) is not None and p.drafts > 0 else None,
        startup_s=r.startup_s,
        duplicate_of=r.duplicate_of,
        prune_reason=r.prune_reason or r.infeasible,
        prune_rule=r.prune_rule,
        pruned_against=r.pruned_against,
        fail_kind=r.fail_kind,
        fail_reason=r.fail_reason,
        lossless=r.lossless,
        lossless_summary=lossless.summary_line(r.lossless) if r.lossless else None,
        log_path=r.log_path,
        argv=r.argv,
        levels=(levels := r.levels),
        levels_measured=[x.level for x in levels],
        slo_broken=r.slo_broken,
        reason=records.outcome_reason(t) or _complete_note(r),
        gpu_s=trial_gpu_s(t),
        speedup_vs_fastest=vs_fastest[0],
        speedup_basis=vs_fastest[1],
        confirmed=confirmed,
        speedup_ci=ci,
    )


def _complete_note(r: TrialRecord) -> str | None:
    """A COMPLETE trial's note: the load levels whose latency limits it breaks (it ranks after those within them)."""
    if not r.slo_broken:
        return None
    broken = [f"{x.level} streams ({'; '.join(x.slo_broken)})" for x in r.levels if x.slo_broken]
    return (
        "latency limit (objective.slo) broken at "
        + (", ".join(broken) or ", ".join(r.slo_broken))
        + ": the search ranks it after configs within the limits"
    )


def _load(rows: list[TrialRow], best: Best | None, conf: ConfirmationState) -> Load | None:
    """With load levels: the best trial's per-level figures and search verdicts, and confirmation's per level."""
    row = next((r for r in rows if r.number == best.trial), None) if best else None
    if row is None:  # nothing confirmed yet: the search's best measurement of the objective
        spec = [r for r in rows if r.speculative and r.levels and r.tok_per_s]
        row = max(spec, key=lambda r: r.tok_per_s or 0.0, default=None)
    if not row or not row.levels:
        return None
    won = [LevelVerdict(x.level, None, None, point_verdict(x.speedup, bool(x.slo_broken))) for x in row.levels]
    return Load(row.number, row.levels, summary_text(won), conf.level_verdicts, conf.level_text)


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _traffic(
    info: TrafficInfo,
    holdout: SubsetCheckRecord | None,
    accepted: SubsetCheckRecord | None,
    res: StudyResult,
    by_number: dict[int, FrozenTrial],
) -> Traffic:
    """A request-log study's subset and guards, the holdout checks as recorded, and the recommended config's
    speedup by length third against its baseline (the search's measurements; none for a baseline)."""
    from autotune.study.winner import acceptance_text

    rest = "subset vs the rest of the log"
    if holdout is not None:
        holdout_text = f"{rest} (baseline trial {holdout['trial']}): {holdout['text']}"
    elif info.holdout:
        holdout_text = f"{rest}: not measured (no baseline measured it)"
    else:
        holdout_text = f"{rest}: off (benchmark.holdout: 0, or no request outside the subset)"
    accepted_text = None
    if accepted is not None:
        accepted_text = f"{rest} (the winner, after confirmation): " + acceptance_text(accepted)
    elif info.holdout:
        accepted_text = "the winner's acceptance on the rest of the log: not measured (no speculative winner confirmed)"
    t = by_number.get(res.recommended.trial) if res.recommended.trial is not None else None
    own = TrialRecord(t).baseline_trial if t is not None and not TrialRecord(t).is_baseline else None
    b = by_number.get(own) if own is not None else None
    by_input, by_output = (
        [
            by_length(TrialRecord(t).prompt_results(), TrialRecord(b).prompt_results(), side=s)
            for s in ("input", "output")
        ]
        if t is not None and b is not None
        else ([], [])
    )
    return Traffic(
        info,
        holdout,
        holdout_text,
        accepted,
        accepted_text,
        by_input,
        length_text(by_input, side="input"),
        by_output,
        length_text(by_output, side="output"),
    )


def _with_methods(study: optuna.Study, report: Report) -> Report:
    """``report`` with its per-method results (``study.methods``; spaces with search.methods only), each method's
    best with its per-position acceptance."""
    per_method = _methods.from_study(study, report.to_json(), report.result.confirmation.rounds)
    if per_method is None:
        return report
    for entry in per_method.get("methods") or []:
        best = entry.get("best")
        row = report.row(best.get("trial")) if best else None
        if best and row is not None and row.accept_per_pos:
            best["accept_per_pos"] = acceptance.summary(row.accept_per_pos)
    return replace(report, methods=per_method)


def _acceptance_guards(
    rows: list[TrialRow], by_number: dict[int, FrozenTrial], references: dict[str, float]
) -> tuple[Guard, ...]:
    """``acceptance-far-below`` (``traffic.acceptance_guards``) on each drafter's fastest measured trial."""
    fastest: dict[str, TrialRow] = {}
    for r in rows:
        drafter = str((r.config or {}).get("drafter") or "")
        if not r.speculative or not drafter or r.duplicate_of is not None or not r.tok_per_s:
            continue
        if drafter not in fastest or r.tok_per_s > (fastest[drafter].tok_per_s or 0.0):
            fastest[drafter] = r
    judged = [(d, r.number, TrialRecord(by_number[r.number]).prompt_results()) for d, r in fastest.items()]
    return tuple(acceptance_guards(judged, references))


def interval_note(conf: ConfirmationState) -> str | None:
    """Why the confirmation's intervals are at the confidence they are at (None: nothing confirmed)."""
    level = conf.confidence
    if level is None:
        cis = [ci for r in conf.results or [] if (ci := r.speedup_ci)]
        level = cis[0].confidence if cis else None
    if level is None:
        return None
    return (
        f"{level * 100:.4g}% intervals: the verdict's confidence (verdict.confidence) at its first look, its error "
        "shared by the k candidates still racing after the first look's rounds (1 - (1 - verdict.confidence) / k: "
        "the pick is the best of k, so that the best of several ties is not a winner by luck); when that look left "
        "the verdict open, confirmation measured more rounds and each further look is held to that error divided "
        "again by the extra looks allowed (Bonferroni), so that looking again cannot make a winner of a config that "
        "is not faster by verdict.min_gain; every candidate's interval is at that level, and one that left the "
        "race after few rounds has a wide one. Each interval's spread starts from the start-to-start noise "
        "(pruning.start_noise, worth 3 rounds; raised to what the rounds show when that is more): its degrees of "
        "freedom are 3 + rounds - 1, so that rounds that agree by luck cannot make a tie look precise"
    )


def _reasons(trials: list[FrozenTrial]) -> dict[str, dict[str, int]]:
    """Pruned and failed trials counted by why."""
    out: dict[str, dict[str, int]] = {"PRUNED": {}, "FAIL": {}}
    for t in trials:
        if t.state not in (TrialState.PRUNED, TrialState.FAIL):
            continue
        r = TrialRecord(t)
        if r.interrupted:
            why = "interrupted"
        elif t.state == TrialState.PRUNED:
            if r.is_duplicate:
                why = "same server config as a pruned trial"
            elif r.prune_reason:
                why = "lost to the leader" if r.prune_rule == "leader" else "lost to the baseline"
            elif r.not_worth_a_start:
                why = "not launched (the surrogate predicts it well behind the best)"
            elif r.fail_kind == ServerOOM.kind:
                why = "out of memory"
            else:
                why = "infeasible (the server would reject or rewrite it)"
        elif records.is_lost(t):
            why = "no outcome recorded (its process stopped)"
        else:
            why = r.fail_kind or "failed"
        bucket = out[t.state.name]
        bucket[why] = bucket.get(why, 0) + 1
    return out


def _warmups(trials: list[FrozenTrial], conf: ConfirmationState) -> WarmUpSummary | None:
    """The warm-up passes of every start, search and confirmation; None without."""
    ws = [TrialRecord(t).warmup for t in trials if not TrialRecord(t).is_duplicate]
    for rnd in [*(conf.check_rounds or []), *conf.rounds]:
        if rnd.starts is not None:
            ws += [r.warmup for r in [*rnd.starts.baseline.values(), *rnd.starts.candidates.values()]]
    return warmup.summary(ws)


def _start_seconds(t: FrozenTrial) -> float:
    """A start's server time: its startup, warm-up passes and timed benchmark (not warm-up requests or references)."""
    return (TrialRecord(t).startup_s or 0.0) + warmup_seconds(t) + bench_seconds(t)


def trial_gpu_s(t: FrozenTrial) -> float:
    """A search trial's server time as ``gpu_time`` bills it (a duplicate started nothing)."""
    r = TrialRecord(t)
    if r.is_duplicate:
        return 0.0
    own = _start_seconds(t) if r.measured or r.startup_s is not None else 0.0
    return own + sum(bill.failed_starts(t))


def gpu_time(trials: list[FrozenTrial], conf: ConfirmationState) -> GpuTime:
    """Server time spent and saved. Pruning saved what a pruned trial did not run: its missing prompts (at its own
    mean time per prompt) and the load levels it did not reach (at the complete trials' mean for that level); a
    duplicate saved the start and benchmark of the trial it copies."""
    by_number = {t.number: t for t in trials}
    searched = spent = pruning = dedup = 0.0
    starts = 0
    complete = [t for t in trials if t.state == TrialState.COMPLETE and not TrialRecord(t).is_duplicate]
    n_prompts = max((len(TrialRecord(t).prompt_results()) for t in complete), default=0)
    level_s: dict[int, list[float]] = {}
    for t in complete:
        for x in TrialRecord(t).levels:
            if x.level > 1 and x.seconds:
                level_s.setdefault(x.level, []).append(x.seconds)
    failed: list[float] = []  # the search's starts that failed (their server seconds until they did)
    for t in trials:
        r = TrialRecord(t)
        if r.is_duplicate:
            orig = by_number.get(r.duplicate_of) if r.duplicate_of is not None else None
            dedup += _start_seconds(orig) if orig is not None else 0.0
            continue
        failed += bill.failed_starts(t)
        if not r.measured and r.startup_s is None:
            continue
        starts += 1
        searched += _start_seconds(t)
        prompts = r.prompt_results()
        if t.state != TrialState.PRUNED or not prompts:
            continue
        if len(prompts) < n_prompts:
            per = sum(p.seconds for p in prompts) / len(prompts)
            pruning += per * (n_prompts - len(prompts))
        reached = {x.level for x in r.levels}
        pruning += sum(_mean(secs) or 0.0 for c, secs in level_s.items() if c not in reached)
    searched, starts = searched + sum(failed), starts + len(failed)
    confirm = confirmation_starts(trials, conf)
    confirm_s, confirm_starts = sum(a + b for _, a, b in confirm), len(confirm)
    confirm_failed = bill.confirmation_failed_s(conf)
    spent = searched + confirm_s
    return GpuTime(
        search_s=searched,
        search_starts=starts,
        failed_starts=len(failed) + len(confirm_failed),
        failed_s=sum(failed) + sum(confirm_failed),
        confirmation_s=confirm_s,
        confirmation_starts=confirm_starts,
        total_s=spent,
        saved_by_pruning_s=pruning,
        saved_by_dedup_s=dedup,
    )


def _best_configs(
    rows: list[TrialRow], confirmed: tuple[CandidateResult, ...], recommended: int | None
) -> tuple[BestConfig, ...]:
    """The five best measured speculative configs by the objective's speedup against the fastest baseline,
    confirmed where confirmation measured it, else the search's; the recommended trial first."""
    cis = {c.trial: c.headline for c in confirmed}
    spec = [
        r
        for r in rows
        if r.speculative and r.state == "COMPLETE" and r.duplicate_of is None and r.speedup_vs_fastest is not None
    ]

    def rank(r: TrialRow) -> tuple[bool, float]:
        ci = cis.get(r.number)
        return (r.number == recommended, ci.point if ci else r.speedup_vs_fastest or 0.0)

    spec.sort(key=rank, reverse=True)
    return tuple(
        BestConfig(
            trial=r.number,
            config=r.config,
            tok_per_s=r.tok_per_s,
            speedup=r.speedup_vs_fastest,
            speedup_ci=(ci := cis.get(r.number)),
            confirmed_speedup=ci.point if ci else None,
            recommended=r.number == recommended,
            accept_length=r.accept_length,
            accept_per_pos=r.accept_per_pos,
        )
        for r in spec[:5]
    )


def _lossless_summary(rows: list[TrialRow], floor: list[records.FloorEntry], greedy: GreedyLossless | None) -> Lossless:
    from autotune.study.winner import greedy_text

    checked = [(r, r.lossless) for r in rows if r.lossless]
    first = checked[0][1] if checked else {}
    return Lossless(
        numerics=sum(len(rec.get("numerics", [])) for r, rec in checked if r.duplicate_of is None),
        lossy_trials=[r.number for r, rec in checked if not rec.get("ok", True)],
        tolerance=first.get("tolerance"),
        tolerance_source=first.get("tolerance_source"),
        baseline_divergences=[f for f in floor if f.divergence is not None],
        baselines_compared=sum(1 for f in floor if f.divergence is None),
        greedy=greedy,
        greedy_text=None if greedy is None else "lossless check at temperature 0: " + greedy_text(dict(greedy)),
        figures_from=None
        if greedy is None
        else (
            "speedups, intervals and the verdict: measured at each prompt's own sampling (the objective); the "
            "lossless check: the same prompts at temperature 0, untimed, the recommended config on one more start "
            "against its search baseline's reference answers"
        ),
    )


def _verdict_text(v: str, exclusions: list[Exclusion], suspects: list[SuspectPrune]) -> str:
    if v == Verdict.INCONCLUSIVE and suspects and not exclusions:
        numbers = ", ".join(str(p.trial) for p in suspects)
        return (
            f"inconclusive: no confirmed config is proven faster than the baseline, but {len(suspects)} config(s) "
            f"(trial(s) {numbers}) were pruned against a search baseline that ran faster than confirmation's fresh "
            f"ones; deploy the baseline, or weigh them: autotune export --trial N -o F, then autotune reverify F"
        )
    if v == Verdict.INCONCLUSIVE and exclusions:
        kinds = sorted({e.kind for e in exclusions})
        return (
            f"inconclusive: no config is proven faster than the baseline, and {len(exclusions)} config(s) could not "
            f"be weighed ({', '.join(kinds)}); deploy the baseline, and see the exclusions"
        )
    return VERDICT_TEXT[v]


def _flags(rows: list[TrialRow], greedy: GreedyLossless | None) -> list[str]:
    out = []
    if greedy is not None and greedy.get("ok") is False:
        out.append(
            f"trial {greedy['trial']} (the confirmed winner): output diverges from its baseline at temperature 0 on "
            f"the same prompts ({lossless.summary_line(greedy)}): broken drafter, kernel or config; its speedup was "
            "measured while sampling, where no answer can be checked: do not deploy it"
        )
    for r in rows:
        if r.fail_kind == DrafterNotEngaged.kind:
            out.append(f"trial {r.number}: drafter not engaged: {r.fail_reason}")
        record = r.lossless
        if record and not record.get("ok", True):
            out.append(
                f"trial {r.number}: output diverges from the baseline at temperature 0 where the baseline was "
                f"confident ({r.lossless_summary}; matching prefix {record['min_prefix_fraction']:.0%}): "
                "broken drafter, kernel or config"
            )
        if r.fail_kind == ServerOOM.kind:
            out.append(f"trial {r.number}: out of memory ({r.prune_reason})")
    return out

"""A study's result, typed and pure over its records: the verdict and what it rests on, the baselines, confirmation's
candidates and pick, and the config to deploy (``study_result``).

``autotune export`` reads it; the report (``autotune.report``) presents it beside the trials. Nothing here reads
the report: presentation reads the study's result, never the reverse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import Config, TrialConfig
from autotune.objective import Objective
from autotune.records import (
    CandidateResult,
    ConfirmationState,
    Exclusion,
    TrialRecord,
    find_baseline,
    find_exclusions,
    is_baseline_trial,
)
from autotune.space import Space
from autotune.stats import Interval, log_ratios
from autotune.verdict import Verdict, loses_on, search_verdict

#: the confidence of the search-only verdict's clearly-loses test (confirmation's: the space's ``verdict.confidence``)
SEARCH_VERDICT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Baseline:
    """The search's first measured baseline of a CUDA-graph setting."""

    trial: int
    tok_per_s: float | None
    cuda_graph: bool
    per_prompt_tok_per_s: tuple[float, ...]

    @property
    def config(self) -> TrialConfig:
        return TrialConfig.baseline(self.cuda_graph)

    def to_json(self) -> dict[str, object]:
        return {
            "trial": self.trial,
            "tok_per_s": self.tok_per_s,
            "cuda_graph": self.cuda_graph,
            "per_prompt_tok_per_s": list(self.per_prompt_tok_per_s),
        }


@dataclass(frozen=True)
class Best:
    """Confirmation's pick, with its headline interval (against the fastest baseline)."""

    trial: int
    params: dict[str, object]  # as Optuna sampled them (a report row's too)
    config: Config
    tok_per_s: float | None
    speedup: float | None
    speedup_ci: Interval | None
    same_setting_speedup_ci: Interval | None
    search_tok_per_s: float | None
    accept_length: float | None

    def to_json(self) -> dict[str, object]:
        return {k: v.to_dict() if isinstance(v, Interval) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Recommendation:
    """The config to deploy, the trial that measured it and why; a confirmed speculative winner carries its
    interval against the fastest baseline (``winner``)."""

    config: Config | None  # None: no baseline measured yet
    trial: int | None
    tok_per_s: float | None
    why: str
    winner: bool = False
    speedup_ci: Interval | None = None

    @property
    def trial_config(self) -> TrialConfig | None:
        return None if self.config is None else TrialConfig.from_dict(self.config)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"config": self.config, "trial": self.trial, "tok_per_s": self.tok_per_s}
        if self.winner:
            out["speedup_ci"] = None if self.speedup_ci is None else self.speedup_ci.to_dict()
        out["why"] = self.why
        return out


@dataclass(frozen=True)
class StudyResult:
    """What a study found: its verdict and what it rests on, baselines, confirmation and the recommendation; the
    trials it read (an export of one trial reads its record) and, with load levels, the per-level rows a schedule
    is built from (confirmed ones, else the search's)."""

    study: str
    simulated: Any  # the simulator's label, None on real hardware
    units: str
    confirmation: ConfirmationState
    verdict: Verdict
    basis: str  # confirmed | not-confirmed | search
    rests_on: str
    exclusions: list[Exclusion]
    baselines: dict[str, Baseline]  # "cuda_graph_on" / "cuda_graph_off", in the order first measured
    fastest_baseline: Baseline | None
    confirmed: tuple[CandidateResult, ...]
    best: Best | None
    recommended: Recommendation
    trials: tuple[FrozenTrial, ...]
    schedule_rows: list[records.LevelRow]
    space: Space | None = None

    def trial(self, number: int | None) -> FrozenTrial | None:
        return next((t for t in self.trials if t.number == number), None)

    def confirmed_of(self, number: int) -> CandidateResult | None:
        return next((c for c in self.confirmed if c.trial == number), None)

    def baseline(self, cuda_graph: bool) -> Baseline | None:
        """The search's baseline of a CUDA-graph setting."""
        return self.baselines.get("cuda_graph_on" if cuda_graph else "cuda_graph_off")

    def search_speedup(self, t: FrozenTrial) -> float | None:
        """A COMPLETE trial's speedup over its own baseline as the search recorded it (a speculative one without a
        record: its objective over its baseline's, ``objective_speedup``)."""
        r = TrialRecord(t)
        if r.speedup is not None or r.role != records.ROLE_SPECULATIVE or r.is_duplicate:
            return r.speedup
        own = self.trial(r.baseline_trial)
        return objective_speedup(t, own, Objective(), 0)[0] if own is not None else None


def study_result(study: optuna.Study, space: Space | None = None) -> StudyResult:
    """The study's result, read once from its records."""
    trials = tuple(records.trials(study))
    conf = records.confirmation(study) or ConfirmationState(keys=[])
    by_number = {t.number: t for t in trials}
    base = baselines(trials)
    fastest = max(base.values(), key=lambda b: b.tok_per_s or 0.0, default=None)
    confirmed = tuple(conf.results or [])
    best = _best(conf, confirmed, by_number)
    if conf.done:
        verdict = conf.verdict or Verdict.INCONCLUSIVE
        basis = conf.basis or "confirmed"
        rests_on = conf.rests_on or basis
        exclusions = conf.exclusions or []
    else:
        verdict, rests_on = _unconfirmed_verdict(study, trials)
        basis = "search"
        exclusions = find_exclusions(study)
    simulated, units = records.study_labels(study)
    return StudyResult(
        study=study.study_name,
        simulated=simulated,
        units=units,
        confirmation=conf,
        verdict=Verdict(verdict),
        basis=basis,
        rests_on=rests_on,
        exclusions=exclusions,
        baselines=base,
        fastest_baseline=fastest,
        confirmed=confirmed,
        best=best,
        recommended=recommend(Verdict(verdict), best, fastest),
        trials=trials,
        schedule_rows=records.confirmed_level_rows(study) or records.level_rows(study),
        space=space,
    )


def baselines(trials: tuple[FrozenTrial, ...]) -> dict[str, Baseline]:
    """The first measured baseline of each CUDA-graph setting (a copy of one not counted)."""
    out: dict[str, Baseline] = {}
    for t in trials:
        r = TrialRecord(t)
        if t.state == TrialState.COMPLETE and r.is_baseline and not r.is_duplicate:
            key = "cuda_graph_on" if r.cuda_graph else "cuda_graph_off"
            if key not in out:
                per_prompt = tuple(t.intermediate_values[s] for s in sorted(t.intermediate_values))
                out[key] = Baseline(t.number, t.value, bool(r.cuda_graph), per_prompt)
    return out


def _best(
    conf: ConfirmationState, confirmed: tuple[CandidateResult, ...], by_number: dict[int, FrozenTrial]
) -> Best | None:
    if conf.best is None:
        return None
    c = next(c for c in confirmed if c.trial == conf.best)
    t = by_number[conf.best]
    ci = c.headline
    return Best(
        trial=t.number,
        params=dict(t.params),
        config=c.config,
        tok_per_s=c.mean_tok_per_s,
        speedup=ci.point if ci else None,
        speedup_ci=ci,
        same_setting_speedup_ci=c.speedup_ci,
        search_tok_per_s=t.value,
        accept_length=TrialRecord(t).accept_length,
    )


def recommend(verdict: Verdict, best: Best | None, fastest: Baseline | None) -> Recommendation:
    """The config to deploy: the confirmed winner, else the fastest baseline. If a baseline under another
    CUDA-graph setting is faster than the winner, that baseline is recommended instead (and said so)."""
    fastest_cfg = fastest.config.to_dict() if fastest is not None else None
    if verdict == Verdict.SPECULATION_WINS and best is not None:
        if fastest is not None and fastest.tok_per_s and best.tok_per_s and fastest.tok_per_s > best.tok_per_s:
            return Recommendation(
                fastest_cfg,
                fastest.trial,
                fastest.tok_per_s,
                "speculation wins against its own baseline, but a baseline under another CUDA-graph setting is "
                "faster still",
            )
        return Recommendation(
            best.config, best.trial, best.tok_per_s, "confirmed speculative winner", True, best.speedup_ci
        )
    if fastest is None:
        return Recommendation(None, None, None, "no baseline measured yet")
    return Recommendation(
        fastest_cfg,
        fastest.trial,
        fastest.tok_per_s,
        "no speculative config is proven faster: deploy the fastest baseline",
    )


def _unconfirmed_verdict(study: optuna.Study, trials: tuple[FrozenTrial, ...]) -> tuple[Verdict, str]:
    """Without confirmation (``verdict.search_verdict``): baseline-wins only if every measured speculative trial
    clearly lost to its baseline, at a fixed 95% and the default start noise (not the space's)."""
    spec = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE and not is_baseline_trial(t) and not TrialRecord(t).is_duplicate
    ]
    return search_verdict((_lost(study, t) for t in spec), len(find_exclusions(study)))


def _lost(study: optuna.Study, t: FrozenTrial) -> bool | None:
    """Whether a search trial clearly lost to its baseline over its measured prompts (None: no baseline)."""
    b = find_baseline(study, TrialRecord(t).cuda_graph)
    if b is None:
        return None
    steps = sorted(t.intermediate_values)
    logs = log_ratios([t.intermediate_values[s] for s in steps], [b.intermediate_values.get(s) for s in steps])
    return loses_on(logs, confidence=SEARCH_VERDICT_CONFIDENCE)


def objective_speedup(
    t: FrozenTrial, ref: FrozenTrial | None, obj: Objective, n_prompts: int
) -> tuple[float | None, str | None]:
    """The one speedup of a study: ``t``'s objective over ``ref``'s (a COMPLETE baseline), and what it rests on.

    COMPLETE: the ratio of the objective values (``autotune.objective``), the figure the search, confirmation and
    the recommendation use. A trial stopped early has no objective value: the same ratio over what it measured
    (``Objective.partial_speedup``); the basis says which."""
    if ref is None or not ref.value or TrialRecord(t).is_duplicate:
        return None, None
    if t.state == TrialState.COMPLETE:
        return (t.value / ref.value, "objective") if t.value else (None, None)
    r, b = TrialRecord(t), TrialRecord(ref)
    return obj.partial_speedup(
        r.prompt_results(), b.prompt_results(), r.level_tok_per_s(), b.level_tok_per_s(), n_prompts
    )

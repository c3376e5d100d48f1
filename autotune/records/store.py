"""Reading and writing one trial's record: ``TrialRecord`` (typed reads) and ``TrialWriter`` (writes while it runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import optuna
from optuna.trial import FrozenTrial

from autotune.acceptance import AcceptPositions, pool
from autotune.config import LaunchInfo, LevelSummary, PromptResult, ReferenceOutput, TrialConfig
from autotune.records.schema import (
    ACCEPT_LENGTH,
    ARGV,
    BASELINE_DRAFTER,
    BASELINE_TRIAL,
    CLAIMED,
    CONFIG,
    CONFIG_KEY,
    COPIED_BY_DUPLICATES,
    CRASHES,
    DUPLICATE_OF,
    EFFECTIVE,
    ENV,
    FAIL_KIND,
    FAIL_REASON,
    FAILED_STARTS,
    FEASIBLE,
    INFEASIBLE,
    INTERRUPTED,
    LEVELS,
    LOG_PATH,
    LOG_TAIL,
    LOG_TAIL_CHARS,
    LOSSLESS,
    MEASURED,
    NOT_LAUNCHED,
    NOT_WORTH_A_START,
    OUTPUTS,
    PARAM_CUDA_GRAPH,
    PARAM_DRAFTER,
    PARAM_METHOD,
    PROMPTS,
    PRUNE_REASON,
    PRUNE_RULE,
    PRUNED_AGAINST,
    REFERENCE,
    ROLE,
    ROLE_BASELINE,
    ROLE_SPECULATIVE,
    SEEDED,
    SERVER_EFFECTIVE,
    SLO_BROKEN,
    SPEEDUP,
    SPEEDUP_UPPER,
    STARTUP_S,
    WARMUP,
    WORKER,
)
from autotune.warmup import WarmUp

_T = TypeVar("_T")


class TrialRecord:
    """Typed read access to one trial's record (a ``FrozenTrial``, or the running ``optuna.Trial``)."""

    __slots__ = ("trial", "attrs")

    def __init__(self, trial: FrozenTrial | optuna.Trial, attrs: dict[str, Any] | None = None) -> None:
        """``attrs``: the trial's user attrs where the caller has them without a copy (a running ``optuna.Trial``
        deep-copies them on every read: ``autotune.study._optuna.live_attrs``)."""
        self.trial = trial
        self.attrs: dict[str, Any] = trial.user_attrs if attrs is None else attrs

    def _attr(self, key: str, default: _T) -> _T:
        """The stored attr ``key`` (``default`` when absent), as the type of ``default``: stored JSON, not checked."""
        value: _T = self.attrs.get(key, default)
        return value

    @property
    def role(self) -> str | None:
        return self.attrs.get(ROLE)

    @property
    def is_baseline(self) -> bool:
        """Baseline trials are enqueued with role=baseline (the sampler never proposes them)."""
        return self.attrs.get(ROLE) == ROLE_BASELINE or self.trial.params.get(PARAM_DRAFTER) == BASELINE_DRAFTER

    @property
    def drafter(self) -> Any:
        """The drafter param; in a method space (param ``method``) the suggested config's drafter (None: model-free)."""
        if PARAM_DRAFTER in self.trial.params or PARAM_METHOD not in self.trial.params:
            return self.trial.params.get(PARAM_DRAFTER)
        return (self.attrs.get(CONFIG) or {}).get(PARAM_DRAFTER)

    @property
    def method(self) -> Any:
        """The method param of a trial in a space with ``search.methods`` (None elsewhere)."""
        return self.trial.params.get(PARAM_METHOD)

    @property
    def is_speculative(self) -> bool:
        """Not a baseline, and a drafter or a method was suggested."""
        return not self.is_baseline and (PARAM_DRAFTER in self.trial.params or PARAM_METHOD in self.trial.params)

    @property
    def cuda_graph(self) -> Any:
        return self.trial.params.get(PARAM_CUDA_GRAPH)

    @property
    def seeded(self) -> str | None:
        return self.attrs.get(SEEDED)

    @property
    def config(self) -> dict[str, Any] | None:
        return self.attrs.get(CONFIG)

    @property
    def effective(self) -> dict[str, Any] | None:
        return self.attrs.get(EFFECTIVE)

    @property
    def shown_config(self) -> dict[str, Any] | None:
        """The effective config, else the suggested one (a config the server would reject has no effective one)."""
        return self.attrs.get(EFFECTIVE) or self.attrs.get(CONFIG)

    def effective_config(self) -> TrialConfig:
        return TrialConfig.from_dict(self.attrs.get(EFFECTIVE) or {})

    @property
    def config_key(self) -> str | None:
        return self.attrs.get(CONFIG_KEY)

    @property
    def duplicate_of(self) -> int | None:
        return self.attrs.get(DUPLICATE_OF)

    @property
    def is_duplicate(self) -> bool:
        return DUPLICATE_OF in self.attrs

    @property
    def measured(self) -> bool:
        return bool(self.attrs.get(MEASURED))

    @property
    def interrupted(self) -> bool:
        return bool(self.attrs.get(INTERRUPTED))

    @property
    def not_launched(self) -> bool:
        return bool(self.attrs.get(NOT_LAUNCHED))

    @property
    def fail_kind(self) -> str | None:
        return self.attrs.get(FAIL_KIND)

    @property
    def fail_reason(self) -> str | None:
        return self.attrs.get(FAIL_REASON)

    @property
    def infeasible(self) -> str | None:
        return self.attrs.get(INFEASIBLE)

    @property
    def feasible(self) -> bool | None:
        return self.attrs.get(FEASIBLE)

    @property
    def prune_reason(self) -> str | None:
        return self.attrs.get(PRUNE_REASON)

    @property
    def speedup_upper(self) -> float | None:
        return self.attrs.get(SPEEDUP_UPPER)

    @property
    def prune_rule(self) -> str | None:
        """``baseline`` or ``leader`` for a trial the pruner stopped (older studies: baseline)."""
        if self.attrs.get(PRUNE_REASON) is None:
            return None
        return self._attr(PRUNE_RULE, "baseline")

    @property
    def pruned_against(self) -> int | None:
        return self.attrs.get(PRUNED_AGAINST)

    @property
    def not_worth_a_start(self) -> dict[str, Any] | None:
        """Not launched: the surrogate's chance of it reaching the best measured config was too small
        (``search.not_worth_a_start``)."""
        return self.attrs.get(NOT_WORTH_A_START)

    @property
    def speedup(self) -> float | None:
        return self.attrs.get(SPEEDUP)

    @property
    def accept_length(self) -> float | None:
        return self.attrs.get(ACCEPT_LENGTH)

    @property
    def prompts(self) -> list[dict[str, Any]]:
        """Per-prompt results as stored (the report shows these dicts); ``prompt_results`` reads them typed."""
        return self._attr(PROMPTS, [])

    @property
    def accept_positions(self) -> AcceptPositions | None:
        """Its prompts' per-position acceptance counts pooled (``autotune.acceptance.pool``; None: the server
        reported none): ``rates`` are accepted at position i / drafts, an explanation, never a ranking."""
        return pool(AcceptPositions.from_dict(p.get("accept_positions")) for p in self.prompts)

    def prompt_results(self) -> list[PromptResult]:
        """Per-prompt results, in the order measured (``PromptResult``, without the answers' text)."""
        return [PromptResult.from_dict(p) for p in self.prompts]

    @property
    def startup_s(self) -> float | None:
        return self.attrs.get(STARTUP_S)

    @property
    def warmup(self) -> WarmUp:
        """Its untimed warm-up passes (``autotune.warmup``); empty when it had none."""
        return WarmUp.from_dict(self.attrs.get(WARMUP))

    @property
    def crashes(self) -> list[str]:
        return list(self.attrs.get(CRASHES) or [])

    @property
    def failed_starts(self) -> list[dict[str, Any]]:
        """Its starts that failed (``{"kind", "seconds"}``: server seconds each held the machine), billed."""
        return list(self.attrs.get(FAILED_STARTS) or [])

    @property
    def log_path(self) -> str | None:
        return self.attrs.get(LOG_PATH)

    @property
    def argv(self) -> list[str] | None:
        return self.attrs.get(ARGV)

    @property
    def baseline_trial(self) -> int | None:
        return self.attrs.get(BASELINE_TRIAL)

    @property
    def outputs(self) -> list[str]:
        return self._attr(OUTPUTS, [])

    def references(self) -> list[ReferenceOutput | None]:
        return [ReferenceOutput.from_dict(r) if r else None for r in self.attrs.get(REFERENCE, [])]

    @property
    def lossless(self) -> dict[str, Any] | None:
        return self.attrs.get(LOSSLESS)

    @property
    def levels(self) -> list[dict[str, Any]]:
        """Per-level summaries as stored (empty without load levels); ``level_results`` reads them typed."""
        return self._attr(LEVELS, [])

    def level_results(self) -> list[LevelSummary]:
        """Per-level summaries, lowest level first (empty without load levels)."""
        return [LevelSummary.from_dict(x) for x in self.levels]

    def level(self, level: int) -> LevelSummary | None:
        """Load level ``level``'s summary (None: not measured)."""
        return next((x for x in self.level_results() if x.level == int(level)), None)

    def level_tok_per_s(self) -> dict[int, float]:
        return {x.level: x.tok_per_s for x in self.level_results()}

    @property
    def slo_broken(self) -> list[str]:
        return self._attr(SLO_BROKEN, [])

    @property
    def lossy(self) -> bool:
        """A lossless record that says the answers diverged where the baseline was confident."""
        return not (self.attrs.get(LOSSLESS) or {}).get("ok", True)


# ---------------------------------------------------------------------------------------------- writing


class TrialWriter:
    """Writes the running trial's record (Optuna accepts user attrs only while a trial runs)."""

    __slots__ = ("trial",)

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial

    def _set(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, value)

    def claimed(self) -> None:
        self._set(CLAIMED, True)

    def started(self, config: TrialConfig, worker: str) -> None:
        self._set(CONFIG, config.to_dict())
        self._set(ROLE, ROLE_BASELINE if config.is_baseline else ROLE_SPECULATIVE)
        self._set(WORKER, worker)

    def resolved(self, effective: TrialConfig) -> None:
        self._set(EFFECTIVE, effective.to_dict())
        self._set(CONFIG_KEY, effective.key())

    def duplicate(self, of: FrozenTrial) -> None:
        self._set(DUPLICATE_OF, of.number)
        for k in COPIED_BY_DUPLICATES:
            if k in of.user_attrs:
                self._set(k, of.user_attrs[k])

    def failed(self, kind: str | None, reason: str, *, not_launched: bool = False) -> None:
        self._set(FAIL_KIND, kind)
        self._set(FAIL_REASON, reason)
        if not_launched:
            self._set(NOT_LAUNCHED, True)

    def infeasible(self, kind: str, reason: str) -> None:
        self._set(FAIL_KIND, kind)
        self._set(INFEASIBLE, reason)
        self._set(FEASIBLE, False)

    def pruned(self, reason: str, upper: float | None, rule: str | None = None, against: int | None = None) -> None:
        self._set(PRUNE_REASON, reason)
        self._set(SPEEDUP_UPPER, upper)
        if rule is not None:
            self._set(PRUNE_RULE, rule)
        if against is not None:
            self._set(PRUNED_AGAINST, against)

    def not_worth_a_start(self, skip: dict[str, Any]) -> None:
        self._set(NOT_WORTH_A_START, skip)

    def server_log(self, tail: str, path: str | None) -> None:
        """The log of a server that did not start."""
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])
        self._set(LOG_PATH, path)

    def log_tail(self, tail: str) -> None:
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])

    def crashes(self, lines: list[str]) -> None:
        self._set(CRASHES, list(lines))

    def failed_starts(self, starts: list[dict[str, Any]]) -> None:
        self._set(FAILED_STARTS, list(starts))

    def interrupted(self) -> None:
        self._set(INTERRUPTED, True)

    def baseline_trial(self, number: int) -> None:
        self._set(BASELINE_TRIAL, number)

    def launched(self, info: LaunchInfo) -> None:
        self._set(ARGV, list(info.argv))
        self._set(ENV, dict(info.env))
        self._set(SERVER_EFFECTIVE, info.effective)

    def measuring(self, info: LaunchInfo) -> None:
        """The server runs the config it was asked for: from here on the trial is a measurement."""
        self._set(STARTUP_S, info.startup_s)
        self._set(LOG_PATH, info.log_path)
        self._set(MEASURED, True)

    def warmup(self, w: WarmUp) -> None:
        if w.passes:
            self._set(WARMUP, w.to_dict())

    def prompts(self, results: Sequence[PromptResult]) -> None:
        self._set(PROMPTS, [x.to_dict() for x in results])

    def references(self, refs: Sequence[ReferenceOutput | None]) -> None:
        self._set(REFERENCE, [r.to_dict() if r is not None else None for r in refs])

    def measured(self, accept_length: float | None) -> None:
        self._set(ACCEPT_LENGTH, accept_length)
        self._set(FEASIBLE, True)

    def outputs(self, texts: list[str]) -> None:
        self._set(OUTPUTS, texts)

    def speedup(self, value: float) -> None:
        self._set(SPEEDUP, value)

    def lossless(self, record: dict[str, Any]) -> None:
        self._set(LOSSLESS, record)

    def levels(self, summaries: list[dict[str, Any]]) -> None:
        self._set(LEVELS, summaries)

    def slo_broken(self, levels: list[str]) -> None:
        self._set(SLO_BROKEN, levels)

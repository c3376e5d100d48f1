"""A trial's outcomes before ``trial.TrialObjective`` settles them: what its steps raise (the table in ``trial``)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError, BenchmarkError, DrafterNotEngaged, LaunchError
from autotune.records import Skip, TrialRecord


class Pruned(optuna.TrialPruned):
    """PRUNED; ``reason`` goes into the ``trial-end`` event (Optuna logs ``message``)."""

    infeasible = False

    def __init__(self, reason: str, *, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason

    def event(self) -> dict[str, Any]:
        return {"state": TrialState.PRUNED.name, "reason": self.reason}


class Infeasible(Pruned):
    """The server would reject the config, or it ran (or, by an earlier trial, would run) out of memory."""

    infeasible = True

    def __init__(self, reason: str, *, kind: str = "infeasible", launch_error: LaunchError | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        self.launch_error = launch_error


class Lost(Pruned):
    """The pruner's verdict between two prompts: the upper bound of the speedup over the baseline or over the
    leader (``rule``) is below 1."""

    def __init__(self, reason: str, upper: float | None, rule: str = "baseline", against: int | None = None) -> None:
        super().__init__(reason)
        self.upper = upper
        self.rule = rule
        self.against = against

    def event(self) -> dict[str, Any]:
        return {**super().event(), "rule": self.rule}


class NotWorthAStart(Pruned):
    """Not launched: the surrogate gives the sampler's (or the design's) proposal too little chance of reaching the
    best measured config (``search.not_worth_a_start``); no server start, no prompts, no intermediate values (TPE
    ranks it below every measured trial)."""

    def __init__(self, skip: Skip) -> None:
        super().__init__(f"not launched: {skip.reason}")
        self.skip = skip


class SameAsPruned(Pruned):
    """A duplicate of a pruned trial: pruned too, infeasible if that one was."""

    def __init__(self, dup: FrozenTrial) -> None:
        super().__init__(
            f"same server config as trial {dup.number}",
            message=f"same server config as trial {dup.number}, which was pruned",
        )
        self.value = dup.value
        self.infeasible = TrialRecord(dup).feasible is False

    def event(self) -> dict[str, Any]:
        return {**super().event(), "tok_per_s": self.value}


class NotLaunched(AutotuneError):
    """Refused before launch: the same server config failed twice (``kind``: how the last one failed)."""

    def __init__(self, message: str, kind: str | None) -> None:
        super().__init__(message)
        self.kind = kind


class Requeued(AutotuneError):
    """The trial cannot be measured now and does not use the budget: its config is queued again."""


#: what FAILs a trial; Optuna records these as FAIL and goes on (anything else stops the study)
FAILURES = (LaunchError, BenchmarkError, DrafterNotEngaged, NotLaunched, Requeued)

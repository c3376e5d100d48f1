"""``Orchestrator``: one study's search and confirmation behind one object (what the CLI, the scripts and the
tests drive). Each job lives in its own module; this class only holds the shared ``StudyContext`` and
delegates."""

from __future__ import annotations

import functools

import optuna
from optuna.trial import FrozenTrial

from autotune.backends.base import Backend
from autotune.evidence import Evidence
from autotune.records import ConfirmationState
from autotune.seam import Clock, MonotonicClock, Runner
from autotune.space import Space
from autotune.study import confirm as _confirm
from autotune.study import ladder as _ladder
from autotune.study import search as _search
from autotune.study import trial as _trial
from autotune.study import winner as _winner
from autotune.study.context import Listener, StudyContext, quiet
from autotune.surrogate import one_blas_thread


class Orchestrator:
    """Runs the search phase and the confirmation phase of one study."""

    def __init__(
        self,
        space: Space,
        backend: Backend,
        runner: Runner,
        study: optuna.Study,
        *,
        clock: Clock | None = None,
        listener: Listener | None = None,
        evidence: Evidence | None = None,
    ) -> None:
        self.ctx = StudyContext(
            space,
            backend,
            runner,
            study,
            MonotonicClock() if clock is None else clock,
            quiet if listener is None else listener,
            evidence,
        )
        self.objective = _trial.TrialObjective(self.ctx, gate=functools.partial(_search.not_worth_a_start, self.ctx))

    # -- the search -----------------------------------------------------------------------------------
    def search(self, n_trials: int, *, timeout_s: float | None = None) -> None:
        with one_blas_thread():
            _search.search(self.ctx, self.objective, n_trials, timeout_s=timeout_s)
            if self.ctx.space.benchmark.loaded:  # each level's winner measured: the best config's draft-length ladder
                _ladder.run(self.ctx, self.objective)

    # -- confirmation ---------------------------------------------------------------------------------
    def candidates(self) -> list[FrozenTrial]:
        return _confirm.candidates(self.ctx)

    def confirm(self) -> ConfirmationState:
        """Confirmation, then the checks on its winner's one more start (``study.winner``): the lossless check at
        temperature 0 (a space whose prompts sample), its acceptance on a request log's holdout."""
        with one_blas_thread():
            state = _confirm.confirm(self.ctx)
        _winner.check(self.ctx, state)
        return state


def run(
    space: Space,
    backend: Backend,
    runner: Runner,
    study: optuna.Study,
    *,
    n_trials: int | None = None,
    clock: Clock | None = None,
    listener: Listener | None = None,
    confirm: bool = True,
    evidence: Evidence | None = None,
) -> ConfirmationState | None:
    """Search, then confirm. Returns the confirmation state (verdict inside; None with ``confirm=False``). With
    ``evidence``, each trial's log, per-prompt results and note are written for the dashboard."""
    orch = Orchestrator(space, backend, runner, study, clock=clock, listener=listener, evidence=evidence)
    orch.search(n_trials if n_trials is not None else space.budget.n_trials, timeout_s=space.budget.timeout_s)
    if not confirm:
        return None
    return orch.confirm()

"""What was queued runs before the surrogate's picks, and each pick runs on the evidence it was made on. On an H100
(docs/gpu-runs/2026-12-06-h100-methods) a method study whose server defaults and design outnumbered the sampler's
share queued a surrogate pick before every design trial; the picks ran later on older evidence, a design trial a
cut run re-queued waited behind them, the budget ran out first, and n-gram got 2 measured configs of its 3."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune import records
from autotune.backends.sglang import SGLangBackend
from autotune.records import TrialRecord
from autotune.seam import VirtualClock
from autotune.sim import ModelRunner, simulated_space
from autotune.space import load_space
from autotune.study import Orchestrator, open_study

from .conftest import CutAt

ROOT = Path(__file__).resolve().parents[2]
N_TRIALS = 16  # as on the H100: the sampler's share (8) is smaller than the baseline, the defaults and the design
QUEUED = (records.SEEDED_DEFAULT, records.SEEDED_DESIGN)


def _space():
    space = simulated_space(load_space(str(ROOT / "spaces/methods.yaml")))
    return space


def _run_order(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    started = [t for t in study.get_trials() if t.datetime_start is not None]
    return sorted(started, key=lambda t: (t.datetime_start, t.number))


def _assert_queued_first(trials: list[optuna.trial.FrozenTrial]) -> None:
    kinds = [TrialRecord(t).seeded for t in trials if not TrialRecord(t).is_baseline]
    first_pick = kinds.index(records.SEEDED_SURROGATE)
    assert all(k not in QUEUED for k in kinds[first_pick:]), kinds


def test_the_design_runs_before_the_surrogate_picks_and_no_pick_is_left_waiting(tmp_path):
    space, backend, clock = _space(), SGLangBackend(), VirtualClock()
    study = open_study(space, f"sqlite:///{tmp_path}/q.db", "q", seed=0, simulated=True)
    Orchestrator(space, backend, ModelRunner(space, backend, clock, seed=1), study, clock=clock).search(N_TRIALS)
    trials = study.get_trials()
    assert not [t.number for t in trials if t.state == TrialState.WAITING], "a queued pick never ran"
    _assert_queued_first(_run_order(study))


def test_a_design_trial_a_cut_run_left_runs_first_when_the_study_resumes(tmp_path):
    space, backend, clock = _space(), SGLangBackend(), VirtualClock()
    storage = f"sqlite:///{tmp_path}/q.db"
    study = open_study(space, storage, "q", seed=0, simulated=True)
    runner = CutAt(space, backend, clock, seed=1, storage=storage, phase=records.SEEDED_DESIGN, nth=3, name="q")
    with pytest.raises(KeyboardInterrupt):
        Orchestrator(space, backend, runner, study, clock=clock).search(N_TRIALS)
    (cut,) = [t for t in study.get_trials() if t.state == TrialState.FAIL]

    study = open_study(space, storage, "q", seed=0, simulated=True)
    Orchestrator(space, backend, ModelRunner(space, backend, clock, seed=2), study, clock=clock).search(N_TRIALS)
    trials = study.get_trials()
    (again,) = [t for t in trials if t.user_attrs.get("requeued_from") == cut.number]
    assert again.state in (TrialState.COMPLETE, TrialState.PRUNED), "the cut design trial never ran again"
    assert not [t.number for t in trials if t.state == TrialState.WAITING]
    _assert_queued_first(_run_order(study))

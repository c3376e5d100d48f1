"""A load-level study cut during its level phase (a level's surrogate picks, the draft-length ladder) and resumed:
what the cut left queued is measured, nothing is queued twice and no trial is left waiting. On the H200
(docs/gpu-runs/2026-12-04-h200-levels20) a study cut after two of three ladder rungs finished with the third left
WAITING in the study: the resumed run had counted it as measured and never ran it."""

from __future__ import annotations

import json
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
from autotune.study import _optuna as optuna_params
from autotune.study.ladder import LEVEL_ROUNDS, SEEDED_LADDER, SEEDED_LEVEL

from .conftest import CutAt

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("phase", [SEEDED_LADDER, SEEDED_LEVEL])
def test_a_study_cut_in_its_level_phase_resumes_it_and_leaves_nothing_waiting(tmp_path, phase):
    space = simulated_space(load_space(str(ROOT / "scripts/bench_scenarios/llama-load.space.yaml")))
    backend, clock = SGLangBackend(), VirtualClock()
    storage = f"sqlite:///{tmp_path}/cut.db"
    runner = CutAt(space, backend, clock, seed=1, storage=storage, phase=phase, nth=2)
    study = open_study(space, storage, "cut", seed=0, simulated=True)
    with pytest.raises(KeyboardInterrupt):
        Orchestrator(space, backend, runner, study, clock=clock).search(space.budget.n_trials)
    waiting = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    cut = [t for t in study.get_trials() if t.state == TrialState.FAIL]
    assert waiting and len(cut) == 1, "the cut should leave the phase's trial interrupted and others queued"
    # the interrupted trial is queued again as what it was: its phase's, so that the phase runs it
    requeued = [t for t in waiting if t.user_attrs.get("requeued_from") == cut[0].number]
    assert len(requeued) == 1 and requeued[0].user_attrs.get("seeded") == phase

    study = open_study(space, storage, "cut", seed=0, simulated=True)
    Orchestrator(space, backend, ModelRunner(space, backend, clock, seed=2), study, clock=clock).search(
        space.budget.n_trials
    )
    trials = study.get_trials()
    assert [t.number for t in trials if t.state == TrialState.WAITING] == [], "a queued trial was never run"
    # every config queued before the cut was measured, each once (not queued again by the resumed phase)
    queued = {json.dumps(optuna_params.params_of(t), sort_keys=True) for t in waiting}
    ran = [json.dumps(t.params, sort_keys=True) for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert queued <= set(ran)
    measured = [
        TrialRecord(t).config_key
        for t in trials
        if TrialRecord(t).seeded in (SEEDED_LEVEL, SEEDED_LADDER)
        and t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        and not TrialRecord(t).is_duplicate
    ]
    assert len(measured) == len(set(measured)), "a config of the level phase was measured twice"
    assert records.level_phase(study) == records.LevelPhase(LEVEL_ROUNDS, ladder=True)


def test_a_level_pick_stays_within_the_families_measured_at_that_level():
    """On the H200 (docs/gpu-runs/2026-12-04-h200-levels21) both level picks went to the bad drafter, whose one
    trial had been pruned: a family (drafter, method) never measured to the end is the prior's guess, which
    outranks every measured point. The pool keeps the measured families' unlaunched points only."""
    from autotune.config import TrialConfig
    from autotune.study.ladder import level_pool

    grid = [TrialConfig.make(d, True, draft_n_max=n) for d in ("good", "bad") for n in (1, 2, 4, 8)]
    grid.append(TrialConfig.make(None, True, method="ngram", draft_n_max=4))
    good = [g for g in grid if g.drafter == "good"]
    keys = {good[0].key(), grid[4].key()}  # launched: good n 1 (measured), bad n 1 (pruned)
    pool = level_pool(grid, keys, [good[0]])
    assert pool == good[1:]
    # a model-free method is its own family: measured, its points come in; the bad drafter's never do
    ngram = grid[-1]
    assert level_pool(grid, keys, [good[0], ngram.with_knobs(draft_n_max=2)]) == [*good[1:], ngram]


def test_a_resumed_level_phase_does_what_an_uncut_one_does_after_a_round_without_picks(tmp_path):
    """levels21 on the H200: the first round of level picks found nothing (too few configs measured), the ladder
    was cut, and the resumed run did a second round of picks after the ladder, which an uncut run never does (a
    round without picks ends the rounds). A small budget on the simulator, cut at the ladder's second start: the
    resumed study measures the ladder and no level pick, as the uncut one."""
    import dataclasses

    base = simulated_space(load_space(str(ROOT / "scripts/bench_scenarios/llama-load.space.yaml")))
    space = dataclasses.replace(base, budget=dataclasses.replace(base.budget, n_trials=3))
    backend, clock = SGLangBackend(), VirtualClock()

    uncut = open_study(space, optuna.storages.InMemoryStorage(), "uncut", seed=0, simulated=True)
    Orchestrator(space, backend, ModelRunner(space, backend, clock, seed=1), uncut, clock=clock).search(3)
    seeded = [TrialRecord(t).seeded for t in uncut.get_trials()]
    assert SEEDED_LADDER in seeded and SEEDED_LEVEL not in seeded, "the setting should leave the rounds empty"

    storage = f"sqlite:///{tmp_path}/cut.db"
    runner = CutAt(space, backend, clock, seed=1, storage=storage, phase=SEEDED_LADDER, nth=2)
    study = open_study(space, storage, "cut", seed=0, simulated=True)
    with pytest.raises(KeyboardInterrupt):
        Orchestrator(space, backend, runner, study, clock=clock).search(3)
    study = open_study(space, storage, "cut", seed=0, simulated=True)
    Orchestrator(space, backend, ModelRunner(space, backend, clock, seed=2), study, clock=clock).search(3)
    trials = study.get_trials()
    assert not [t.number for t in trials if t.state == TrialState.WAITING]
    assert [t.number for t in trials if TrialRecord(t).seeded == SEEDED_LEVEL] == []
    ladder = {TrialRecord(t).config_key for t in trials if TrialRecord(t).seeded == SEEDED_LADDER}
    assert ladder == {TrialRecord(t).config_key for t in uncut.get_trials() if TrialRecord(t).seeded == SEEDED_LADDER}
    assert records.level_phase(study) == records.LevelPhase(LEVEL_ROUNDS, ladder=True)

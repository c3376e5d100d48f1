"""The quick start (spaces/eagle3.yaml, the field report's landscape) on the in-process simulator: every config
truly slower than 0.7x of its baseline is stopped by its second prompt, and no config that beats its baseline is
pruned by the baseline rule."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.records import TrialRecord
from autotune.seam import VirtualClock
from autotune.sim import simulated_space
from autotune.sim.runner import ModelRunner
from autotune.space import load_space
from autotune.study import Orchestrator, open_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quick_start_stops_the_field_reports_losers_by_their_second_prompt(seed: int) -> None:
    space = simulated_space(load_space(str(ROOT / "spaces/eagle3.yaml")))
    backend = SGLangBackend()
    runner = ModelRunner(space, backend, VirtualClock(), seed=seed)
    study = open_study(space, optuna.storages.InMemoryStorage(), f"quick-{seed}", seed=seed, simulated=True)
    Orchestrator(space, backend, runner, study, clock=runner.clock).search(space.budget.n_trials)
    slow, checked = [], 0
    for t in study.get_trials():
        r = TrialRecord(t)
        if r.is_baseline or not r.measured or r.is_duplicate:
            continue
        eff = r.effective_config()
        speedup = runner.true_tok_per_s(eff) / runner.true_tok_per_s(TrialConfig.baseline(eff.cuda_graph))
        if speedup < 0.7:
            checked += 1
            if not (t.state == TrialState.PRUNED and len(t.intermediate_values) <= 2):
                slow.append((t.number, round(speedup, 3), t.state.name, len(t.intermediate_values)))
        if speedup > 1.0:
            assert r.prune_rule != "baseline", f"trial {t.number} beats its baseline ({speedup:.3f}) but was pruned"
    assert checked >= 3  # the field report's 0.6x configs were measured
    assert not slow, f"slower than 0.7x and not stopped by the second prompt: {slow}"

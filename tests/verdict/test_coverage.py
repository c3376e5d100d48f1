"""The confirmation's 95% intervals contain the simulator's true speedup in at least 18 of 20 seeded studies.

Each study runs the real orchestration (search, pruning, confirmation) on the simulator's model in-process on a
virtual clock; the true speedup is the noise-free expected tok/s ratio of the confirmed config over the baseline.
"""

from __future__ import annotations

import dataclasses

import optuna

from autotune.backends.sglang import SGLangBackend
from autotune.clock import VirtualClock
from autotune.config import TrialConfig
from autotune.sim import simulated_space
from autotune.sim.runner import ModelRunner
from autotune.space import BudgetSpec, SimulateSpec, load_space
from autotune.study import Orchestrator, open_study

from ..cli.helpers import REPO


def _one(seed: int) -> tuple[dict, float]:
    base = load_space(str(REPO / "spaces" / "llama-8b-eagle3.yaml"))
    space = simulated_space(
        dataclasses.replace(
            base,
            budget=BudgetSpec(n_trials=14),
            simulate=dataclasses.replace(base.simulate or SimulateSpec(), seed=seed),
        )
    )
    backend = SGLangBackend()
    runner = ModelRunner(space, backend, VirtualClock(), seed=seed)
    study = open_study(space, optuna.storages.InMemoryStorage(), "cov", seed=seed)
    orch = Orchestrator(space, backend, runner, study)
    orch.search(14)
    state = orch.confirm()
    best = next(r for r in state["results"] if r["trial"] == state["best"])
    config = TrialConfig.from_dict(best["config"])
    true = runner.true_tok_per_s(config) / runner.true_tok_per_s(TrialConfig.baseline(config.cuda_graph))
    return best["speedup_ci"], true


def test_confirmation_intervals_cover_the_true_speedup():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    covered = 0
    misses = []
    for seed in range(20):
        ci, true = _one(seed)
        if ci["low"] <= true <= ci["high"]:
            covered += 1
        else:
            misses.append((seed, ci, true))
    assert covered >= 18, misses

"""A flat llama.cpp space (drafter, CUDA graphs, draft_n_max, draft_p_min) is a finite grid: its search gets the
surrogate's picks and the settled stop like SGLang's. Runner seam: ``ScriptedRunner``."""

from __future__ import annotations

import math

import optuna

from autotune import records
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.llamacpp_methods import NEW_SPELLING
from autotune.space import (
    BenchmarkSpec,
    BudgetSpec,
    Choices,
    DrafterSpec,
    IntRange,
    Prompt,
    SearchSpec,
    ServerSpec,
    Space,
)
from autotune.study import Orchestrator, open_study

from .conftest import ScriptedRunner


def _space(n_trials: int, stop: bool = False) -> Space:
    return Space(
        name="flat-llamacpp",
        server=ServerSpec(backend="llamacpp", model_path="/m/target.gguf", launcher=("/opt/llama-server",)),
        drafters=(DrafterSpec(name="good", path="/m/good.gguf"), DrafterSpec(name="bad", path="/m/bad.gguf")),
        search=SearchSpec(
            cuda_graph=(True, False),
            knobs={"draft_n_max": IntRange(1, 16), "draft_p_min": Choices((0.0, 0.3))},
        ),
        benchmark=BenchmarkSpec(prompts=tuple(Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(4))),
        budget=BudgetSpec(n_trials=n_trials, stop_when_settled=stop),
    )


def good(c) -> float:
    """Peak at n_max 7, p_min 0.0 with graphs on (1.9x); smooth in n_max."""
    n, p = c.knob("draft_n_max"), c.knob("draft_p_min")
    graphs = 1.0 if c.cuda_graph else 0.8
    return graphs * (1.9 - 0.012 * (n - 7) ** 2 - 0.15 * p)


def bad(c) -> float:
    return 0.7 if c.cuda_graph else 0.6


def _run(n_trials: int, seed: int, stop: bool = False) -> tuple[optuna.Study, ScriptedRunner]:
    space = _space(n_trials, stop)
    runner = ScriptedRunner(speed={"good": good, "bad": bad}, seed=seed, noise=0.02)
    study = open_study(space, optuna.storages.InMemoryStorage(), f"flat-{seed}", seed=seed)
    Orchestrator(space, LlamaCppBackend(spelling=NEW_SPELLING), runner, study).search(n_trials)
    return study, runner


def _seeded(study: optuna.Study, kind: str) -> list:
    return [t for t in study.get_trials() if t.user_attrs.get("seeded") == kind and t.state.is_finished()]


def test_the_flat_space_is_a_grid_so_the_surrogate_picks_and_the_design_follows_the_defaults():
    study, _ = _run(16, seed=0)
    grid = LlamaCppBackend(spelling=NEW_SPELLING).grid(_space(16))
    assert grid is not None and len(grid) == 2 * 2 * 16 * 2
    picks = _seeded(study, records.SEEDED_SURROGATE)
    assert picks, [t.user_attrs.get("seeded") for t in study.get_trials()]
    best = max(
        (t for t in study.get_trials() if t.value and not records.TrialRecord(t).is_baseline), key=lambda t: t.value
    )
    cfg = records.TrialRecord(best).effective_config()
    assert cfg.drafter == "good" and cfg.cuda_graph and abs(cfg.knob("draft_n_max") - 7) <= 3, cfg


def test_the_settled_stop_applies_to_a_flat_llamacpp_space():
    """With ``stop_when_settled``, a 60-trial budget over 128 configs ends before its cap once settled."""
    study, _ = _run(60, seed=0, stop=True)
    state = records.search_settled(study)
    assert state is not None and state.trials < 60, state
    assert math.isfinite(state.p_improve)

"""Landscapes nobody tuned: random but plausible simulator scenarios and spaces for scripts/bench_search.py.

``generate(index)`` draws, from a generator seeded by ``index`` alone (the same index is the same landscape in every
process and on every machine):

- the target: dense (60%) or MoE (40%: experts 64-384, 2-8 active, a share of the weights that are experts, and a
  routing correlation, so verifying more tokens reads more experts);
- its hardware with CUDA graphs on: weight-read time per step, fixed cost, cost per verified token, draft and
  extend costs, per-round overhead, tree cost; with graphs off: launch overheads added (graphs gain 10-60% on the
  baseline);
- 1 or 2 EAGLE-3 drafters with acceptance profiles (rank-1 acceptance a 0.3-0.9, lower-rank mass, decay per depth,
  per-prompt spread);
- start-up times (30-400 s to load, graph capture, drafter), noise levels (start-to-start sd 1-3%, per request
  0.2-1%), how strongly prompt categories change acceptance;
- the space: CUDA graphs on, off or both; num_steps up to 4-8; a topk set from {1, 2, 4, 8}; num_draft_tokens up to
  16-64; 4-8 prompts of mixed categories, 256-1024 tokens each; a budget of 30 trials.

Landscapes whose baseline or best speedup is implausible (baseline outside 15-600 tok/s, best true speedup over
the baseline outside 0.5-4x) are redrawn from the same generator, so the index still fixes the result.

Stand-in checkpoints (``config.json`` files, no weights: a Llama-8B-shaped target and EAGLE-3 drafters) are written
once under ``ROOT`` (``$TMPDIR/autotune-landscapes``), so the checks and the simulator's argv parsing run unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune._io import atomic_write
from autotune.sim.acceptance import CATEGORY_OFFSETS, DrafterProfile
from autotune.sim.scenario import SCENARIO_DIR, Scenario, SimDrafter
from autotune.sim.timing import Hardware
from autotune.space import (
    BudgetSpec,
    Choices,
    DrafterSpec,
    IntRange,
    Prompt,
    SearchSpec,
    SimulateSpec,
    Space,
)

ROOT = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "autotune-landscapes"
PREFIX = "gen-"
N_TRIALS = 30

PROMPT_POOL: tuple[tuple[str, str], ...] = (
    ("chat", "Explain how vaccines train the immune system, from antigen presentation to memory B cells."),
    ("code", "Write a Python function that parses ISO-8601 dates with type hints, docstrings and pytest tests."),
    ("chat", "Compare the economic systems of ancient Rome and Han China in trade, taxation and coinage."),
    ("math", "Solve the recurrence T(n) = 2T(n/2) + n log n and prove the bound by induction."),
    ("summarization", "Summarize the causes, main battles and consequences of the Thirty Years' War."),
    ("creative", "Write a short story about a lighthouse keeper who receives letters from the future."),
    ("code", "Implement a thread-safe LRU cache in Rust with generics, and explain its complexity."),
    ("chat", "Describe how a modern CPU pipeline handles branch misprediction and out-of-order execution."),
    ("math", "Compute the eigenvalues of a 3x3 rotation matrix and explain their geometric meaning."),
    ("summarization", "Summarize the key ideas of the theory of plate tectonics and the evidence behind it."),
    ("chat", "What are the trade-offs between relational and document databases for an online shop?"),
    ("creative", "Compose a poem in four stanzas about the first snow in a mountain village."),
)


@dataclass(frozen=True)
class Landscape:
    name: str
    scenario: Scenario
    space: Space  # the real-looking space (drafter paths under /models); bench_search simulates it
    what: str


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _hardware(rng: np.random.Generator, moe: bool) -> tuple[Hardware, Hardware, str]:
    t_w = _u(rng, 2.5, 12.0)  # ms per step reading the (active) weights
    t_fix = _u(rng, 0.5, 2.5)
    t_tok = t_w * _u(rng, 0.002, 0.012)
    t_ds = t_w * _u(rng, 0.04, 0.2) + _u(rng, 0.0, 0.5)
    t_ext = t_ds * _u(rng, 0.6, 1.4)
    t_ovh = _u(rng, 1.0, 4.0)
    t_tree = _u(rng, 0.1, 1.0)
    moe_kw: dict[str, Any] = {}
    kind = "dense"
    if moe:
        experts = int(rng.choice([64, 128, 256, 384]))
        active = int(rng.choice([2, 4, 8]))
        moe_kw = {"f_exp": _u(rng, 0.3, 0.8), "xi": _u(rng, 0.3, 0.7), "experts": experts, "active": active}
        kind = f"MoE {active}/{experts}"
    on = Hardware(
        t_fix=t_fix,
        t_w=t_w,
        t_tok=t_tok,
        t_ds=t_ds,
        t_ext=t_ext,
        t_ovh=t_ovh,
        t_tree=t_tree,
        t_prefill_tok=0.02,
        **moe_kw,
    )
    launch = _u(rng, 1.1, 2.5)  # eager kernels: every launch costs more
    off = dataclasses.replace(
        on,
        t_fix=t_fix + (t_fix + t_w) * _u(rng, 0.1, 0.6),
        t_ds=t_ds * launch,
        t_ext=t_ext * launch,
        t_ovh=t_ovh * _u(rng, 1.05, 1.5),
    )
    return on, off, kind


def _standins(name: str, drafters: list[str]) -> tuple[Path, dict[str, Path]]:
    """Stand-in target and drafter directories (config.json only), written once."""
    base = ROOT / name
    src = Path(SCENARIO_DIR) / "llama31-8b-h100"
    target = base / "target"
    if not (target / "config.json").exists():
        target.mkdir(parents=True, exist_ok=True)
        atomic_write(target / "config.json", (src / "target" / "config.json").read_text())
    out = {}
    dcfg = json.loads((src / "drafters" / "eagle3-llama31-8b" / "config.json").read_text())
    for d in drafters:
        p = base / "drafters" / d
        if not (p / "config.json").exists():
            p.mkdir(parents=True, exist_ok=True)
            cfg = {**dcfg, "autotune_sim": {"scenario": name, "role": "drafter", "name": d}}
            atomic_write(p / "config.json", json.dumps(cfg, indent=2) + "\n")
        out[d] = p
    return target, out


def _draw(rng: np.random.Generator, name: str, template: Space) -> Landscape:
    moe = bool(rng.random() < 0.4)
    on, off, kind = _hardware(rng, moe)
    n_drafters = 1 if rng.random() < 0.6 else 2
    names = [f"eagle3-{i}" for i in range(n_drafters)]
    profiles = {
        d: DrafterProfile(
            a=_u(rng, 0.3, 0.9),
            c=_u(rng, 0.2, 0.85),
            th=_u(rng, 0.2, 0.5),
            lam=_u(rng, 0.85, 1.0),
            kappa=_u(rng, 40.0, 200.0),
        )
        for d in names
    }
    target_dir, ddirs = _standins(name, names)
    offsets_scale = _u(rng, 0.5, 1.5)
    graphs = [(True,), (True, False), (False,)][int(rng.choice(3, p=[0.5, 0.4, 0.1]))]
    steps_hi = int(rng.integers(4, 9))
    topk = [(1, 2, 4, 8), (1, 2, 4), (1, 4, 8), (1, 2), (1, 8)][int(rng.choice(5, p=[0.4, 0.25, 0.15, 0.1, 0.1]))]
    ndt_hi = int(rng.choice([16, 32, 64]))
    n_prompts = int(rng.integers(4, 9))
    chosen = sorted(rng.choice(len(PROMPT_POOL), size=n_prompts, replace=False).tolist())
    prompts = tuple(Prompt(id=f"q{i}", text=PROMPT_POOL[i][1], category=PROMPT_POOL[i][0]) for i in chosen)
    max_tokens = int(rng.choice([256, 512, 1024]))
    scenario = Scenario(
        name=name,
        description=f"generated landscape {name}",
        target_name=f"{name}-target",
        target_dir=str(target_dir),
        target_config=json.loads((target_dir / "config.json").read_text()),
        family="llama",
        load_s=_u(rng, 30.0, 400.0),
        speculative_s=_u(rng, 2.0, 30.0),
        cuda_graph_s=_u(rng, 5.0, 60.0),
        cuda_graph_speculative_s=_u(rng, 3.0, 40.0),
        graphs_on=on,
        graphs_off=off,
        drafters={
            d: SimDrafter(
                name=d,
                dir=str(ddirs[d]),
                profile=profiles[d],
                config=json.loads((ddirs[d] / "config.json").read_text()),
            )
            for d in names
        },
        category_offsets={k: v * offsets_scale for k, v in CATEGORY_OFFSETS.items()},
        start_noise_sd=_u(rng, 0.01, 0.03),
        request_noise_sd=_u(rng, 0.002, 0.01),
    )
    space = dataclasses.replace(
        template,
        name=name,
        path=None,
        drafters=tuple(DrafterSpec(name=d, path=f"/models/{d}") for d in names),
        search=SearchSpec(
            cuda_graph=graphs,
            knobs={"num_steps": IntRange(1, steps_hi), "topk": Choices(topk), "num_draft_tokens": IntRange(2, ndt_hi)},
        ),
        benchmark=dataclasses.replace(template.benchmark, prompts=prompts, max_tokens=max_tokens),
        budget=BudgetSpec(n_trials=N_TRIALS),
        simulate=SimulateSpec(scenario=name, time_scale=50.0, seed=0),
    )
    a = ", ".join(f"a={p.a:.2f}" for p in profiles.values())
    what = (
        f"{kind}, T_w {on.t_w:.1f} ms, graphs {'/'.join('on' if g else 'off' for g in graphs)}, "
        f"{n_drafters} drafter(s) ({a}), S<={steps_hi}, k in {list(topk)}, N<={ndt_hi}, {n_prompts} prompts x "
        f"{max_tokens}, start noise {scenario.start_noise_sd:.3f}"
    )
    return Landscape(name=name, scenario=scenario, space=space, what=what)


def generate(index: int, template: Space, plausible: Any = None) -> Landscape:
    """Landscape ``gen-NNN``; ``plausible(landscape) -> bool`` (optional) rejects a draw, which is redrawn from the
    same generator."""
    name = f"{PREFIX}{index:03d}"
    rng = np.random.default_rng([20261201, index])
    for _ in range(50):
        land = _draw(rng, name, template)
        if plausible is None or plausible(land):
            return land
    raise RuntimeError(f"no plausible landscape for index {index} in 50 draws")


def is_generated(name: str) -> bool:
    return name.startswith(PREFIX) and name[len(PREFIX) :].isdigit()


def index_of(name: str) -> int:
    return int(name[len(PREFIX) :])

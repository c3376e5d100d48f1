"""Search-efficiency benchmark: the real orchestration against a full grid, random search and the tuner without
pruning, on the simulator's in-process model (virtual GPU time, no processes).

Every method measures on ``autotune.sim.runner.ModelRunner`` with a ``VirtualClock`` that charges server startup,
warm-up and every generated token in the simulated hardware's seconds. Methods:

- ``grid``: SGLang's ``bench_speculative.py`` style: every feasible point of the space in its nested loop order
  (drafter, CUDA graphs, then steps, topk, num_draft_tokens), one server start per point, every prompt, no pruning;
  the baseline of a CUDA-graph setting is measured once, before that setting's first speculative point.
  Recommendation: the point with the highest measured tok/s.
- ``tuner``: ``autotune.study`` as shipped (TPE from ``make_sampler``, ``BaselinePruner``, baselines and SGLang's
  default enqueued, dedup, the surrogate's last half of the budget, candidates ranked by the surrogate, racing
  confirmation, verdict). Recommendation: ``autotune.study.result.recommend`` after confirmation.
- ``tuner_no_prune``: the same with pruning disabled.
- ``tuner_no_refine``: the same with ``budget.refine_trials`` 0 (every trial from TPE).
- ``random``: the same orchestration (baselines, defaults, dedup, confirmation) with ``optuna.samplers.RandomSampler``,
  pruning disabled and no surrogate-picked trials.
- ``tuner_prev`` (optional, not run by default): the package's defaults before the start-noise prune bound and
  3 x 4 confirmation were shipped (``pruning.start_noise`` 0, ``verdict`` 2 candidates x 3 repeats, no race), for
  comparison.

Figures (per scenario, method and seed):
- time to 2%: virtual GPU seconds until the TRUE (noise-free) tok/s of the config the method currently considers
  best (highest measured tok/s among its completed measurements, baselines included) is first within 2% of the
  true optimum. A run that never gets there counts its total time and is flagged (``reached`` false).
- final regret: 1 - true(recommended) / true optimum; hit = regret <= 2%.
- pruning: share of measured speculative trials pruned, share of their prompts saved, false prunes (pruned trials
  whose true speedup over the baseline of the same CUDA-graph setting is above 1).
- verdict right: the true verdict is speculation-wins if the best true speculative speedup (over its own baseline)
  exceeds 1 + min_gain, baseline-wins or no-worthwhile-gain if it is below 1; in between those two and inconclusive
  all count.

True optimum = best noise-free expected tok/s (``ModelRunner.true_tok_per_s``) over every feasible grid point and
every baseline of the space.

    python scripts/bench_search.py                      # every scenario, 20 seeds, writes docs/benchmarks.{md,json}
    python scripts/bench_search.py --seeds 3 --scenarios llama-edge --out /tmp/b
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent / "bench_scenarios"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import bench_landscapes  # noqa: E402
from bench_common import replace_section  # noqa: E402

from autotune import records  # noqa: E402
from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.errors import LaunchError  # noqa: E402
from autotune.measure import measure_config  # noqa: E402
from autotune.report import build_report  # noqa: E402
from autotune.seam import VirtualClock  # noqa: E402
from autotune.sim.scenario import SCENARIO_DIR, Scenario, ScenarioLoader, read_scenario, scenario_loader  # noqa: E402
from autotune.space import Space, load_space  # noqa: E402
from autotune.study import Event, Orchestrator, open_study  # noqa: E402

#: name -> (space file relative to the repo, what the landscape shows)
SCENARIOS: dict[str, tuple[str, str]] = {
    "kimi": (
        "spaces/eagle3.yaml",
        "field report: Kimi-K2.5 8x RTX PRO 6000, weak drafters; graphs-on baseline ties the best speculative point",
    ),
    "llama": ("spaces/llama-8b-eagle3.yaml", "Llama-3.1-8B H100, strong EAGLE-3; deep wide trees win (~2.4x)"),
    "kimi-k2drafter": (
        "scripts/bench_scenarios/kimi-graphs-k2drafter.space.yaml",
        "Kimi-K2.5 MoE with a good K2 drafter (what-if): short chains win",
    ),
    "llama-edge": (
        "scripts/bench_scenarios/llama-edge.space.yaml",
        "Llama-3.1-8B, very strong drafter, narrow space: optimum on the space's edge",
    ),
    "moe-a3b": (
        "scripts/bench_scenarios/moe-a3b-h100.space.yaml",
        "small-active MoE (A3B-like) H100: every speculative point loses, right verdict baseline-wins",
    ),
}
METHODS = ("grid", "tuner", "tuner_no_prune", "tuner_no_refine", "random")
#: methods run on the generated landscapes
LANDSCAPE_METHODS = ("grid", "random", "tuner")
#: comparisons with settings other than the shipped defaults, run only when asked for (see make_method). The
#: variants of the study's stop and candidate rules (``tuner_no_settle``, ``tuner_eg10``, ``tuner_race_full``, ...)
#: went with those rules' options in #44; their figures stay in docs/benchmarks.md
EXTRA_METHODS: tuple[str, ...] = (
    "tuner_prev",
    "tuner_half",
    "tuner_no_leader",
    "tuner_no_design",
    "tuner_tpe_design",
    "tuner_refine_all",
    "tuner_margin0",
    "tuner_margin10",
    "tuner_top5",
    "tuner_bar5",
    "tuner_rep3",
    "tuner_rep3m6",
    "tuner_thin_only",
)
WITHIN = 0.02

# ------------------------------------------------------------------------------------------------ scenarios


def _bench_scenario(path: Path) -> Scenario:
    """A benchmark scenario file (same format as autotune/sim/scenarios/*.yaml); dirs resolve in scripts/
    bench_scenarios/ first, then in the package's scenario directory."""
    return read_scenario(str(path), dirs=[str(BENCH_DIR), SCENARIO_DIR])


_LOADER: list[ScenarioLoader] = []  # read once per process (not functools.cache: joblib's workers pickle by value)


def scenarios() -> ScenarioLoader:
    """Scenario names as the benchmark resolves them: generated landscapes (``gen-NNN``) and scripts/
    bench_scenarios/ besides the shipped scenarios (given to ``simulated_space`` and ``ModelRunner``)."""
    if not _LOADER:
        extra = {s.name: s for s in (_bench_scenario(p) for p in sorted(BENCH_DIR.glob("*.scenario.yaml")))}
        named = scenario_loader(extra)

        def loader(name: str) -> Scenario:
            return landscape(name).scenario if bench_landscapes.is_generated(name) else named(name)

        _LOADER.append(loader)
    return _LOADER[0]


_LANDSCAPES: dict[str, bench_landscapes.Landscape] = {}


def _plausible(land: bench_landscapes.Landscape) -> bool:
    """Baseline 15-600 tok/s and a best true speedup of 0.5-4x over a coarse sample of the grid."""
    from autotune.sim import simulated_space
    from autotune.sim.runner import ModelRunner

    space = simulated_space(land.space, scenarios=lambda _n: land.scenario)
    backend = SGLangBackend()
    runner = ModelRunner(space, backend, VirtualClock(), scenarios=lambda _n: land.scenario)
    grid = backend.grid(space) or []
    if not grid:
        return False
    base = {cg: runner.true_tok_per_s(TrialConfig.baseline(cg)) for cg in space.search.cuda_graph}
    if not all(15 <= b <= 600 for b in base.values()):
        return False
    sample = grid[:: max(1, len(grid) // 40)]
    best = max(runner.true_tok_per_s(c) / base[c.cuda_graph] for c in sample)
    return 0.5 <= best <= 4.0


def landscape(name: str) -> bench_landscapes.Landscape:
    """Generated landscape ``gen-NNN`` (the same in every process: drawn from its index)."""
    if name not in _LANDSCAPES:
        template = load_space(str(ROOT / "spaces/llama-8b-eagle3.yaml"))
        _LANDSCAPES[name] = bench_landscapes.generate(bench_landscapes.index_of(name), template, _plausible)
    return _LANDSCAPES[name]


def describe(name: str) -> tuple[str, str]:
    """(space, what the landscape shows)."""
    if bench_landscapes.is_generated(name):
        return "generated (scripts/bench_landscapes.py)", landscape(name).what
    return SCENARIOS[name]


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="optuna")


def load(name: str, n_trials: int | None = None) -> Space:
    from autotune.sim import simulated_space

    base = landscape(name).space if bench_landscapes.is_generated(name) else load_space(str(ROOT / SCENARIOS[name][0]))
    space = simulated_space(base, scenarios=scenarios())
    if n_trials is not None:
        space = dataclasses.replace(space, budget=dataclasses.replace(space.budget, n_trials=n_trials))
    return space


def no_pruning(space: Space) -> Space:
    return dataclasses.replace(space, pruning=dataclasses.replace(space.pruning, enabled=False))


def grid_points(space: Space, backend: SGLangBackend) -> list[TrialConfig]:
    """Every feasible point (``SGLangBackend.grid``: bench_speculative.py's loop order), each CUDA-graph setting's
    baseline right before its first point."""
    out: list[TrialConfig] = []
    seen_baseline: set[bool] = set()
    for c in backend.grid(space) or []:
        if c.cuda_graph not in seen_baseline:
            seen_baseline.add(c.cuda_graph)
            out.append(TrialConfig.baseline(c.cuda_graph))
        out.append(c)
    return out


def ground_truth(name: str) -> dict[str, Any]:
    """Noise-free tok/s of every grid point and baseline; the optimum; the true verdict."""
    from autotune.sim.runner import ModelRunner

    quiet()
    space = load(name)
    backend = SGLangBackend()
    runner = ModelRunner(space, backend, VirtualClock(), seed=0, scenarios=scenarios())
    points = grid_points(space, backend)
    truth = {c.key(): runner.true_tok_per_s(c) for c in points}
    base = {c.cuda_graph: truth[c.key()] for c in points if c.is_baseline}
    best_key = max(truth, key=truth.__getitem__)
    spec = [(c, truth[c.key()] / base[c.cuda_graph]) for c in points if not c.is_baseline]
    best_spec, best_speedup = max(spec, key=lambda x: x[1])
    min_gain = space.verdict.min_gain
    if best_speedup > 1 + min_gain:
        right = ["speculation-wins"]
    elif best_speedup < 1:
        right = ["baseline-wins", "no-worthwhile-gain"]
    else:
        right = ["no-worthwhile-gain", "baseline-wins", "inconclusive"]
    opt = truth[best_key]
    return {
        "truth": truth,
        "optimum": {"config": json.loads(best_key), "tok_per_s": opt},
        "baselines": {str(cg): v for cg, v in base.items()},
        "best_speculative": {"config": best_spec.to_dict(), "speedup_vs_own_baseline": best_speedup},
        "right_verdicts": right,
        "grid_points": len(points),
        "within_2pct_points": sum(v >= (1 - WITHIN) * opt for v in truth.values()),
        "n_trials": space.budget.n_trials,
        "n_prompts": len(space.benchmark.prompts),
        "space": describe(name)[0],
        "what": describe(name)[1],
    }


# ------------------------------------------------------------------------------------------------ methods


class EndTimes:
    """A listener: the virtual time at which each trial's measurement was known: the end of its last timed prompt
    (a baseline's reference answers, asked after its timed prompts, delay the next trials, not this one's figure),
    else its ``trial-end`` event."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.at: dict[int, float] = {}
        self._measured: dict[int, float] = {}

    def __call__(self, ev: Event) -> None:
        if ev.trial is None:
            return
        if ev.kind == "prompt" and ev.data.get("index") == ev.data.get("of", 0) - 1:
            self._measured[ev.trial] = self.clock.now()
        elif ev.kind == "trial-end":
            self.at[ev.trial] = self._measured.get(ev.trial, self.clock.now())


def _first_within(traj: list[tuple[float, float]], opt: float) -> float | None:
    for t, v in traj:
        if v >= (1 - WITHIN) * opt:
            return t
    return None


def run_grid(name: str, seed: int, truth: dict[str, float], opt: float) -> dict[str, Any]:
    from autotune.sim.runner import ModelRunner

    quiet()
    space = load(name)
    backend = SGLangBackend()
    clock = VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=seed, scenarios=scenarios())
    best_v, best_key = -math.inf, None
    traj: list[tuple[float, float]] = []
    starts = 0
    for cfg in grid_points(space, backend):
        try:
            v = measure_config(runner, cfg, space).tok_per_s
        except LaunchError:
            continue
        starts += 1
        if v > best_v:
            best_v, best_key = v, cfg.key()
        traj.append((clock.now(), truth[best_key]))
    t2 = _first_within(traj, opt)
    return {
        "method": "grid",
        "seed": seed,
        "total_s": clock.now(),
        "search_s": clock.now(),
        "time_to_2pct_s": t2 if t2 is not None else clock.now(),
        "reached": t2 is not None,
        "recommended": json.loads(best_key) if best_key else None,
        "regret": 1 - truth[best_key] / opt,
        "server_starts": starts,
        "verdict": None,
        "charged": dict(clock.charged),
    }


def make_method(method: str, space: Space, seed: int) -> tuple[Space, optuna.samplers.BaseSampler | None]:
    """(space as run, sampler or None for the package's default)."""
    if method == "tuner":
        return space, None
    if method == "tuner_no_prune":
        return no_pruning(space), None
    if method == "tuner_no_refine":
        return _no_refine(space), None
    if method == "random":
        return _no_refine(no_pruning(space)), optuna.samplers.RandomSampler(seed=seed)
    if method == "tuner_half":  # the surrogate's share as before the design: the last half
        return dataclasses.replace(
            space, budget=dataclasses.replace(space.budget, refine_trials=space.budget.n_trials // 2)
        ), None
    if method == "tuner_no_leader":
        return dataclasses.replace(space, pruning=dataclasses.replace(space.pruning, leader=False)), None
    if method in ("tuner_margin0", "tuner_margin10", "tuner_top5"):
        margin = 0.0 if method == "tuner_margin0" else 0.10
        return dataclasses.replace(space, pruning=dataclasses.replace(space.pruning, leader_margin=margin)), None
    if method == "tuner_no_design":
        return dataclasses.replace(space, budget=dataclasses.replace(space.budget, design_trials=0)), None
    if method == "tuner_tpe_design":  # the design, then TPE for the first half, the surrogate for the last
        b = dataclasses.replace(space.budget, refine_trials=space.budget.n_trials // 2)
        return dataclasses.replace(space, budget=b), None
    if method == "tuner_refine_all":  # the surrogate from the design on, no TPE between
        b = dataclasses.replace(space.budget, refine_trials=space.budget.n_trials)
        return dataclasses.replace(space, budget=b), None
    if method == "tuner_thin_only":  # the settled stop off (the whole budget), confirmation as shipped
        return dataclasses.replace(space, budget=dataclasses.replace(space.budget, stop_when_settled=False)), None
    if method == "tuner_rep3":  # the first look after 3 rounds instead of the space's 4; the same most rounds
        return _verdict(space, repeats=3, max_repeats=space.verdict.max_rounds), None
    if method == "tuner_rep3m6":  # the first look after 3 rounds, at most 6 rounds (twice the first look)
        return _verdict(space, repeats=3, max_repeats=6), None
    if method == "tuner_bar5":  # the user's bar at 5% instead of the space's
        return _verdict(space, min_gain=0.05), None
    if method == "tuner_prev":  # the defaults before start_noise and 3 x 4 confirmation were shipped
        prev = dataclasses.replace(space.pruning, start_noise=0.0)
        prev_space = _no_refine(dataclasses.replace(space, pruning=prev))
        return _verdict(prev_space, confirm_top=2, repeats=3, max_repeats=3), None
    raise ValueError(f"unknown method {method!r}")


def _no_refine(space: Space) -> Space:
    return dataclasses.replace(space, budget=dataclasses.replace(space.budget, refine_trials=0))


def _verdict(space: Space, **changes: Any) -> Space:
    return dataclasses.replace(space, verdict=dataclasses.replace(space.verdict, **changes))


def run_orchestrated(name: str, method: str, seed: int, truth: dict[str, float], opt: float) -> dict[str, Any]:
    from autotune.sim.runner import ModelRunner

    quiet()
    base_space = load(name)
    space, sampler = make_method(method, base_space, seed)
    backend = SGLangBackend()
    clock = VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=seed, scenarios=scenarios())
    study = open_study(
        space,
        optuna.storages.InMemoryStorage(),
        f"bench-{name}-{method}-{seed}",
        seed=seed,
        simulated=True,
        sampler=sampler,
    )
    end_times = EndTimes(clock)
    orch = Orchestrator(space, backend, runner, study, clock=clock, listener=end_times)
    orch.search(space.budget.n_trials, timeout_s=space.budget.timeout_s)
    search_s = clock.now()
    state = orch.confirm()
    total = clock.now()
    trials = study.get_trials(deepcopy=False)

    best_v, best_key = -math.inf, None
    traj: list[tuple[float, float]] = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.number not in end_times.at:
            continue
        if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None and t.value > best_v:
            best_v, best_key = t.value, records.TrialRecord(t).config_key
        if best_key is not None:
            traj.append((end_times.at[t.number], truth[best_key]))
    t2 = _first_within(traj, opt)

    rec = build_report(study).to_json()["recommended"]["config"]
    rec_key = TrialConfig.from_dict(rec).key()

    measured = [t for t in trials if records.is_measured_speculative(t)]
    pruned = [
        t
        for t in measured
        if t.state == optuna.trial.TrialState.PRUNED and records.TrialRecord(t).prune_reason is not None
    ]
    n_prompts = len(space.benchmark.prompts)
    base_true = {cg: truth[TrialConfig.baseline(cg).key()] for cg in space.search.cuda_graph}

    def true_speedup(t: optuna.trial.FrozenTrial) -> float:
        eff = records.TrialRecord(t).effective_config()
        return truth[eff.key()] / base_true[eff.cuda_graph]

    by_number = {t.number: t for t in trials}

    def true_of(t: optuna.trial.FrozenTrial) -> float:
        return truth[records.TrialRecord(t).effective_config().key()]

    def false_prune(t: optuna.trial.FrozenTrial) -> bool:
        """Baseline rule: its true speedup over its baseline is above 1. Leader rule: it is truly at least as fast
        as the leader it lost to."""
        r = records.TrialRecord(t)
        if r.prune_rule == "leader" and r.pruned_against in by_number:
            return true_of(t) >= true_of(by_number[r.pruned_against])
        return true_speedup(t) > 1.0

    false_prunes = [t for t in pruned if false_prune(t)]
    by_rule = {
        rule: [t for t in pruned if records.TrialRecord(t).prune_rule == rule] for rule in ("baseline", "leader")
    }
    return {
        "method": method,
        "seed": seed,
        "total_s": total,
        "search_s": search_s,
        "time_to_2pct_s": t2 if t2 is not None else total,
        "reached": t2 is not None,
        "recommended": rec,
        "regret": 1 - truth[rec_key] / opt,
        "server_starts": runner.launches,
        "verdict": state.get("verdict"),
        "trials": len(trials),
        "measured_speculative": len(measured),
        "pruned": len(pruned),
        "prompts_measured": sum(len(t.intermediate_values) for t in measured),
        "prompts_saved": sum(n_prompts - len(t.intermediate_values) for t in pruned),
        "false_prunes": len(false_prunes),
        "pruned_by_rule": {k: len(v) for k, v in by_rule.items()},
        "false_prunes_by_rule": {k: sum(false_prune(t) for t in v) for k, v in by_rule.items()},
        "false_prune_speedups": [round(true_speedup(t), 4) for t in false_prunes],
        "charged": dict(clock.charged),
    }


def run_one(name: str, method: str, seed: int, truth: dict[str, float], opt: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    if method == "grid":
        row = run_grid(name, seed, truth, opt)
    else:
        row = run_orchestrated(name, method, seed, truth, opt)
    row["scenario"] = name
    row["wall_s"] = time.perf_counter() - t0
    return row


# ------------------------------------------------------------------------------------------------ aggregation


def _q(xs: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(xs, dtype=float), q)) if xs else float("nan")


def aggregate(gt: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in sorted({r["method"] for r in rows}, key=lambda m: (m not in METHODS, m)):
        rs = [r for r in rows if r["method"] == method]
        t2 = [r["time_to_2pct_s"] for r in rs]
        m: dict[str, Any] = {
            "seeds": len(rs),
            "time_to_2pct_median_s": _q(t2, 0.5),
            "time_to_2pct_p90_s": _q(t2, 0.9),
            "never_within_2pct": sum(not r["reached"] for r in rs),
            "total_median_s": _q([r["total_s"] for r in rs], 0.5),
            "server_starts_median": _q([r["server_starts"] for r in rs], 0.5),
            "regret_median": _q([r["regret"] for r in rs], 0.5),
            "regret_max": max(r["regret"] for r in rs),
            "hit_rate_2pct": sum(r["regret"] <= WITHIN for r in rs) / len(rs),
        }
        if method != "grid":
            measured = sum(r["measured_speculative"] for r in rs)
            pruned = sum(r["pruned"] for r in rs)
            m.update(
                {
                    "pruned_fraction": pruned / measured if measured else 0.0,
                    "prompts_saved_fraction": (
                        sum(r["prompts_saved"] for r in rs) / (measured * gt["n_prompts"]) if measured else 0.0
                    ),
                    "false_prunes": sum(r["false_prunes"] for r in rs),
                    "false_prune_rate": sum(r["false_prunes"] for r in rs) / pruned if pruned else 0.0,
                    "pruned_by_rule": {
                        k: sum(r.get("pruned_by_rule", {}).get(k, 0) for r in rs) for k in ("baseline", "leader")
                    },
                    "false_prunes_by_rule": {
                        k: sum(r.get("false_prunes_by_rule", {}).get(k, 0) for r in rs) for k in ("baseline", "leader")
                    },
                    "verdict_right_rate": sum(r["verdict"] in gt["right_verdicts"] for r in rs) / len(rs),
                    "verdicts": {v: sum(r["verdict"] == v for r in rs) for v in sorted({r["verdict"] for r in rs})},
                }
            )
        out[method] = m
    return out


def summary_for(gt: dict[str, Any], methods: dict[str, Any], tuner: str = "tuner") -> dict[str, Any]:
    grid = methods.get("grid")
    t = methods.get(tuner)
    if not t:
        return {}
    return {
        "gpu_time_ratio_vs_grid": (t["time_to_2pct_median_s"] / grid["time_to_2pct_median_s"]) if grid else None,
        "gpu_time_ratio_vs_full_grid": (t["time_to_2pct_median_s"] / grid["total_median_s"]) if grid else None,
        "hit_rate_2pct": t["hit_rate_2pct"],
        "false_prune_rate": t["false_prune_rate"],
        "verdict_right_rate": t["verdict_right_rate"],
    }


# ------------------------------------------------------------------------------------------------ output


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Search efficiency (scripts/bench_search.py)",
        "",
        f"Produced by `{result['command']}` on {result['date']} ({result['machine']}); "
        f"{result['seeds']} seeds per scenario and method, {result['wall_s'] / 60:.1f} min of machine time. "
        "All figures are simulated: the in-process simulator (`ModelRunner`) on a virtual clock that charges server "
        'startup, warm-up and every generated token in the simulated hardware\'s seconds ("GPU time").',
        "",
        "Definitions: *time to 2%* = virtual GPU time until the true (noise-free) tok/s of the config the method "
        "currently considers best (its highest measured tok/s, baselines included) is within 2% of the true optimum "
        "(best true tok/s over every feasible grid point and baseline); a run that never gets there counts its total "
        "time (column *never*). *Ratio* = median tuner time to 2% / median grid time to 2%. *Hit* = share of seeds "
        "whose final recommendation (after confirmation; the grid: its best measured point) is within 2% of the "
        "optimum. *Pruned* = share of measured speculative trials stopped early; *saved* = share of their prompts "
        "not measured; *false prunes* = pruned trials whose true speedup over their baseline was > 1. *Verdict* = "
        "share of seeds with the right verdict (speculation-wins if the best true speedup > 1 + min_gain, "
        "baseline-wins or no-worthwhile-gain if < 1, else either of those or inconclusive). Grid = every feasible "
        "point in "
        "bench_speculative.py's nested order (drafter, CUDA graphs, steps, topk, N), one start each; random = "
        "RandomSampler with the same orchestration (baselines, SGLang default, dedup, confirmation), pruning off.",
        "",
    ]
    for name, sc in result["scenarios"].items():
        gt = sc["ground_truth"]
        opt = gt["optimum"]
        lines += [
            f"### {name}: {gt['what']}",
            "",
            f"Space `{gt['space']}`: {gt['grid_points']} feasible points ({gt['within_2pct_points']} within 2% of the "
            f"optimum), budget {gt['n_trials']} trials, {gt['n_prompts']} prompts. True optimum "
            f"{opt['tok_per_s']:.1f} tok/s at `{json.dumps(opt['config'])}`; baselines "
            + ", ".join(f"graphs {'on' if k == 'True' else 'off'} {v:.1f}" for k, v in gt["baselines"].items())
            + f"; best speculative speedup {gt['best_speculative']['speedup_vs_own_baseline']:.3f} "
            f"(right verdict: {' or '.join(gt['right_verdicts'])}).",
            "",
            "| method | time to 2% median | p90 | never | ratio vs grid | total median | starts | hit | "
            "regret median / max | pruned | saved | false prunes | verdict right |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        grid = sc["methods"].get("grid")
        for method, m in sc["methods"].items():
            ratio = m["time_to_2pct_median_s"] / grid["time_to_2pct_median_s"] if grid else None
            lines.append(
                f"| {method} | {_h(m['time_to_2pct_median_s'])} | {_h(m['time_to_2pct_p90_s'])} | "
                f"{m['never_within_2pct']} | {_ratio(ratio)} | {_h(m['total_median_s'])} | "
                f"{m['server_starts_median']:.0f} | {_pct(m['hit_rate_2pct'])} | "
                f"{100 * m['regret_median']:.1f}% / {100 * m['regret_max']:.1f}% | "
                f"{_pct(m.get('pruned_fraction'))} | {_pct(m.get('prompts_saved_fraction'))} | "
                + (f"{m['false_prunes']} ({_pct(m['false_prune_rate'])})" if "false_prunes" in m else "-")
                + f" | {_pct(m.get('verdict_right_rate'))} |"
            )
        lines.append("")
    lines += ["### Targets (tuner)", "", "| scenario | ratio vs grid (<= 0.15) | hit (>= 95%) | false prunes (<= 2%) |"]
    lines.append("|---|---|---|---|")
    for name, sc in result["scenarios"].items():
        for tuner in [k for k in sc["summary"]]:
            s = sc["summary"][tuner]
            lines.append(
                f"| {name} ({tuner}) | {_ratio(s['gpu_time_ratio_vs_grid'])} | {_pct(s['hit_rate_2pct'])} | "
                f"{_pct(s['false_prune_rate'])} |"
            )
    lines.append("")
    return "\n".join(lines)


def write_outputs(out: Path, result: dict[str, Any]) -> None:
    """docs/benchmarks.json gets the key ``search``; docs/benchmarks.md the search section (other sections kept)."""
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "benchmarks.json"
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data["search"] = result
    jpath.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    replace_section(out / "benchmarks.md", "search", markdown(result))


def run_all(
    names: list[str], methods: list[str], seeds: int, jobs: int
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Ground truths and one row per (scenario, method, seed), run on ``jobs`` processes."""
    from joblib import Parallel, delayed

    gts = dict(zip(names, Parallel(n_jobs=jobs)(delayed(ground_truth)(n) for n in names), strict=True))
    tasks = [
        (n, m, s, gts[n]["truth"], gts[n]["optimum"]["tok_per_s"]) for n in names for m in methods for s in range(seeds)
    ]
    # the longest first (the grids), so both workers stay busy to the end
    tasks.sort(key=lambda t: (t[1] != "grid", -gts[t[0]]["grid_points"]))
    rows = Parallel(n_jobs=jobs, verbose=0)(delayed(run_one)(*t) for t in tasks)
    return gts, rows


def scenario_results(
    names: list[str], gts: dict[str, dict[str, Any]], rows: list[dict[str, Any]], keep_runs: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in names:
        gt = {k: v for k, v in gts[n].items() if k != "truth"}
        rs = [r for r in rows if r["scenario"] == n]
        methods = aggregate(gts[n], rs)
        tuners = [m for m in methods if m.startswith("tuner") and m != "tuner_no_prune"]
        out[n] = {
            "ground_truth": gt,
            "methods": methods,
            "summary": {t: summary_for(gt, methods, t) for t in tuners},
            **({k: v for k, v in summary_for(gt, methods).items()} if "tuner" in methods else {}),
            **({"runs": [{k: v for k, v in r.items() if k != "scenario"} for r in rs]} if keep_runs else {}),
        }
    return out


def distribution(per: dict[str, Any], methods: list[str]) -> dict[str, Any]:
    """Across generated landscapes, per method: the distribution of (median time to 2%) / (the full grid's time),
    how often it is <= 15%, how often it is under the grid's own time to 2%, hit and false-prune rates over all
    runs."""
    out: dict[str, Any] = {}
    for m in methods:
        if m == "grid":
            continue
        ratios: list[float] = []
        under = runs = hits = false_p = 0
        by_rule: dict[str, int] = {}
        false_rule: dict[str, int] = {}
        for sc in per.values():
            mm, grid = sc["methods"].get(m), sc["methods"].get("grid")
            if not mm or not grid:
                continue
            ratios.append(mm["time_to_2pct_median_s"] / grid["total_median_s"])
            under += mm["time_to_2pct_median_s"] < grid["time_to_2pct_median_s"]
            runs += mm["seeds"]
            hits += round(mm["hit_rate_2pct"] * mm["seeds"])
            false_p += mm["false_prunes"]
            for k, v in mm.get("pruned_by_rule", {}).items():
                by_rule[k] = by_rule.get(k, 0) + v
            for k, v in mm.get("false_prunes_by_rule", {}).items():
                false_rule[k] = false_rule.get(k, 0) + v
        pruned = sum(by_rule.values())
        if not ratios:
            continue
        out[m] = {
            "landscapes": len(ratios),
            "ratio_vs_full_grid": {q: _q(ratios, float(q)) for q in ("0.1", "0.25", "0.5", "0.75", "0.9", "1.0")},
            "share_within_15pct_of_full_grid": sum(r <= 0.15 for r in ratios) / len(ratios),
            "share_under_grid_time_to_2pct": under / len(ratios),
            "runs": runs,
            "hit_rate_2pct": hits / runs if runs else float("nan"),
            "pruned": pruned,
            "pruned_by_rule": by_rule,
            "false_prunes": false_p,
            "false_prunes_by_rule": false_rule,
            "false_prune_rate": false_p / pruned if pruned else 0.0,
        }
    return out


def markdown_generated(result: dict[str, Any]) -> str:
    lines = [
        "## Search on generated landscapes (scripts/bench_search.py, scripts/bench_landscapes.py)",
        "",
        f"Produced by `{result['command']}` on {result['date']} ({result['machine']}); "
        f"{result['landscapes']} landscapes nobody tuned (random but plausible: dense or MoE targets, 1-2 drafters, "
        f"graph gains, start-up times, noise levels and spaces, each drawn from its index) x {result['seeds']} "
        "seeds per method. Same definitions as above; time to 2% is counted from the first server start, warm-ups "
        "and start-ups included. *Ratio* here = a method's median time to 2% / the full grid's GPU time on the "
        "same landscape; its distribution over landscapes:",
        "",
        "| method | ratio p10 | p25 | median | p75 | p90 | max | <= 15% | under grid's time to 2% | hit (runs) | "
        "pruned (baseline / leader rule) | false prunes (baseline / leader) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, d in result["distribution"].items():
        q = d["ratio_vs_full_grid"]
        fr = d["false_prunes_by_rule"]
        br = d["pruned_by_rule"]
        lines.append(
            f"| {m} | {_ratio(q['0.1'])} | {_ratio(q['0.25'])} | {_ratio(q['0.5'])} | {_ratio(q['0.75'])} | "
            f"{_ratio(q['0.9'])} | {_ratio(q['1.0'])} | {_pct(d['share_within_15pct_of_full_grid'])} | "
            f"{_pct(d['share_under_grid_time_to_2pct'])} | {round(d['hit_rate_2pct'] * d['runs'])}/{d['runs']} "
            f"({d['hit_rate_2pct']:.1%}) | "
            f"{d['pruned']} ({br.get('baseline', 0)} / {br.get('leader', 0)}) | "
            f"{d['false_prunes']} ({_pct(d['false_prune_rate'])}; {fr.get('baseline', 0)} / {fr.get('leader', 0)}) |"
        )
    lines += [
        "",
        "Per landscape (tuner): median time to 2% / full grid, hit rate, what it is:",
        "",
        "| landscape | grid points (within 2%) | best speedup | ratio vs full grid | vs grid's time to 2% | hit | "
        "what |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, sc in result["scenarios"].items():
        gt, ms = sc["ground_truth"], sc["methods"]
        t, g = ms.get("tuner"), ms.get("grid")
        if not t or not g:
            continue
        lines.append(
            f"| {name} | {gt['grid_points']} ({gt['within_2pct_points']}) | "
            f"{gt['best_speculative']['speedup_vs_own_baseline']:.2f} | "
            f"{_ratio(t['time_to_2pct_median_s'] / g['total_median_s'])} | "
            f"{_ratio(t['time_to_2pct_median_s'] / g['time_to_2pct_median_s'])} | {_pct(t['hit_rate_2pct'])} | "
            f"{gt['what']} |"
        )
    lines.append("")
    return "\n".join(lines)


def _meta(argv: list[str] | None, seeds: int, t0: float) -> dict[str, Any]:
    return {
        "command": "python scripts/bench_search.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"optuna {optuna.__version__}",
        "seeds": seeds,
        "wall_s": time.perf_counter() - t0,
        "within": WITHIN,
    }


def write_generated(out: Path, result: dict[str, Any]) -> None:
    """docs/benchmarks.json gets the key ``search_generated``; docs/benchmarks.md its section."""
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "benchmarks.json"
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data["search_generated"] = result
    jpath.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    replace_section(out / "benchmarks.md", "search-generated", markdown_generated(result))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--out", default=str(ROOT / "docs"))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--scenarios", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS) + list(EXTRA_METHODS))
    p.add_argument("--landscapes", type=int, default=50, help="generated landscapes gen-000.. (0: none)")
    p.add_argument("--landscape-start", type=int, default=0, help="index of the first generated landscape")
    p.add_argument("--landscape-seeds", type=int, default=3)
    p.add_argument(
        "--landscape-methods", nargs="+", default=list(LANDSCAPE_METHODS), choices=list(METHODS) + list(EXTRA_METHODS)
    )
    args = p.parse_args(argv)
    quiet()
    if args.scenarios:
        t0 = time.perf_counter()
        gts, rows = run_all(args.scenarios, args.methods, args.seeds, args.jobs)
        result = {**_meta(argv, args.seeds, t0), "scenarios": scenario_results(args.scenarios, gts, rows)}
        write_outputs(Path(args.out), result)
        print(markdown(result))
    if args.landscapes > 0:
        t0 = time.perf_counter()
        names = [
            f"{bench_landscapes.PREFIX}{i:03d}"
            for i in range(args.landscape_start, args.landscape_start + args.landscapes)
        ]
        gts, rows = run_all(names, args.landscape_methods, args.landscape_seeds, args.jobs)
        per = scenario_results(names, gts, rows, keep_runs=False)
        gen = {
            **_meta(argv, args.landscape_seeds, t0),
            "landscapes": len(names),
            "distribution": distribution(per, args.landscape_methods),
            "scenarios": per,
        }
        write_generated(Path(args.out), gen)
        print(markdown_generated(gen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

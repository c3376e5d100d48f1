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
  confirmation, verdict). Recommendation: ``autotune.report.recommend`` after confirmation.
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
  exceeds 1 + min_gain, baseline-wins if it is below 1; in between baseline-wins and inconclusive both count.

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

from bench_common import replace_section  # noqa: E402

from autotune import records  # noqa: E402
from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.clock import VirtualClock  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.errors import LaunchError  # noqa: E402
from autotune.measure import measure_config  # noqa: E402
from autotune.report import build_report  # noqa: E402
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
#: comparisons with settings other than the shipped defaults, run only when asked for (see make_method)
EXTRA_METHODS: tuple[str, ...] = ("tuner_prev",)
WITHIN = 0.02

# ------------------------------------------------------------------------------------------------ scenarios


def _bench_scenario(path: Path) -> Scenario:
    """A benchmark scenario file (same format as autotune/sim/scenarios/*.yaml); dirs resolve in scripts/
    bench_scenarios/ first, then in the package's scenario directory."""
    return read_scenario(str(path), dirs=[str(BENCH_DIR), SCENARIO_DIR])


_LOADER: list[ScenarioLoader] = []  # read once per process (not functools.cache: joblib's workers pickle by value)


def scenarios() -> ScenarioLoader:
    """Scenario names as the benchmark resolves them: scripts/bench_scenarios/ besides the shipped scenarios (given
    to ``simulated_space`` and ``ModelRunner``)."""
    if not _LOADER:
        extra = {s.name: s for s in (_bench_scenario(p) for p in sorted(BENCH_DIR.glob("*.scenario.yaml")))}
        _LOADER.append(scenario_loader(extra))
    return _LOADER[0]


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="optuna")


def load(name: str, n_trials: int | None = None) -> Space:
    from autotune.sim import simulated_space

    space = simulated_space(load_space(str(ROOT / SCENARIOS[name][0])), scenarios=scenarios())
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
        right = ["baseline-wins"]
    else:
        right = ["baseline-wins", "inconclusive"]
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
        "space": SCENARIOS[name][0],
        "what": SCENARIOS[name][1],
    }


# ------------------------------------------------------------------------------------------------ methods


class EndTimes:
    """A listener: the virtual time at which each trial ended (its ``trial-end`` event, the last thing it does)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.at: dict[int, float] = {}

    def __call__(self, ev: Event) -> None:
        if ev.kind == "trial-end" and ev.trial is not None:
            self.at[ev.trial] = self.clock.now()


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

    rec = build_report(study)["recommended"]["config"]
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

    false_prunes = [t for t in pruned if true_speedup(t) > 1.0]
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
        "baseline-wins if < 1, else baseline-wins or inconclusive). Grid = every feasible point in "
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--out", default=str(ROOT / "docs"))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS) + list(EXTRA_METHODS))
    args = p.parse_args(argv)
    from joblib import Parallel, delayed

    quiet()
    t0 = time.perf_counter()
    gts = dict(
        zip(
            args.scenarios,
            Parallel(n_jobs=args.jobs)(delayed(ground_truth)(n) for n in args.scenarios),
            strict=True,
        )
    )
    tasks = [
        (n, m, s, gts[n]["truth"], gts[n]["optimum"]["tok_per_s"])
        for n in args.scenarios
        for m in args.methods
        for s in range(args.seeds)
    ]
    # the longest first (the grids), so both workers stay busy to the end
    tasks.sort(key=lambda t: (t[1] != "grid", -gts[t[0]]["grid_points"]))
    rows = Parallel(n_jobs=args.jobs, verbose=0)(delayed(run_one)(*t) for t in tasks)
    result: dict[str, Any] = {
        "command": "python scripts/bench_search.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"optuna {optuna.__version__}",
        "seeds": args.seeds,
        "wall_s": time.perf_counter() - t0,
        "within": WITHIN,
        "scenarios": {},
    }
    for n in args.scenarios:
        gt = {k: v for k, v in gts[n].items() if k != "truth"}
        rs = [r for r in rows if r["scenario"] == n]
        methods = aggregate(gts[n], rs)
        tuners = [m for m in methods if m.startswith("tuner") and m != "tuner_no_prune"]
        result["scenarios"][n] = {
            "ground_truth": gt,
            "methods": methods,
            "summary": {t: summary_for(gt, methods, t) for t in tuners},
            **({k: v for k, v in summary_for(gt, methods).items()} if "tuner" in methods else {}),
            "runs": [{k: v for k, v in r.items() if k != "scenario"} for r in rs],
        }
    write_outputs(Path(args.out), result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

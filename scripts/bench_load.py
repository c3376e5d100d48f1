"""Load-level benchmark: the tuner with ``benchmark.concurrency`` against SGLang's ``bench_speculative.py`` style
per-batch-size grid, on the simulator's in-process model (virtual GPU time, continuous batching, no processes).

- ``grid`` (the anchor): one server start per (load level, config) pair, as ``bench_speculative.py`` relaunches
  for every (batch size, config): every feasible point of the space and the baseline, at every level, each start
  measuring that level only (warm-up at the level first). Its winner at a level is the point with the highest
  measured aggregate tok/s there. Run once (seed 0): its GPU time barely depends on the noise.
- ``tuner``: ``autotune.study`` as shipped on the loaded space (one start measures every level; objective = the
  weighted geometric mean of the levels' tok/s; prompts x levels pruning; the draft-length ladder after the
  search; per-level confirmation), then the schedule ``autotune export`` would print.

Figures per seed: objective regret (1 - true objective of the recommended config / the true optimum over every
grid point and the baseline), per-level regret of the schedule (at each level the config the schedule runs
there, the baseline where it is off, against the best true tok/s at that level), GPU time against the grid's,
false prunes (pruned trials whose true objective speedup is above 1.02). True = noise-free (``--sim-no-noise``).

    python scripts/bench_load.py                     # 20 seeds, writes docs/benchmarks.md (section load-levels)
    python scripts/bench_load.py --seeds 3 --no-write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_common import KeptRuns, replace_section  # noqa: E402

from autotune import objective, records, schedule  # noqa: E402
from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.config import LevelResult, TrialConfig  # noqa: E402
from autotune.errors import LaunchError  # noqa: E402
from autotune.report import build_report  # noqa: E402
from autotune.seam import VirtualClock  # noqa: E402
from autotune.sim import ModelRunner, simulated_space  # noqa: E402
from autotune.sim.scenario import SCENARIO_DIR, ScenarioLoader, read_scenario, scenario_loader  # noqa: E402
from autotune.space import Space, load_space  # noqa: E402
from autotune.study import Orchestrator, open_study  # noqa: E402

SCENARIOS = {
    "llama-load": (
        "scripts/bench_scenarios/llama-load.space.yaml",
        "Llama-3.1-8B H100 + EAGLE-3, levels 1-256: the gain shrinks with load, the best chain shortens, off at 256",
    ),
    "moe-load": (
        "scripts/bench_scenarios/moe-load.space.yaml",
        "gpt-oss-120B-like MoE H100 + EAGLE-3: a modest gain kept under load, the best draft shortens",
    ),
}
BENCH_DIR = Path(__file__).resolve().parent / "bench_scenarios"
OBJECTIVE_WITHIN = 0.02
LEVEL_WITHIN = 0.03
FALSE_PRUNE_ABOVE = 1.02


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")


def scenarios() -> ScenarioLoader:
    """The shipped scenarios plus scripts/bench_scenarios/*.scenario.yaml (stand-ins resolve there first)."""
    extra = {}
    for path in sorted(BENCH_DIR.glob("*.scenario.yaml")):
        sc = read_scenario(str(path), dirs=[str(BENCH_DIR), SCENARIO_DIR])
        extra[sc.name] = sc
    return scenario_loader(extra)


def load(name: str) -> Space:
    return simulated_space(load_space(ROOT / SCENARIOS[name][0]), scenarios=scenarios())


def no_noise(space: Space) -> Space:
    server = dataclasses.replace(space.server, extra_args=(*space.server.extra_args, "--sim-no-noise"))
    return dataclasses.replace(space, server=server)


def points(space: Space) -> list[TrialConfig]:
    cgs = sorted({bool(c) for c in space.search.cuda_graph}, reverse=True)
    return [TrialConfig.baseline(cg) for cg in cgs] + list(SGLangBackend().grid(space) or [])


def _level(runner: ModelRunner, cfg: TrialConfig, level: int, space: Space) -> LevelResult:
    """One start of ``cfg`` measuring ``level`` only (level 1: the prompts one after another)."""
    session = runner.launch(cfg)
    try:
        if level == 1:
            session.warmup()
            return LevelResult.sequential([session.run_prompt(i) for i in range(len(space.benchmark.prompts))])
        return session.run_level(level)
    finally:
        session.close()


def ground_truth(name: str) -> dict[str, Any]:
    """Noise-free per-level tok/s of every point and the baseline; the objective of each."""
    quiet()
    space = no_noise(load(name))
    levels = space.benchmark.concurrency
    weights = space.objective.weights_for(levels)
    runner = ModelRunner(space, SGLangBackend(), VirtualClock(), seed=0, scenarios=scenarios())
    per: dict[str, dict[int, float]] = {}
    for cfg in points(space):
        try:
            per[cfg.key()] = {c: _level(runner, cfg, c, space).tok_per_s for c in levels}
        except LaunchError:
            continue
    obj = {k: objective.weighted_value(v, weights) for k, v in per.items()}
    best_key = max(obj, key=lambda k: obj[k])
    level_best = {c: max(v[c] for v in per.values()) for c in levels}
    level_best_key = {c: max(per, key=lambda k, c=c: per[k][c]) for c in levels}
    return {
        "levels": list(levels),
        "per_level": per,
        "objective": obj,
        "optimum": obj[best_key],
        "optimum_config": json.loads(best_key),
        "level_best": level_best,
        "level_best_config": {c: json.loads(k) for c, k in level_best_key.items()},
        "points": len(per),
    }


def run_grid(name: str, truth: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    quiet()
    space = load(name)
    clock = VirtualClock()
    runner = ModelRunner(space, SGLangBackend(), clock, seed=seed, scenarios=scenarios())
    levels = space.benchmark.concurrency
    best: dict[int, tuple[float, str]] = {}
    starts = 0
    for c in levels:
        for cfg in points(space):
            try:
                v = _level(runner, cfg, c, space).tok_per_s
            except LaunchError:
                continue
            starts += 1
            if c not in best or v > best[c][0]:
                best[c] = (v, cfg.key())
    regrets = {c: 1 - truth["per_level"][k][c] / truth["level_best"][c] for c, (_, k) in best.items()}
    return {"method": "grid", "seed": seed, "gpu_s": clock.now(), "server_starts": starts, "level_regret": regrets}


def run_tuner(name: str, seed: int, truth: dict[str, Any]) -> dict[str, Any]:
    quiet()
    space = load(name)
    backend = SGLangBackend()
    clock = VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=seed, scenarios=scenarios())
    study = open_study(space, optuna.storages.InMemoryStorage(), f"bench-{name}-{seed}", seed=seed, simulated=True)
    orch = Orchestrator(space, backend, runner, study, clock=clock)
    orch.search(space.budget.n_trials)
    search_s = clock.now()
    state = orch.confirm()
    rep = build_report(study).to_json()
    rec = rep["recommended"]["config"]
    rec_key = TrialConfig.from_dict(rec).key()
    levels = space.benchmark.concurrency
    rows = records.confirmed_level_rows(study) or records.level_rows(study)
    sched = schedule.build(rows, levels, rec, backend="sglang", min_gain=space.verdict.min_gain)
    per = truth["per_level"]
    base_key = TrialConfig.baseline(True).key()  # the bench spaces search graphs on only
    # the schedule: at each level the config it runs there (the baseline where it is off)
    schedule_regret = {}
    for x in sched["levels"]:
        c = x["level"]
        key = TrialConfig.from_dict(x["config"]).key() if x["config"] else base_key
        schedule_regret[c] = 1 - per[key][c] / truth["level_best"][c]
    # each level's winner as confirmation names it (any config; the baseline where speculation loses there)
    level_regret = {}
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for v in state.get("level_verdicts") or []:
        c = int(v["level"])
        key = base_key  # where the best candidate's point estimate is not above 1, the baseline is the winner
        ci = v.get("speedup_ci") or {}
        if v["trial"] is not None and v["verdict"] != "baseline-wins" and ci.get("point", 0.0) > 1.0:
            key = records.TrialRecord(by_number[int(v["trial"])]).effective_config().key()
        level_regret[c] = 1 - per[key][c] / truth["level_best"][c]
    trials = study.get_trials(deepcopy=False)
    measured = [t for t in trials if records.is_measured_speculative(t)]
    pruned = [t for t in measured if t.state == optuna.trial.TrialState.PRUNED and records.TrialRecord(t).prune_reason]
    base_obj = truth["objective"][TrialConfig.baseline(True).key()]

    def true_speedup(t: optuna.trial.FrozenTrial) -> float:
        return truth["objective"][records.TrialRecord(t).effective_config().key()] / base_obj

    false = [round(true_speedup(t), 4) for t in pruned if true_speedup(t) > FALSE_PRUNE_ABOVE]
    return {
        "method": "tuner",
        "seed": seed,
        "gpu_s": clock.now(),
        "search_s": search_s,
        "server_starts": runner.launches,
        "regret": 1 - truth["objective"][rec_key] / truth["optimum"],
        "level_regret": level_regret,
        "schedule_regret": schedule_regret,
        "schedule": [x["draft"] for x in sched["levels"]],
        "static": sched["static"],
        "verdict": state.get("verdict"),
        "level_text": state.get("level_text"),
        "measured_speculative": len(measured),
        "pruned": len(pruned),
        "false_prunes": false,
        "ladder": sum(1 for t in trials if records.TrialRecord(t).seeded == "ladder"),
    }


def _level_hits(rows: list[dict[str, Any]], levels: list[int]) -> tuple[int, int, int]:
    """(seeds with every level's winner within 3%, (seed, level) picks within 3%, picks)."""
    seeds = sum(1 for r in rows if all(r["level_regret"].get(c, 1.0) <= LEVEL_WITHIN for c in levels))
    picks = sum(1 for r in rows for c in levels if r["level_regret"].get(c, 1.0) <= LEVEL_WITHIN)
    return seeds, picks, len(rows) * len(levels)


def markdown(
    name: str, truth: dict[str, Any], grid: dict[str, Any], rows: list[dict[str, Any]], grids: list[dict[str, Any]]
) -> str:
    n = len(rows)
    obj_hits = sum(1 for r in rows if r["regret"] <= OBJECTIVE_WITHIN)
    ratios = sorted(r["gpu_s"] / grid["gpu_s"] for r in rows)
    med = ratios[len(ratios) // 2]
    false = sum(len(r["false_prunes"]) for r in rows)
    pruned = sum(r["pruned"] for r in rows)
    measured = sum(r["measured_speculative"] for r in rows)
    sched = {}
    for r in rows:
        sched[tuple(r["schedule"])] = sched.get(tuple(r["schedule"]), 0) + 1
    worst_level = {c: max(r["level_regret"].get(c, 1.0) for r in rows) for c in truth["levels"]}
    worst_sched = {c: max(r["schedule_regret"][c] for r in rows) for c in truth["levels"]}
    level_hits, picks, n_picks = _level_hits(rows, truth["levels"])
    g_hits, g_picks, g_n = _level_hits(grids, truth["levels"])
    lines = [
        f"### {name}: {SCENARIOS[name][1]}",
        "",
        f"Space `{SCENARIOS[name][0]}`: {truth['points']} configs x levels {truth['levels']}; objective weights and "
        f"latency limits as in the space. True optimum: {truth['optimum_config']} (objective "
        f"{truth['optimum']:.0f} tok/s). Per-level true winners: "
        + ", ".join(
            f"{c}: ({v.get('num_steps')},{v.get('topk')},{v.get('num_draft_tokens')})"
            if v.get("drafter")
            else f"{c}: baseline"
            for c, v in truth["level_best_config"].items()
        )
        + ".",
        "",
        "| figure | target | measured |",
        "|---|---|---|",
        f"| weighted-objective optimum within 2% | >= 95% of seeds | {obj_hits}/{n} ({obj_hits / n:.0%}); "
        f"median regret {sorted(r['regret'] for r in rows)[n // 2]:.2%}, worst {max(r['regret'] for r in rows):.2%} |",
        f"| each level's winner within 3% (confirmation's best there, or the baseline) | every level | {level_hits}/{n}"
        f" seeds at every level, {picks}/{n_picks} (seed, level) picks ({picks / n_picks:.0%}); the grid anchor on "
        f"the same seeds: {g_hits}/{len(grids)} seeds, {g_picks}/{g_n} picks ({g_picks / g_n:.0%}); worst per "
        "level: " + ", ".join(f"{c}: {v:.1%}" for c, v in worst_level.items()) + " |",
        "| the schedule's config at each level (static drafter, graphs, topk) vs the best at that level | - | worst "
        "per level: " + ", ".join(f"{c}: {v:.1%}" for c, v in worst_sched.items()) + " |",
        f"| GPU time vs the per-batch-size grid | <= 10% | median {med:.1%} (max {ratios[-1]:.1%}); grid "
        f"{grid['gpu_s'] / 3600:.1f} h in {grid['server_starts']} starts, tuner median "
        f"{sorted(r['gpu_s'] for r in rows)[n // 2] / 3600:.2f} h in "
        f"{sorted(r['server_starts'] for r in rows)[n // 2]} starts |",
        f"| false prunes (true objective speedup > 1.02) | none | {false} of {pruned} pruned ({measured} measured "
        "speculative trials) |",
        "",
        "Schedules (draft steps per level, 0 = off) over the seeds: "
        + "; ".join(f"{list(k)} x{v}" for k, v in sorted(sched.items(), key=lambda kv: -kv[1]))
        + ". The grid anchor's per-level winners (its fastest single measurement at each level, one start per "
        "(level, config)), worst per level over the seeds: "
        + ", ".join(f"{c}: {max(g['level_regret'][c] for g in grids):.1%}" for c in grid["level_regret"])
        + ".",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--cache", default=None, help="keep each run's result here; a rerun skips the runs kept")
    args = ap.parse_args(argv)
    from joblib import Parallel, delayed

    sections = []
    raw: dict[str, Any] = {}
    t0 = time.perf_counter()
    truths = {name: ground_truth(name) for name in args.scenarios}
    kept = KeptRuns(args.cache) if args.cache else None

    def job(kind: str, name: str, seed: int) -> Any:
        """One grid or tuner run; with ``--cache`` its result is kept there and not computed again."""
        out = kept.get((kind, name, seed)) if kept else None
        if out is None:
            out = run_grid(name, truths[name], seed) if kind == "grid" else run_tuner(name, seed, truths[name])
            if kept:
                kept.keep((kind, name, seed), out)
        return out

    # every scenario's grid and tuner runs in one pool: the machine's cores stay busy to the end
    jobs = [(kind, name, s) for name in args.scenarios for kind in ("grid", "tuner") for s in range(args.seeds)]
    done = dict(zip(jobs, Parallel(n_jobs=args.jobs)(delayed(job)(*j) for j in jobs), strict=True))
    for name in args.scenarios:
        truth = truths[name]
        grids = [done[("grid", name, s)] for s in range(args.seeds)]
        grid = grids[0]
        rows = [done[("tuner", name, s)] for s in range(args.seeds)]
        md = markdown(name, truth, grid, rows, grids)
        print(md, flush=True)
        sections.append(md)
        raw[name] = {
            "truth": {k: v for k, v in truth.items() if k != "per_level"},
            "grid": grid,
            "grid_seeds": grids,
            "tuner": rows,
        }
    print(f"({time.perf_counter() - t0:.0f} s wall, --jobs {args.jobs})", flush=True)
    if not args.no_write:
        out = Path(args.out)
        intro = (
            "## Load levels (`scripts/bench_load.py`)\n\n"
            "The tuner with `benchmark.concurrency` against `bench_speculative.py`'s per-batch-size grid (one start "
            "per (level, config)), on the in-process simulator (virtual GPU time, continuous batching). "
            f"{args.seeds} seeds per scenario. Raw rows: `docs/benchmarks-load.json`.\n\n"
        )
        replace_section(out / "benchmarks.md", "load-levels", intro.rstrip())
        for name, md in zip(args.scenarios, sections, strict=True):
            replace_section(out / "benchmarks.md", f"load-levels-{name}", md)
        path = out / "benchmarks-load.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **raw}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

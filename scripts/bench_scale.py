"""Scale-out benchmark: the same simulated budget with 1, 2 and 4 GPU slots (parallel workers of one study), wall
time and hit rate, on the simulator's in-process model with a virtual clock per slot.

Each slot is a worker thread with its own ``ModelRunner`` (its own server starts and noise), its own sampler
(seed + slot) and its own ``optuna.Study`` object over one shared ``InMemoryStorage``: what ``autotune study
--gpus A --gpus B`` runs as processes on PostgreSQL, with the same orchestration (the study lock, the budget
claimed per trial, waiting for baselines and for configs another worker is measuring, constant-liar TPE). The
slots' clocks are one timeline (``autotune.seam.ParallelClocks``): one worker runs at a time, the one whose
virtual clock is the earliest, so that the workers see each other's trials in the order parallel servers would
produce them. After the search, the confirmation runs once (on slot 0), as ``autotune study --gpus`` does.

Figures (per scenario, slot count and seed):
- search wall: the virtual time at which the last worker finished its last trial (what the user waits for
  before the confirmation); total wall: search wall + the confirmation.
- speed-up: the one-slot median search wall / the n-slot median search wall (same seeds, same budget).
- trials: counted trials of the study (must equal the budget: the budget is shared and exact). The settled stop
  is off here (``budget.stop_when_settled: false``, ``fixed_budget``): a search that stops early would not be the
  same budget on every slot count, and the speed-up would compare different amounts of work
  (scripts/bench_search.py measures the stop).
- hit: the recommendation after confirmation is within 2% of the true (noise-free) optimum
  (``bench_search.ground_truth``).

    python scripts/bench_scale.py                        # 20 seeds, 1/2/4 slots, writes docs/benchmarks.{md,json}
    python scripts/bench_scale.py --seeds 2 --scenarios llama --out /tmp/b
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import bench_search  # noqa: E402
from bench_common import replace_section  # noqa: E402

from autotune import records  # noqa: E402
from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.report import build_report  # noqa: E402
from autotune.seam import ParallelClocks, VirtualClock  # noqa: E402
from autotune.space import Space  # noqa: E402
from autotune.study import Orchestrator, make_pruner, make_sampler, open_study  # noqa: E402

SLOTS = (1, 2, 4)

#: scenarios run by default (bench_search's names): a clear winner, the field report's near-tie, an optimum on the edge
DEFAULT_SCENARIOS = ("llama", "kimi", "llama-edge")
WITHIN = bench_search.WITHIN


def fixed_budget(space: Space) -> Space:
    """The whole budget on every slot count: ``space`` with the settled stop off (``budget.stop_when_settled:
    false``; the module's docstring says why)."""
    return dataclasses.replace(space, budget=dataclasses.replace(space.budget, stop_when_settled=False))


def parallel_search(
    space: Space, n_slots: int, seed: int, *, name: str, scenarios: Any = None
) -> tuple[optuna.Study, ParallelClocks, list[Any]]:
    """Search ``space`` with ``n_slots`` parallel workers on one in-memory study, its settled stop off
    (``fixed_budget``); (study, timeline, runners)."""
    from autotune.sim.runner import ModelRunner

    space = fixed_budget(space)

    backend = SGLangBackend()
    storage = optuna.storages.InMemoryStorage()
    open_study(space, storage, name, seed=seed, simulated=True)  # created and labelled once
    timeline = ParallelClocks(n_slots)
    runners: list[Any] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            timeline.start(i)
            study = optuna.load_study(
                study_name=name, storage=storage, sampler=make_sampler(space, seed * 100 + i), pruner=make_pruner(space)
            )
            orch = Orchestrator(space, backend, runners[i], study, clock=timeline.clock(i))
            orch.search(space.budget.n_trials)
        except BaseException as e:  # reported by the caller
            errors.append(e)
        finally:
            timeline.done(i)

    for i in range(n_slots):
        kwargs = {"scenarios": scenarios} if scenarios is not None else {}
        runners.append(ModelRunner(space, backend, timeline.clock(i), seed=seed * 100 + i, **kwargs))
    threads = [threading.Thread(target=worker, args=(i,), name=f"slot-{i}") for i in range(n_slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return optuna.load_study(study_name=name, storage=storage), timeline, runners


def run_one(name: str, n_slots: int, seed: int, truth: dict[str, float], opt: float) -> dict[str, Any]:
    from autotune.sim.runner import ModelRunner

    bench_search.quiet()
    t0 = time.perf_counter()
    space = bench_search.load(name)
    loader = bench_search.scenarios()
    study, timeline, runners = parallel_search(
        space, n_slots, seed, name=f"scale-{name}-{n_slots}-{seed}", scenarios=loader
    )
    search_s = timeline.now()
    clock = VirtualClock(start=search_s)  # the confirmation: once, on slot 0's GPUs, after every worker ended
    confirm_runner = ModelRunner(space, SGLangBackend(), clock, seed=seed * 100, scenarios=loader)
    state = Orchestrator(space, SGLangBackend(), confirm_runner, study, clock=clock).confirm()
    rec = build_report(study).to_json()["recommended"]["config"]
    regret = 1 - truth[TrialConfig.from_dict(rec).key()] / opt
    trials = study.get_trials(deepcopy=False)
    return {
        "scenario": name,
        "slots": n_slots,
        "seed": seed,
        "search_s": search_s,
        "total_s": clock.now(),
        "trials_counted": records.counted_trials(study),
        "trials": len(trials),
        "server_starts": sum(r.launches for r in runners),
        "per_slot_busy_s": [round(timeline.clock(i).now(), 1) for i in range(n_slots)],
        "measured_baselines": sum(
            1
            for t in trials
            if records.TrialRecord(t).is_baseline
            and t.state == optuna.trial.TrialState.COMPLETE
            and not records.TrialRecord(t).is_duplicate
        ),
        "regret": regret,
        "hit": regret <= WITHIN,
        "verdict": state.get("verdict"),
        "wall_s": time.perf_counter() - t0,
    }


def aggregate(rows: list[dict[str, Any]], n_trials: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    one = (
        statistics.median(r["search_s"] for r in rows if r["slots"] == 1)
        if any(r["slots"] == 1 for r in rows)
        else None
    )
    for n in sorted({r["slots"] for r in rows}):
        rs = [r for r in rows if r["slots"] == n]
        med = statistics.median(r["search_s"] for r in rs)
        out[str(n)] = {
            "runs": len(rs),
            "search_median_s": med,
            "total_median_s": statistics.median(r["total_s"] for r in rs),
            "speedup_vs_1_slot": (one / med) if one else None,
            "hit_rate_2pct": sum(r["hit"] for r in rs) / len(rs),
            "regret_median": statistics.median(r["regret"] for r in rs),
            "budget_exact": all(r["trials_counted"] == n_trials for r in rs),
            "baselines_measured_once": all(r["measured_baselines"] == rs[0]["measured_baselines"] for r in rs),
            "server_starts_median": statistics.median(r["server_starts"] for r in rs),
            "verdicts": {v: sum(r["verdict"] == v for r in rs) for v in sorted({str(r["verdict"]) for r in rs})},
        }
    return out


def _h(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Scale-out: GPU slots (parallel workers of one study)",
        "",
        f"`{result['command']}` ({result['date']}; {result['machine']}; {result['seeds']} seeds per cell, "
        f"{result['wall_s']:.0f} s). The same budget searched by 1, 2 and 4 parallel workers of one study on the "
        "simulator's in-process model, one virtual clock per slot on one timeline (`autotune.seam.ParallelClocks`); "
        "wall = simulated hardware time until the last worker's last trial (the confirmation, run once afterwards, "
        "is in `total`); the settled stop is off, so every slot count searches the whole budget. "
        "Hit = recommendation after confirmation within 2% of the true optimum.",
        "",
        "| scenario | slots | search wall (median) | speed-up vs 1 slot | total wall (median) | hit rate | "
        "regret (median) | budget exact | server starts | verdicts |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, sc in result["scenarios"].items():
        for n, m in sc["slots"].items():
            sp = m["speedup_vs_1_slot"]
            lines.append(
                f"| {name} ({sc['n_trials']} trials) | {n} | {_h(m['search_median_s'])} | "
                f"{'-' if sp is None else f'{sp:.2f}x'} | {_h(m['total_median_s'])} | {m['hit_rate_2pct']:.0%} | "
                f"{m['regret_median']:.2%} | {'yes' if m['budget_exact'] else 'NO'} | "
                f"{m['server_starts_median']:.0f} | " + ", ".join(f"{k} {v}" for k, v in m["verdicts"].items()) + " |"
            )
    lines += [
        "",
        "Targets: speed-up >= 1.7x at 2 slots and >= 3x at 4, hit rate no worse than one slot's. "
        + "; ".join(
            f"{name}: "
            + ", ".join(
                f"{n} slots {m['speedup_vs_1_slot']:.2f}x / {m['hit_rate_2pct']:.0%}"
                for n, m in sc["slots"].items()
                if n != "1"
            )
            + f" (1 slot {sc['slots']['1']['hit_rate_2pct']:.0%})"
            for name, sc in result["scenarios"].items()
            if "1" in sc["slots"]
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


def write_outputs(out: Path, result: dict[str, Any]) -> None:
    """docs/benchmarks.json gets the key ``scale``; docs/benchmarks.md the scale section (other sections kept)."""
    out.mkdir(parents=True, exist_ok=True)
    jpath = out / "benchmarks.json"
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data["scale"] = result
    jpath.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    replace_section(out / "benchmarks.md", "scale", markdown(result))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--slots", type=int, nargs="+", default=list(SLOTS))
    p.add_argument("--scenarios", nargs="+", default=list(DEFAULT_SCENARIOS), choices=list(bench_search.SCENARIOS))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    if 1 not in args.slots:
        p.error("--slots must include 1 (the reference)")
    from joblib import Parallel, delayed

    bench_search.quiet()
    t0 = time.perf_counter()
    gts = {n: bench_search.ground_truth(n) for n in args.scenarios}
    tasks = [
        (n, k, s, gts[n]["truth"], gts[n]["optimum"]["tok_per_s"])
        for n in args.scenarios
        for k in args.slots
        for s in range(args.seeds)
    ]
    rows = Parallel(n_jobs=args.jobs)(delayed(run_one)(*t) for t in tasks)
    result: dict[str, Any] = {
        "command": "python scripts/bench_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"optuna {optuna.__version__}",
        "seeds": args.seeds,
        "wall_s": time.perf_counter() - t0,
        "within": WITHIN,
        "scenarios": {},
    }
    for n in args.scenarios:
        rs = [r for r in rows if r["scenario"] == n]
        n_trials = gts[n]["n_trials"]
        result["scenarios"][n] = {
            "n_trials": n_trials,
            "optimum": gts[n]["optimum"],
            "slots": aggregate(rs, n_trials),
            "runs": [{k: v for k, v in r.items() if k != "scenario"} for r in rs],
        }
    write_outputs(Path(args.out), result)
    print(markdown(result))
    return 0 if all(math.isfinite(r["search_s"]) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

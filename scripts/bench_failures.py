"""Failed starts: what they cost a study and whether its bill says so. The field report's Kimi space on the
simulator's in-process model (virtual GPU time), with the simulator's faults injected (``--fault``): trees over 6
draft tokens out of memory after loading, a drafter whose server never gets healthy (each start held to the
30-minute start-up limit), one that exits during start-up, one whose servers die at their third request.

Per run: the server time the clock charged (start-ups, failed ones included, and every timed request: what the
GPUs were held for), the report's GPU time read back from the study's records, the failed starts, the verdict.
Variants side by side on the same seeds: ``shipped``, and ``no_family_rule`` (a drafter whose server never started
is launched on, as before ``autotune.study.trial.NEVER_STARTED``).

    python scripts/bench_failures.py                 # 5 seeds, writes docs/benchmarks.md (section failed-starts)
    python scripts/bench_failures.py --seeds 2 --no-write
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_common import replace_section  # noqa: E402

from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.report import build_report  # noqa: E402
from autotune.seam import VirtualClock  # noqa: E402
from autotune.sim import ModelRunner, simulated_space  # noqa: E402
from autotune.space import load_space  # noqa: E402
from autotune.study import Orchestrator, open_study, trial  # noqa: E402

SPACE = "spaces/eagle3.yaml"
FAULTS = ("", "oom-above:6", "never-healthy@aq-medai", "crash-startup@aq-medai", "crash-after:3@aq-medai")
VARIANTS = ("shipped", "no_family_rule")


def run(fault: str, seed: int, variant: str) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # every failed trial is a warning
    space = simulated_space(load_space(str(ROOT / SPACE)))
    extra = [*space.server.extra_args, *(["--fault", fault] if fault else [])]
    space = dataclasses.replace(space, server=dataclasses.replace(space.server, extra_args=tuple(extra)))
    clock = VirtualClock()
    runner = ModelRunner(space, SGLangBackend(), clock, seed=seed)
    study = open_study(space, optuna.storages.InMemoryStorage(), f"f-{seed}", seed=seed, simulated=True)
    orch = Orchestrator(space, SGLangBackend(), runner, study, clock=clock)
    keep = trial.NEVER_STARTED
    trial.NEVER_STARTED = 10**9 if variant == "no_family_rule" else keep
    try:
        orch.search(space.budget.n_trials)
        state = orch.confirm()
    finally:
        trial.NEVER_STARTED = keep
    g = build_report(study).to_json()["gpu_time"]
    server_s = clock.charged.get("startup", 0.0) + clock.charged.get("generate", 0.0)
    return {
        "fault": fault or "none",
        "seed": seed,
        "variant": variant,
        "server_s": server_s,
        "billed_s": g["total_s"],
        "starts": g["search_starts"] + g["confirmation_starts"],
        "failed_starts": g["failed_starts"],
        "failed_s": g["failed_s"],
        "verdict": state.get("verdict"),
    }


def markdown(rows: list[dict[str, Any]], seeds: int, wall: float) -> str:
    out = [
        "## Failed starts: their cost and the bill (`scripts/bench_failures.py`)",
        "",
        f"The field report's Kimi space (`{SPACE}`) on the in-process simulator, with the simulator's faults; "
        f"{seeds} seeds per row, medians; {wall:.0f} s of wall time on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. *Server time*: what the clock charged (start-ups, "
        "failed ones included, and every timed request); *billed*: the report's GPU time, from the study's records "
        "alone; *unbilled*: the largest share of the server time the bill left out in any seed.",
        "",
        "| fault | variant | server time (h) | billed (h) | unbilled, worst | starts | failed starts | failed (h) "
        "| verdicts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for fault in dict.fromkeys(r["fault"] for r in rows):
        for variant in VARIANTS:
            rs = [r for r in rows if r["fault"] == fault and r["variant"] == variant]
            if not rs:
                continue

            def med(k: str, rs: list[dict[str, Any]] = rs) -> float:
                return statistics.median(r[k] for r in rs)

            worst = max(1 - r["billed_s"] / r["server_s"] for r in rs)
            verdicts: dict[str, int] = {}
            for r in rs:
                verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
            out.append(
                f"| {fault} | {variant} | {med('server_s') / 3600:.2f} | {med('billed_s') / 3600:.2f} | "
                f"{worst:.2%} | {med('starts'):.0f} | {med('failed_starts'):.0f} | {med('failed_s') / 3600:.2f} | "
                + ", ".join(f"{k} x{v}" for k, v in sorted(verdicts.items()))
                + " |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from joblib import Parallel, delayed

    t0 = time.perf_counter()
    jobs = [(f, s, v) for f in FAULTS for v in VARIANTS for s in range(args.seeds) if f or v == "shipped"]
    rows = Parallel(n_jobs=args.jobs)(delayed(run)(*j) for j in jobs)
    md = markdown(rows, args.seeds, time.perf_counter() - t0)
    print(md)
    if not args.no_write:
        replace_section(ROOT / "docs" / "benchmarks.md", "failed-starts", md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Passes of the prompts per confirmation start (``autotune.noise``): what choosing them by the measured noise
split and costs saves, and what it costs, against one pass per start, on the simulator (virtual GPU time).

Each (scenario, noise, seed) runs the shipped study (search, then confirmation) twice from the same seed: with
``CandidatePolicy.max_passes`` 4 (``passes``) and 1 (``one-pass``: shipped; the simulator's passes are
exchangeable re-measurements, a real server's are not: docs/gpu-runs/2026-12-04-h200-noise23). The search is
the same in both (passes only change confirmation's extra rounds), so the figures
differ by confirmation alone. Noise settings: the scenario's calibrated one (start-to-start 2.5%, a request 0.5%:
temperature 0 on a dedicated node), a noisy-request one (a request 6%, as a shared node gives; start-to-start 1%)
and a sampled one (a request 10%, as sampling at a temperature gives; start-to-start 2.5%).

Figures per setting: confirmation's and the whole study's GPU hours (medians), confirmation starts, verdicts,
how often the pick's 95% interval holds the true speedup, and the passes chosen.

    python scripts/bench_passes.py                       # 20 seeds, writes docs/bench_passes.json + a section
    python scripts/bench_passes.py --seeds 3 --scenarios llama --out /tmp/b
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_common import replace_section  # noqa: E402

from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.clock import VirtualClock  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.sim import simulated_space  # noqa: E402
from autotune.sim.runner import ModelRunner  # noqa: E402
from autotune.sim.scenario import load_scenario, scenario_loader  # noqa: E402
from autotune.space import SimulateSpec, load_space  # noqa: E402
from autotune.study import CandidatePolicy, Orchestrator, Policies, open_study  # noqa: E402

#: name -> (space file, scenario name)
SCENARIOS = {
    "kimi": ("spaces/eagle3.yaml", "kimi-k25-rtxpro6000"),
    "llama": ("spaces/llama-8b-eagle3.yaml", "llama31-8b-h100"),
}
#: noise setting -> (start-to-start sd, one request's sd); None: the scenario's own
NOISE: dict[str, tuple[float, float] | None] = {
    "calibrated": None,
    "noisy-requests": (0.01, 0.06),
    "sampled": (0.025, 0.10),
}
VARIANTS = {"passes": 4, "one-pass": 1}


def run_one(job: tuple[str, str, str, int]) -> dict[str, Any]:
    name, noise, variant, seed = job
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space_file, scenario_name = SCENARIOS[name]
    sc = load_scenario(scenario_name)
    if NOISE[noise] is not None:
        start_sd, request_sd = NOISE[noise]  # type: ignore[misc]
        sc = dataclasses.replace(sc, start_noise_sd=start_sd, request_noise_sd=request_sd)
    loader = scenario_loader({scenario_name: sc})
    base = load_space(str(ROOT / space_file))
    sim = dataclasses.replace(base.simulate or SimulateSpec(), seed=seed)
    space = simulated_space(dataclasses.replace(base, simulate=sim), scenarios=loader)
    backend, clock = SGLangBackend(), VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=seed, scenarios=loader)
    study = open_study(space, optuna.storages.InMemoryStorage(), "passes", seed=seed)
    policies = Policies(candidates=CandidatePolicy(max_passes=VARIANTS[variant]))
    orch = Orchestrator(space, backend, runner, study, clock=clock, policies=policies)
    orch.search(space.budget.n_trials)
    search_s = clock.now()
    state = orch.confirm()
    covered = None
    ci = None
    if state.best is not None and state.results:
        best = next(r for r in state.results if r["trial"] == state.best)
        ci = best.get("speedup_ci")
        cfg = TrialConfig.from_dict(best["config"])
        true = runner.true_tok_per_s(cfg) / runner.true_tok_per_s(TrialConfig.baseline(cfg.cuda_graph))
        covered = bool(ci and ci["low"] <= true <= ci["high"])
    starts = sum(len(r.baseline) + len(r.candidates) for r in state.rounds)
    return {
        "scenario": name,
        "noise": noise,
        "variant": variant,
        "seed": seed,
        "search_s": search_s,
        "confirm_s": clock.now() - search_s,
        "total_s": clock.now(),
        "rounds": len(state.rounds),
        "confirm_starts": starts,
        "passes": [r.passes for r in state.rounds],
        "verdict": str(state.verdict.value if state.verdict else None),
        "ci": ci,
        "covered": covered,
        "split": (state.noise or {}).get("split"),
        "start_s": (state.noise or {}).get("start_s"),
        "pass_s": (state.noise or {}).get("pass_s"),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["scenario"], r["noise"], r["variant"]) for r in rows})
    for name, noise, variant in keys:
        rs = [r for r in rows if (r["scenario"], r["noise"], r["variant"]) == (name, noise, variant)]
        verdicts: dict[str, int] = {}
        for r in rs:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        with_ci = [r for r in rs if r["covered"] is not None]
        extra = [p for r in rs for p in r["passes"][3:]]
        out.append(
            {
                "scenario": name,
                "noise": noise,
                "variant": variant,
                "seeds": len(rs),
                "confirm_h_median": statistics.median(r["confirm_s"] for r in rs) / 3600,
                "total_h_median": statistics.median(r["total_s"] for r in rs) / 3600,
                "total_h_max": max(r["total_s"] for r in rs) / 3600,
                "confirm_starts_median": statistics.median(r["confirm_starts"] for r in rs),
                "rounds_median": statistics.median(r["rounds"] for r in rs),
                "verdicts": verdicts,
                "covered": f"{sum(r['covered'] for r in with_ci)}/{len(with_ci)}",
                "passes_in_extra_rounds": (statistics.median(extra) if extra else None),
            }
        )
    return out


def markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Produced by `python scripts/bench_passes.py --seeds {meta['seeds']}` on {meta['when']} ({meta['host']}). "
        "Each seed runs the shipped study twice from the same seed: passes per confirmation start chosen from the "
        "rounds' noise split and costs (`passes`, at most 4, from round 4 on) and one pass per start (`one-pass`, "
        "shipped). "
        "Hours are virtual GPU time (medians; max for the total); *covered*: the pick's 95% interval holds its "
        "true speedup; *passes*: median passes per start in the rounds after the third.",
        "",
        "| scenario | noise | variant | confirmation h | total h (max) | confirmation starts | rounds | verdicts | "
        "covered | passes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        v = ", ".join(f"{k} {n}" for k, n in sorted(s["verdicts"].items()))
        p = "-" if s["passes_in_extra_rounds"] is None else f"{s['passes_in_extra_rounds']:g}"
        lines.append(
            f"| {s['scenario']} | {s['noise']} | {s['variant']} | {s['confirm_h_median']:.2f} | "
            f"{s['total_h_median']:.2f} ({s['total_h_max']:.2f}) | {s['confirm_starts_median']:g} | "
            f"{s['rounds_median']:g} | {v} | {s['covered']} | {p} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--noise", nargs="+", default=list(NOISE), choices=list(NOISE))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=str(ROOT / "docs"))
    a = p.parse_args(argv)
    jobs = [(s, n, v, seed) for s in a.scenarios for n in a.noise for v in VARIANTS for seed in range(a.seeds)]
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        rows = list(ex.map(run_one, jobs))
    summary = summarize(rows)
    meta = {
        "seeds": a.seeds,
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_passes.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1))
    md = markdown(summary, meta)
    replace_section(out / "benchmarks.md", "passes", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

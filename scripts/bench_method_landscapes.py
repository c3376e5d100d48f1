"""Generated method landscapes (#46): does a space with ``search.methods`` name the right method and a config within
2% of the best of any method, on landscapes nobody tuned the search to?

``generate(index)`` draws, from a generator seeded by ``index`` alone, a perturbation of one of the simulator's two
method scenarios:

- ``llama31-8b-h100-methods`` (Llama-3.1-8B, H100: an EAGLE-3 head, a Llama-3.2-1B draft model, n-gram lookup) or
  ``deepseek-v3-mtp-h200`` (DeepSeek-V3, 8x H200: its own MTP layer, a third-party EAGLE-3 head, n-gram lookup);
- each drafter's acceptance profile moved (rank-1 acceptance x 0.7-1.15, its depth decay), the n-gram lookup's
  acceptance range and cost, the MTP layer's acceptance, the draft model's step cost (x 0.6-1.6);
- the prompts: 6 drawn from the code-edit and the chat prompt sets in a random mix (categories mixed: code edits copy
  their prompt, chat does not), so n-gram wins some landscapes and loses others;
- the methods available: a random subset (two at least) of what the target offers: EAGLE-3, n-gram, the draft
  model (Llama) or MTP (DeepSeek), SGLang's adaptive mode over the EAGLE-3 head and, on DeepSeek, over MTP; each
  with spaces/methods.yaml's (spaces/methods-mtp.yaml's) knobs; 40 trials.

Each (landscape, seed) runs the study in process (``Orchestrator``: search and confirmation on ``ModelRunner``'s
virtual clock, the simulated hardware's seconds) and sets it beside the grid's truth (every feasible config of
every method and the baselines, noise-free: ``ModelRunner.true_tok_per_s``): the right method (the recommendation's
method, the baseline when it deploys none, against the grid's best), within 2% (the recommendation's truth against
the best of any method), GPU time against measuring the whole grid once, and the configs within 2% of the best that
the launch gate kept from a start.

    python scripts/bench_method_landscapes.py --landscapes 50 --seeds 3     # the issue's 50 x 3
    python scripts/bench_method_landscapes.py --landscapes 20 --seeds 1 --resume /tmp/mgen --no-docs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_common import KeptRuns, replace_section  # noqa: E402

WITHIN = 0.02
#: starts per adaptive config for its truth (``adaptive_truth``): its measured runs spread ~3% around their mean
ADAPTIVE_TRUTH_SEEDS = 24
N_TRIALS = 40
N_PROMPTS = 6
PROMPTS = ROOT / "tests" / "sim" / "prompts"
KEY = "methods_generated"  # docs/benchmarks.json
SECTION = "methods-generated"  # docs/benchmarks.md's generated section
BASES = {
    "llama31-8b-h100-methods": {
        "space": "spaces/methods.yaml",
        "other": "standalone",
        "adaptive": ("adaptive",),
    },
    "deepseek-v3-mtp-h200": {
        "space": "spaces/methods-mtp.yaml",
        "other": "mtp",
        "adaptive": ("adaptive", "adaptive-mtp"),
    },
}


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _profile(p: Any, rng: np.random.Generator) -> Any:
    return dataclasses.replace(
        p, a=min(0.95, p.a * _u(rng, 0.7, 1.15)), lam=min(0.995, max(0.6, p.lam * _u(rng, 0.9, 1.03)))
    )


def _prompts(rng: np.random.Generator) -> list[dict[str, Any]]:
    def read(name: str) -> list[Any]:
        doc = yaml.safe_load((PROMPTS / name).read_text(encoding="utf-8"))
        return list(doc["prompts"] if isinstance(doc, dict) else doc)

    code, chat = read("code_edit.yaml"), read("chat.yaml")  # five of each
    n_code = int(rng.integers(N_PROMPTS - len(chat), len(code) + 1))
    picked = [code[i] for i in rng.permutation(len(code))[:n_code]]
    picked += [chat[i] for i in rng.permutation(len(chat))[: N_PROMPTS - n_code]]
    out = []
    for i, p in enumerate(picked):
        p = {"text": p} if isinstance(p, str) else dict(p)
        p["id"] = f"p{i}"
        out.append(p)
    return out


def generate(index: int) -> tuple[Any, dict[str, Any], str]:
    """(the perturbed scenario, the space as a YAML document, what it is), drawn from ``index`` alone."""
    from autotune.sim.method_models import NgramProfile
    from autotune.sim.scenario import load_scenario

    rng = np.random.default_rng(46_000 + index)
    base = str(rng.choice(sorted(BASES)))
    sc = load_scenario(base)
    drafters = {}
    for name, d in sc.drafters.items():
        d = dataclasses.replace(d, profile=_profile(d.profile, rng))
        if d.kind == "standalone" and d.costs:
            k = _u(rng, 0.6, 1.6)
            scaled = {g: {x: v * k if x in ("t_ds", "t_ext") else v for x, v in c.items()} for g, c in d.costs.items()}
            d = dataclasses.replace(d, costs=scaled)
        drafters[name] = d
    mtp = dataclasses.replace(sc.mtp, profile=_profile(sc.mtp.profile, rng)) if sc.mtp is not None else None
    ng = NgramProfile(
        a_lo=_u(rng, 0.03, 0.3), a_hi=_u(rng, 0.6, 0.95), lam_hi=_u(rng, 0.9, 0.995), t_lookup=_u(rng, 0.1, 0.8)
    )
    scenario = dataclasses.replace(sc, drafters=drafters, mtp=mtp, ngram=ng)

    info = BASES[base]
    doc = yaml.safe_load((ROOT / info["space"]).read_text(encoding="utf-8"))
    offered = ["eagle3", "ngram", info["other"], *info["adaptive"]]
    while True:  # two methods at least
        keep = [m for m in offered if rng.random() < 0.6]
        if len(keep) >= 2:
            break
    doc["search"]["methods"] = {m: v for m, v in doc["search"]["methods"].items() if m in keep}
    doc["name"] = f"mgen-{index:03d}"
    doc["benchmark"] = {"prompts": _prompts(rng), "max_tokens": 512}
    doc["budget"] = {"n_trials": N_TRIALS}
    doc["simulate"] = {"scenario": base, "time_scale": 50}
    n_code = sum(1 for p in doc["benchmark"]["prompts"] if str(p.get("category", "")).startswith("code"))
    what = f"{base}, methods {', '.join(keep)}, {n_code}/{N_PROMPTS} code prompts"
    return scenario, doc, what


def _space(doc: dict[str, Any], folder: Path) -> Any:
    from autotune.space import load_space

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return load_space(path)


def _measure(space: Any, backend: Any, loader: Any, config: Any, seed: int) -> float:
    """Tok/s over the prompts of one start of ``config`` at runner seed ``seed``."""
    from autotune.seam import VirtualClock
    from autotune.sim.runner import ModelRunner

    clock = VirtualClock()
    session = ModelRunner(space, backend, clock, seed=seed, scenarios=loader).launch(config)
    rows = [session.run_prompt(i) for i in range(len(space.benchmark.prompts))]
    session.close()
    return sum(r.completion_tokens for r in rows) / sum(r.seconds for r in rows)


def adaptive_truth(space: Any, backend: Any, loader: Any, config: Any, mean_field: float) -> float:
    """The expected measured tok/s of an adaptive config: ``ADAPTIVE_TRUTH_SEEDS`` starts, each over its baseline's
    start at the same runner seed (the seed's start and prompt noise is common to both: a static config's ratio
    equals the noise-free one's to 0.1%), times the baseline's noise-free tok/s. The simulator's noise-free figure
    of an adaptive config (``ModelRunner.true_tok_per_s``, ``mean_field``) runs the controller on each round's
    expected acceptance; the controller switches on thresholds, and its measured runs differ from that by up to ~7%
    on these landscapes, either way (landscape 41: candidate steps 1,3,5,7 measured 6% above it, 2,4,6 1% below):
    a truth a study cannot see. ``mean_field`` is unused but for a config the runner cannot start."""
    from autotune.config import TrialConfig
    from autotune.seam import VirtualClock
    from autotune.sim.runner import ModelRunner

    base = TrialConfig.baseline(bool(config.cuda_graph))
    base_true = ModelRunner(space, backend, VirtualClock(), seed=0, scenarios=loader).true_tok_per_s(base)
    ratios = []
    for seed in range(ADAPTIVE_TRUTH_SEEDS):
        ratios.append(_measure(space, backend, loader, config, seed) / _measure(space, backend, loader, base, seed))
    return base_true * float(np.mean(ratios)) if ratios else mean_field


def grid_truth(space: Any, backend: Any, loader: Any) -> dict[str, Any]:
    """Tok/s of every grid config and baseline (``by_key``): noise-free (``ModelRunner.true_tok_per_s``), an
    adaptive method's the expectation of its measurements (``adaptive_truth``); the best, each method's best, the
    grid's GPU seconds (each config measured once)."""
    from autotune.config import TrialConfig
    from autotune.seam import VirtualClock
    from autotune.sim.runner import ModelRunner

    runner = ModelRunner(space, backend, VirtualClock(), seed=0, scenarios=loader)
    by_key: dict[str, float] = {}
    method_best: dict[str, float] = {}
    grid_s = 0.0
    for c in [TrialConfig.baseline(bool(cg)) for cg in space.search.cuda_graph] + list(backend.grid(space) or []):
        clock = VirtualClock()
        measure = ModelRunner(space, backend, clock, seed=0, scenarios=loader)
        try:
            v = runner.true_tok_per_s(c)
            session = measure.launch(c)
            for i in range(len(space.benchmark.prompts)):
                session.run_prompt(i)
            session.close()
        except Exception:  # noqa: BLE001 (a config that cannot start)
            grid_s += clock.now()
            continue
        grid_s += clock.now()
        m = "baseline" if c.is_baseline else str(c.knob("method"))
        if m != "baseline" and backend.methods[m].adaptive:
            v = adaptive_truth(space, backend, loader, c, v)
        by_key[c.key()] = v
        method_best[m] = max(method_best.get(m, 0.0), v)
    return {
        "by_key": by_key,
        "best": max(by_key.values()),
        "best_method": max(method_best, key=method_best.__getitem__),
        "method_best": method_best,
        "grid_s": grid_s,
    }


def run_one(index: int, seed: int, work: Path) -> dict[str, Any]:
    import optuna

    from autotune.backends import get_backend
    from autotune.config import TrialConfig
    from autotune.report import build_report
    from autotune.seam import VirtualClock
    from autotune.sim import simulated_space
    from autotune.sim.runner import ModelRunner
    from autotune.study import Orchestrator, open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    scenario, doc, what = generate(index)

    def loader(_name: str) -> Any:
        return scenario

    space = simulated_space(_space(doc, work / f"{index}"), scenarios=loader)
    backend = get_backend("sglang")
    truth = grid_truth(space, backend, loader)
    clock = VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=seed, scenarios=loader)
    study = open_study(space, optuna.storages.InMemoryStorage(), doc["name"], seed=seed, simulated=True)
    orch = Orchestrator(space, backend, runner, study, clock=clock)
    orch.search(N_TRIALS)
    orch.confirm()
    report = build_report(study).to_json()

    def true_of(cfg: dict[str, Any] | None) -> float | None:
        if not cfg:
            return None
        return truth["by_key"].get(TrialConfig.from_dict(cfg).key())

    rec = (report.get("recommended") or {}).get("config")
    tied = list((report.get("methods") or {}).get("tied") or [])
    rec_true = true_of(rec)
    rec_method = "baseline" if not rec or rec.get("method") is None else rec["method"]
    gated = [
        r
        for r in report["trials"]
        if str(r.get("reason") or "").startswith("not launched")
        and (true_of(r.get("config")) or 0.0) >= (1 - WITHIN) * truth["best"]
    ]
    return {
        "index": index,
        "seed": seed,
        "what": what,
        "grid_best_method": truth["best_method"],
        "method_best": truth["method_best"],
        "recommended_method": rec_method,
        "right_method": rec_method == truth["best_method"],
        "tied": tied,
        # the report declared a tie (``methods.METHOD_TIE``) that includes the grid's best method
        "right_method_or_tie": rec_method == truth["best_method"] or truth["best_method"] in tied,
        "recommended_ratio": None if rec_true is None else rec_true / truth["best"],
        "within_2pct": rec_true is not None and rec_true >= (1 - WITHIN) * truth["best"],
        "gpu_s": clock.now(),
        "grid_s": truth["grid_s"],
        "gated_within_2pct": len(gated),
        "verdict": report["verdict"],
        "wall_s": time.perf_counter() - t0,
    }


def _close_call(method_best: dict[str, float]) -> bool:
    """Whether the grid's two best methods (the baseline one of them) are within ``WITHIN`` of each other: either
    is a right answer to within 2%, and which one a study names is a coin toss of its noise."""
    top = sorted(method_best.values(), reverse=True)
    return len(top) > 1 and top[1] >= (1 - WITHIN) * top[0]


def _tie_gap(row: dict[str, Any]) -> float | None:
    """A declared tie's truth gap: 1 - the slowest tied method's best over the fastest tied method's (the grid's)."""
    best = [row["method_best"][m] for m in row["tied"] if m in row["method_best"]]
    return 1.0 - min(best) / max(best) if len(best) > 1 else None


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of ``rows`` (``run_one``'s results): the right method's rate (of all runs, and of the runs whose
    grid is no close call, ``_close_call``), the within-2% rate, median GPU time against the grid's, the runs where
    the launch gate refused a config within 2% of the best, the grid's winners, the misses."""
    n = len(rows)
    ratio = [r["gpu_s"] / r["grid_s"] for r in rows if r["grid_s"]]
    winners: dict[str, int] = {}
    for r in rows:
        winners[r["grid_best_method"]] = winners.get(r["grid_best_method"], 0) + 1
    close = [r for r in rows if _close_call(r["method_best"])]
    clear = [r for r in rows if r not in close]
    return {
        "runs": n,
        "right_method_rate": sum(r["right_method"] for r in rows) / n if n else None,
        "close_calls": len(close),
        "right_method_rate_clear": sum(r["right_method"] for r in clear) / len(clear) if clear else None,
        "right_method_or_declared_tie_rate": sum(r["right_method_or_tie"] for r in rows) / n if n else None,
        "declared_ties": sum(1 for r in rows if r["tied"]),
        # how far apart the tied methods truly are (the grid's truth: 1 - the slowest tied method's best over the
        # fastest's): a tie is honest only where the truth is close too
        "tie_truth_gaps": sorted(round(g, 4) for r in rows if (g := _tie_gap(r)) is not None),
        "within_2pct_rate": sum(r["within_2pct"] for r in rows) / n if n else None,
        "gpu_median_s": statistics.median(r["gpu_s"] for r in rows) if n else None,
        "grid_median_s": statistics.median(r["grid_s"] for r in rows) if n else None,
        "gpu_vs_grid_median": statistics.median(ratio) if ratio else None,
        "gated_within_2pct_runs": sum(1 for r in rows if r["gated_within_2pct"]),
        "grid_winners": dict(sorted(winners.items(), key=lambda kv: -kv[1])),
        "misses": [
            {
                k: r[k]
                for k in (
                    "index",
                    "seed",
                    "what",
                    "grid_best_method",
                    "recommended_method",
                    "tied",
                    "recommended_ratio",
                )
            }
            for r in rows
            if not (r["right_method"] and r["within_2pct"])
        ],
    }


def _gaps(gaps: list[float]) -> str:
    if not gaps:
        return "no tie declared"
    over = sum(1 for g in gaps if g > WITHIN)
    return (
        f"median {statistics.median(gaps):.1%}, largest {max(gaps):.1%}, {over} of {len(gaps)} ties more than "
        f"{WITHIN:.0%} apart"
    )


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def markdown(s: dict[str, Any], landscapes: int, seeds: int, command: str, machine: str) -> str:
    lines = [
        "## Generated method landscapes",
        "",
        f"`{command}` ({machine}; {landscapes} landscapes x {seeds} seed(s) = {s['runs']} studies, the issue asks for "
        "50 x 3): random perturbations of the two method scenarios (scripts/bench_method_landscapes.py: acceptance "
        "profiles, n-gram lookup, draft-model cost, a random code/chat prompt mix, a random subset of the methods, "
        "40 trials), each study beside the grid's noise-free truth.",
        "",
        "| right method | right method or a declared tie that includes it | right method, close calls left out | "
        "within 2% of the best of any method | median GPU time (grid's) | median GPU time / grid's | runs where the "
        "gate refused a config within 2% | the grid's winners |",
        "|---|---|---|---|---|---|---|---|",
        f"| {s['right_method_rate']:.1%} | {_rate(s['right_method_or_declared_tie_rate'])} ({s['declared_ties']} "
        f"ties declared) | {_rate(s['right_method_rate_clear'])} ({s['runs'] - s['close_calls']} "
        f"runs) | {s['within_2pct_rate']:.1%} | {s['gpu_median_s'] / 3600:.2f} h "
        f"({s['grid_median_s'] / 3600:.1f} h) | {s['gpu_vs_grid_median']:.3f} | {s['gated_within_2pct_runs']} | "
        + ", ".join(f"{k} {v}" for k, v in s["grid_winners"].items())
        + " |",
        "",
        "A close call: the grid's two best methods (the baseline one of them) within 2% of each other, where either "
        "is a right answer to 2%. A declared tie: the report names two or more methods whose confirmed speedups are "
        "within 2% of each other or that confirmation did not tell apart (the 95% interval of one's tok/s over the "
        "other's within each round reaches 1; `methods.METHOD_TIE`, `methods.paired_versus`: \"EAGLE-3 and adaptive "
        'tie on this prompt set (not told apart, adaptive 0.97x [0.92, 1.02] of EAGLE-3: either; ...)"); the strict '
        "rate counts only the recommended config's method. How far apart the tied methods truly are (the grid's "
        "truth, 1 - the slowest tied method's best over the fastest's): "
        + _gaps(s.get("tie_truth_gaps") or [])
        + ". An adaptive config's truth is the mean of 24 measured starts over the baseline's (`adaptive_truth`), "
        "not the simulator's mean-field figure.",
        "",
    ]
    if s["misses"]:
        lines.append("Misses (wrong method or not within 2%):")
        lines.append("")
        for m in s["misses"]:
            ratio = "-" if m["recommended_ratio"] is None else f"{m['recommended_ratio']:.3f}"
            tie = f", tie declared: {', '.join(m['tied'])}" if m.get("tied") else ""
            lines.append(
                f"- landscape {m['index']} seed {m['seed']} ({m['what']}): grid best {m['grid_best_method']}, "
                f"recommended {m['recommended_method']} at {ratio} of the best{tie}"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--landscapes", type=int, default=50)
    ap.add_argument("--start", type=int, default=0, help="the first landscape's index")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--resume", type=Path, default=None, help="a folder: finished runs kept there, not run again")
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "autotune-mgen")
    ap.add_argument("--rows", type=Path, default=None, help="every run's result as JSON here")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="folder of benchmarks.json and benchmarks.md")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args(argv)
    wanted = [(i, s) for i in range(args.start, args.start + args.landscapes) for s in range(args.seeds)]
    kept = KeptRuns(args.resume) if args.resume else None
    done = {j: kept.get(("mgen", *j)) for j in wanted} if kept else {}
    todo = [j for j in wanted if done.get(j) is None]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {j: pool.submit(run_one, j[0], j[1], args.work) for j in todo}
        for j, f in futures.items():
            r = f.result()
            done[j] = r
            if kept:
                kept.keep(("mgen", *j), r)
            print(json.dumps({k: r[k] for k in ("index", "seed", "right_method", "within_2pct", "gpu_s")}), flush=True)
    rows = [done[j] for j in wanted]
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    s = summary(rows)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    command = "python scripts/bench_method_landscapes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = markdown(s, args.landscapes, args.seeds, command.strip(), machine)
    print(text)
    if not args.no_docs:
        jpath = args.out / "benchmarks.json"
        data = json.loads(jpath.read_text()) if jpath.exists() else {}
        data[KEY] = {
            "command": command.strip(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine,
            "landscapes": args.landscapes,
            "seeds": args.seeds,
            "within": WITHIN,
            "wall_s": time.perf_counter() - t0,
            **{k: v for k, v in s.items()},
        }
        jpath.write_text(json.dumps(data, indent=1) + "\n")
        replace_section(args.out / "benchmarks.md", SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a start's noise comes from on this machine (``autotune.noise``): fresh starts of a few configs, each
measuring the space's prompts several times over on one server, in an interleaved order (baseline, good draft,
..., then again), through the study's own runner (``ProcessRunner``) and ``measure_config(passes=K)``.

Writes OUT/noise.json after every start (a run cut short keeps what it measured): per config its starts (each
pass's per-prompt tok/s, start-up seconds, timed seconds, the untimed warm-up passes before them), the split per
config and pooled (start-to-start and per-request sd, the latter from the passes on one server), the passes per
start ``noise.passes_for`` would choose from the measured costs, and each config's mean shift of pass 2 over pass 1
and pass 3 over pass 2 (how far from a re-measurement a later pass is: ``autotune.warmup``). Stops starting new
servers at --budget-s.

``--warmups auto,0`` measures each config once per warm-up setting (``benchmark.warmup_passes``; ``default``: the
space's own), interleaved, as configs of their own ("baseline warm-up auto", ...).

    python scripts/gpu/noise.py .gpu/space.yaml --out OUT --starts 4 --passes 3 --budget-s 200 --warmups auto,0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.backends.registry import get_backend  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.errors import BenchmarkError, LaunchError  # noqa: E402
from autotune.measure import measure_config  # noqa: E402
from autotune.noise import passes_for, split  # noqa: E402
from autotune.process import ProcessRunner  # noqa: E402
from autotune.records import StartRecord  # noqa: E402
from autotune.space import load_space  # noqa: E402
from autotune.study.passes import costs  # noqa: E402
from autotune.warmup import shift  # noqa: E402


def configs(space: Any, n_max: int) -> dict[str, TrialConfig]:
    out = {"baseline": TrialConfig.baseline(True)}
    names = [d.name for d in space.drafters]
    if "good" in names:
        out[f"good n_max {n_max}"] = TrialConfig.make("good", cuda_graph=True, draft_n_max=n_max)
    return out


def shifts(starts: list[dict[str, Any]]) -> list[float | None]:
    """Mean over the starts of each later timed pass's shift over the pass before it (``warmup.shift``)."""
    out: list[float | None] = []
    k = min((len(s["tok_per_s"]) for s in starts), default=0)
    for j in range(1, k):
        v = [shift(s["tok_per_s"][j - 1], s["tok_per_s"][j]) for s in starts]
        out.append(sum(v) / len(v) if v else None)
    return out


def with_warmup(space: Any, mode: str) -> Any:
    """``space`` with ``benchmark.warmup_passes`` set to ``mode`` (``default``: as it is)."""
    if mode == "default":
        return space
    value: int | str = mode if mode == "auto" else int(mode)
    return dataclasses.replace(space, benchmark=dataclasses.replace(space.benchmark, warmup_passes=value))


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    per = {name: split([[s["tok_per_s"] for s in starts]]) for name, starts in runs.items()}
    pooled = split([[s["tok_per_s"] for s in starts] for starts in runs.values()])
    start_s, pass_s = costs([StartRecord.from_dict(s) for starts in runs.values() for s in starts])
    choice = passes_for(pooled, start_s, pass_s) if pooled else None
    return {
        "per_config": {k: (v.to_dict() if v else None) for k, v in per.items()},
        "pass_shifts": {k: shifts(v) for k, v in runs.items()},
        "pooled": pooled.to_dict() if pooled else None,
        "start_s": start_s,
        "pass_s": pass_s,
        "passes": choice.passes if choice else None,
        "optimum": choice.optimum if choice else None,
        "text": choice.text if choice else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("space")
    p.add_argument("--out", required=True)
    p.add_argument("--starts", type=int, default=4)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--n-max", type=int, default=8)
    p.add_argument("--budget-s", type=float, default=200.0)
    p.add_argument("--log-dir", default=None)
    p.add_argument("--warmups", default="default", help="warm-up settings, comma-separated: default, auto, 0, 1...")
    a = p.parse_args(argv)
    space = load_space(a.space)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = ProcessRunner(space, get_backend(space.server.backend), log_dir=Path(a.log_dir or out / "noise-logs"))
    modes = [m.strip() for m in a.warmups.split(",") if m.strip()]
    plan = {
        (name if modes == ["default"] else f"{name} warm-up {mode}"): (cfg, with_warmup(space, mode))
        for name, cfg in configs(space, a.n_max).items()
        for mode in modes
    }
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in plan}
    failures: list[str] = []
    t0 = time.monotonic()
    stopped = None
    for i in range(a.starts):
        for name, (cfg, sp) in plan.items():
            if time.monotonic() - t0 > a.budget_s:
                stopped = f"budget of {a.budget_s:.0f} s reached after {i} round(s)"
                break
            try:
                m = measure_config(runner, cfg, sp, passes=a.passes)
            except (LaunchError, BenchmarkError) as e:
                failures.append(f"{name} start {i + 1}: {e.kind}: {str(e)[:200]}")
                continue
            runs[name].append(
                {
                    "tok_per_s": m.pass_tok_per_s(),
                    "startup_s": m.info.startup_s,
                    "seconds": sum(r.seconds for r in m.results),
                    "warmup": m.warmup.to_dict(),
                    "objective": m.tok_per_s,
                    "same_text_every_pass": all(
                        r.text == m.results[j % len(space.benchmark.prompts)].text for j, r in enumerate(m.results)
                    ),
                }
            )
            doc = {
                "space": a.space,
                "prompts": len(space.benchmark.prompts),
                "passes": a.passes,
                "starts": {k: len(v) for k, v in runs.items()},
                "failures": failures,
                "stopped": stopped,
                "wall_s": time.monotonic() - t0,
                "summary": summary(runs),
                "runs": runs,
            }
            (out / "noise.json").write_text(json.dumps(doc, indent=1))
            print(
                f"noise: {name} start {len(runs[name])}: {m.tok_per_s:.1f} tok/s after {m.warmup.passes} warm-up "
                f"pass(es) {[round(sum(p) / len(p), 1) for p in m.warmup.tok_per_s]}",
                flush=True,
            )
        if stopped:
            break
    s = summary(runs)
    print(f"noise: {s['text']}" if s["text"] else "noise: no split (fewer than two starts of a config)", flush=True)
    return 0 if s["pooled"] else 3


if __name__ == "__main__":
    raise SystemExit(main())

"""The loop's own CPU: ``autotune study spaces/llama-8b-eagle3.yaml --simulate --in-process --n-trials 40`` (the
whole study in one process on a virtual clock: what it spends is autotune's bookkeeping, the surrogate, Optuna's
storage and the simulator's arithmetic), user + system CPU seconds of the child process, several runs.

With ``--before DIR`` the same study runs on another checkout's package too (e.g. ``git archive COMMIT autotune |
tar -x -C DIR``), the two alternated run by run, so that both see the same machine load; the study's output (its
trials, verdict and recommendation; elapsed times removed) must be identical between the two, or the script says
so and exits 1.

Each package runs once untimed first, with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` removed from the
child's environment: this machine sets it), so the timed runs read compiled modules as an installed package does;
``--cold`` times the first runs' cost instead, every source compiled again in every run (~0.35 CPU-s here).

    python scripts/bench_loop.py                      # writes docs/benchmarks.{md,json} (section "loop")
    git archive 327fd54 autotune | tar -x -C /tmp/before && python scripts/bench_loop.py --before /tmp/before --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import replace_section  # noqa: E402

SPACE = "spaces/llama-8b-eagle3.yaml"
COMMAND = ["-m", "autotune", "study", SPACE, "--simulate", "--in-process"]
#: the run's own timings, removed before two runs' outputs are compared
_CLOCK = re.compile(r"\d+m\d+s|\d+(\.\d+)? s\b|GPU time.*|saved .*")


def one_run(package: Path, n_trials: int, timeout_s: float, cold: bool = False) -> tuple[float, str]:
    """CPU seconds (user + system) of one study in a fresh folder, and its output without clock readings."""
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        shutil.copytree(ROOT / "spaces", Path(tmp) / "spaces")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = str(package)
        if cold:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen(
            [sys.executable, *COMMAND, "--n-trials", str(n_trials)],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise SystemExit(f"bench_loop: a study ran past {timeout_s:.0f} s") from None
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the study's, reaped by communicate()
        if proc.returncode != 0:
            raise SystemExit(f"bench_loop: the study exited {proc.returncode}:\n{out[-2000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return cpu, _CLOCK.sub("", out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n-trials", type=int, default=40)
    p.add_argument("--before", type=Path, help="another checkout's package root, measured alternately")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one study may run")
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    p.add_argument("--cold", action="store_true", help="no bytecode cache: every run compiles every module")
    a = p.parse_args(argv)
    versions = {"after": ROOT} if a.before is None else {"before": a.before, "after": ROOT}
    cpu: dict[str, list[float]] = {v: [] for v in versions}
    outputs: dict[str, str] = {}
    if not a.cold:  # compile each package's modules once, untimed
        for package in versions.values():
            one_run(package, 2, a.timeout)
    for _ in range(a.runs):
        for name, package in versions.items():
            seconds, out = one_run(package, a.n_trials, a.timeout, a.cold)
            cpu[name].append(seconds)
            outputs.setdefault(name, out)
    same = len(set(outputs.values())) == 1
    result: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": "autotune " + " ".join(COMMAND[2:]) + f" --n-trials {a.n_trials}",
        "runs": a.runs,
        "cpu_s": {v: [round(s, 2) for s in xs] for v, xs in cpu.items()},
        "median_cpu_s": {v: round(statistics.median(xs), 2) for v, xs in cpu.items()},
        "same_output": same,
        "before": None if a.before is None else str(a.before),
        "bytecode": "none (--cold)" if a.cold else "cached (one untimed run per package first)",
    }
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "benchmarks.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["loop"] = result
    path.write_text(json.dumps(data, indent=1) + "\n")
    rows = "\n".join(
        f"| {v} | {', '.join(f'{s:.2f}' for s in xs)} | **{statistics.median(xs):.2f}** |" for v, xs in cpu.items()
    )
    ratio = ""
    if a.before is not None:
        ratio = f" After / before: {result['median_cpu_s']['after'] / result['median_cpu_s']['before']:.2f}x."
    body = (
        "## The loop's own CPU (scripts/bench_loop.py)\n\n"
        f"Produced by `python scripts/bench_loop.py{'' if a.before is None else ' --before ' + str(a.before)}"
        f"{' --cold' if a.cold else ''}` on {result['when']} ({result['machine']}): `{result['command']}`, user + "
        "system CPU seconds of the study's process, the versions alternated run by run; bytecode "
        f"{result['bytecode']}. Target of #44: at most 5 CPU-s.\n\n"
        "| version | runs (CPU-s) | median |\n|---|---|---|\n"
        f"{rows}\n\n"
        f"Same trials, verdict and recommendation in every version: {'yes' if same else '**no**'}.{ratio}\n"
    )
    replace_section(a.out / "benchmarks.md", "loop", body)
    print(body)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

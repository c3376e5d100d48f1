"""A behaviour snapshot for refactorings: run seeded in-process simulated studies and write what they recorded.

Usage: python scripts/snapshot_behaviour.py OUT.json [--quick]
       python scripts/snapshot_behaviour.py --diff BEFORE.json AFTER.json   (exit 1 and the first differences)

For each shipped simulated space it runs
`autotune study SPACE --simulate --in-process --seed S` into a temporary studies folder, then writes:
every trial's state, params, value, intermediate values and user attrs; the study's user attrs; `report --json`;
and every export format. Wall-clock fields (Optuna's datetimes, anything named like a wall time) are dropped, so
two runs of the same code give the same file; `diff` two snapshots taken before and after a change to show that
behaviour did not move. (The benchmark scenarios: `scripts/bench_search.py --seeds N --scenarios S --out D`.)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPACES = [
    ("spaces/eagle3.yaml", 3, 12),
    ("spaces/llama-8b-eagle3.yaml", 5, 16),
    ("spaces/llama-8b-load.yaml", 7, None),
    ("spaces/methods.yaml", 0, 24),
]
FORMATS = ["sglang", "command", "yaml", "json", "env", "compose", "k8s", "vllm"]
WALL = ("datetime", "wall", "elapsed", "started_at", "finished_at", "created_at", "_s_real", "date", "worker")


def _clean(value):
    """Without wall-clock fields and process ids; the checkout's folder as ``<repo>`` (two checkouts compare); floats
    to 12 significant digits (a level's mean over concurrent streams sums in arrival order)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not any(w in str(k) for w in WALL)}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str):
        return _paths(value.replace(str(ROOT), "<repo>"))
    if isinstance(value, float):
        return float(f"{value:.12g}")
    return value


def _paths(text: str) -> str:
    """Paths that differ between two runs of the same code: the interpreter (a worktree may run another
    checkout's venv), the temporary studies folder and the simulator's per-start temporary folders."""
    text = text.replace(sys.executable, "<python>").replace("<repo>/.venv/bin/python", "<python>")
    text = re.sub(r"/tmp/autotune-snap-[^/\s\"']+", "<studies>", text)
    return re.sub(r"sim-start-(\d+)-[^/\s\"']+", r"sim-start-\1-<tmp>", text)


def _normalised(value):
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return _paths(value) if isinstance(value, str) else value


def diff(before: object, after: object, where: str = "", out: list[str] | None = None) -> list[str]:
    """The paths (``space/trials/3/params``) where two snapshots differ, at most 20."""
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if isinstance(before, dict) and isinstance(after, dict):
        for k in sorted(set(before) | set(after)):
            if k not in before or k not in after:
                out.append(f"{where}/{k}: only in {'after' if k in after else 'before'}")
            else:
                diff(before[k], after[k], f"{where}/{k}", out)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            diff(b, a, f"{where}/{i}", out)
    elif before != after:
        out.append(f"{where}: {str(before)[:120]!r} -> {str(after)[:120]!r}")
    return out


def _autotune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, cwd=ROOT, timeout=900
    )


def snapshot_space(space: str, seed: int, n_trials: int | None, studies: Path) -> dict:
    import optuna

    common = ["--simulate", "--in-process", "--studies-dir", str(studies)]
    run = ["study", space, *common, "--seed", str(seed), "--json"]
    if n_trials:
        run += ["--n-trials", str(n_trials)]
    study_run = _autotune(*run)
    out: dict = {"study_rc": study_run.returncode}
    dbs = sorted(studies.glob("*.db"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for db in dbs:
        for summary in optuna.get_all_study_summaries(f"sqlite:///{db}"):
            st = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{db}")
            out["study_attrs"] = _clean(dict(st.user_attrs))
            out["trials"] = [
                _clean(
                    {
                        "number": t.number,
                        "state": t.state.name,
                        "params": t.params,
                        "value": t.value,
                        "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
                        "user_attrs": dict(t.user_attrs),
                    }
                )
                for t in st.trials
            ]
    report = _autotune("report", space, *common[:1], "--studies-dir", str(studies), "--json")
    out["report_rc"] = report.returncode
    out["report"] = _clean(json.loads(report.stdout)) if report.returncode == 0 else report.stderr
    out["exports"] = {}
    for fmt in FORMATS:
        ex = _autotune("export", space, "--simulate", "--studies-dir", str(studies), "--format", fmt)
        text = ex.stdout if ex.returncode == 0 else f"rc={ex.returncode} {ex.stderr.strip()}"
        skip = ("date", "exported", "autotune_version")
        out["exports"][fmt] = [_clean(line) for line in text.splitlines() if not any(w in line.lower() for w in skip)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--quick", action="store_true", help="the first two spaces only")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    args = ap.parse_args(argv)
    if args.diff:
        before, after = (_normalised(json.loads(Path(f).read_text())) for f in args.diff)
        found = diff(before, after)
        print("\n".join(found) if found else "identical")
        return 1 if found else 0
    if not args.out:
        ap.error("OUT.json is required (or --diff BEFORE AFTER)")
    result = {}
    spaces = SPACES[:2] if args.quick else SPACES
    for space, seed, n_trials in spaces:
        with tempfile.TemporaryDirectory(prefix="autotune-snap-") as tmp:
            result[space] = snapshot_space(space, seed, n_trials, Path(tmp))
            print(
                f"{space}: study rc {result[space]['study_rc']}, {len(result[space].get('trials', []))} trials",
                file=sys.stderr,
            )
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

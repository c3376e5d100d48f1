from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def autotune(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None):
    """Run the real CLI as a process (as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )


def space_file(tmp_path: Path, base: str = "eagle3.yaml", **changes) -> Path:
    """A copy of a shipped space with top-level sections changed (dicts merged one level deep)."""
    data = yaml.safe_load((REPO / "spaces" / base).read_text())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def study(space: Path, studies: Path, *args: str, n_trials: int = 6) -> subprocess.CompletedProcess:
    """``autotune study`` of ``space`` on the simulator in-process, into ``studies``; it must succeed."""
    r = autotune(
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--n-trials",
        str(n_trials),
        *args,
        "--studies-dir",
        str(studies),
    )
    assert r.returncode == 0, r.stderr
    return r


def report(space: Path, studies: Path, simulate: bool = True) -> dict:
    r = autotune("report", str(space), *(["--simulate"] if simulate else []), "--json", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)

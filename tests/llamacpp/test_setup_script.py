"""``scripts/llamacpp_setup.sh`` checks what it needs before it builds (a build takes ~35 minutes on 2 cores): a
missing Python module or build tool fails at once, naming each with how to get it, and nothing is built or written."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "llamacpp_setup.sh"


def _run(env: dict[str, str], models: Path, *, timeout_s: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """The script, its process group killed if it overruns (a build it should never have started)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [shutil.which("bash") or "/bin/bash", str(SCRIPT), str(models)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - start


def _env(tmp_path: Path, path: str, **extra: str) -> dict[str, str]:
    cache = tmp_path / "cache"  # no cached build: the script would build one
    cache.mkdir(exist_ok=True)
    return {"HOME": str(tmp_path), "PATH": path, "AUTOTUNE_CACHE": str(cache), "PYTHON": sys.executable, **extra}


def test_a_missing_gguf_fails_at_once_before_any_build(tmp_path):
    shadow = tmp_path / "shadow"  # this Python without a working gguf (as without the [llamacpp] extra)
    shadow.mkdir()
    (shadow / "gguf.py").write_text("raise ImportError('gguf is not installed')\n")
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    path = os.pathsep.join(p for p in dirs if not (Path(p) / "llama-server").exists())  # no llama-server: a build
    models = tmp_path / "models"
    r, took = _run(_env(tmp_path, path, PYTHONPATH=str(shadow), AUTOTUNE_LLAMA_SERVER=""), models)
    assert r.returncode == 1 and took < 30, (took, r.stderr[-2000:])
    assert "the Python module(s) gguf in" in r.stderr and "pip install -e '.[llamacpp]'" in r.stderr, r.stderr
    assert "numpy" not in r.stderr.split("module(s)")[1].split(" in ")[0]  # only what is missing
    assert "building" not in r.stderr and "nothing was built or written" in r.stderr
    assert not models.exists() and not any((tmp_path / "cache").iterdir())


def test_missing_build_tools_are_named_before_any_build(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with the shell's own tools only: no compiler, cmake, make or tar
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "mktemp", "nproc"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    models = tmp_path / "models"
    r, took = _run(_env(tmp_path, str(bin_dir), CC="", CXX="", AUTOTUNE_LLAMA_SERVER=""), models)
    assert r.returncode == 1 and took < 30, (took, r.stderr[-2000:])
    for what in ("cmake", "make or ninja", "a C compiler", "a C++ compiler", "tar"):
        assert f"  - {what}" in r.stderr, (what, r.stderr)
    assert "AUTOTUNE_LLAMA_SERVER" in r.stderr  # or skip the build with a binary of one's own
    assert "building" not in r.stderr and not models.exists()


def test_with_a_binary_given_no_build_tools_are_needed(tmp_path):
    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\nexit 0\n")
    server.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "mktemp", "nproc"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    env = _env(tmp_path, str(bin_dir), AUTOTUNE_LLAMA_SERVER=str(server), AUTOTUNE_SKIP_MODELS="1")
    r, _ = _run(env, tmp_path / "models")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == str(server), r.stderr

"""On the way from a space to production (issue #43): a missing launcher, a changed search space, a study still
running or not finished. Each guard: exit 2, one clear message (what, where, how to go on), no traceback, nothing
half-written."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.study.storage import make_storage

from .helpers import REPO, autotune, space_file

STAND_INS = REPO / "autotune" / "sim" / "scenarios" / "llama31-8b-h100"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- a missing launcher


def _server_space(tmp_path: Path, backend: str) -> Path:
    """A real (not simulated) space of ``backend`` whose checkpoints exist here: only the launcher may be missing."""
    if backend == "llamacpp":
        models = tmp_path / "models"
        models.mkdir()
        for name in ("target", "draft"):
            (models / f"{name}.gguf").write_bytes(b"GGUF")
        server = {"backend": "llamacpp", "model_path": str(models / "target.gguf")}
        drafters = [{"name": "draft", "path": str(models / "draft.gguf")}]
        search = {"draft_n_max": {"low": 1, "high": 8}}
    elif backend == "vllm":
        server = {"backend": "vllm", "model_path": str(STAND_INS / "target")}
        drafters = [{"name": "eagle3-llama31-8b", "path": str(STAND_INS / "drafters" / "eagle3-llama31-8b")}]
        search = {"num_speculative_tokens": {"low": 1, "high": 4}}
    else:
        server = {"backend": "sglang", "model_path": str(STAND_INS / "target"), "version": "0.5.23"}
        drafters = [{"name": "eagle3-llama31-8b", "path": str(STAND_INS / "drafters" / "eagle3-llama31-8b")}]
        search = {"num_steps": {"low": 1, "high": 4}, "topk": [1]}
    data = {
        "name": f"launcher-{backend}",
        "server": {**server, "port": _free_port()},
        "drafters": drafters,
        "search": search,
        "benchmark": {"prompts": [{"id": "a", "text": "hello there"}], "max_tokens": 32},
        "budget": {"n_trials": 3},
        "simulate": {"scenario": "llama31-8b-h100", "time_scale": 200},
    }
    path = tmp_path / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _bare_env(tmp_path: Path, *on_path: str) -> dict[str, str]:
    """PATH holding only ``on_path`` (fake executables), the setup script's cache empty, no $AUTOTUNE_LLAMA_SERVER."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in on_path:
        exe = bin_dir / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    return {"PATH": str(bin_dir), "AUTOTUNE_CACHE": str(cache), "AUTOTUNE_LLAMA_SERVER": ""}


@pytest.mark.parametrize(
    ("backend", "binary", "how"),
    [("llamacpp", "llama-server", "scripts/llamacpp_setup.sh"), ("vllm", "vllm", "pip install vllm")],
)
def test_a_missing_launcher_is_refused_before_anything_is_written(tmp_path, backend, binary, how):
    space = _server_space(tmp_path, backend)
    studies = tmp_path / "studies"
    env = _bare_env(tmp_path)
    for command in (["validate"], ["study", "--dry-run"], ["study"], ["study", "--skip-validation"], ["bench"]):
        r = autotune(command[0], str(space), *command[1:], "--studies-dir", str(studies), env=env)
        assert r.returncode == 2, (command, r.stderr)
        assert "Traceback" not in r.stderr, (command, r.stderr)
        assert binary in r.stderr and ("not found" in r.stderr or "is not on PATH" in r.stderr), (command, r.stderr)
        assert str(tmp_path / "bin") in r.stderr, (command, r.stderr)  # where it was looked for
        assert how in r.stderr and "server.launcher" in r.stderr, (command, r.stderr)  # how to fix it
        assert not studies.exists() or not any(studies.rglob("*")), (command, list(studies.rglob("*")))
    if backend == "llamacpp":  # every place it looks, in its order
        assert "$AUTOTUNE_LLAMA_SERVER (not set)" in r.stderr and str(tmp_path / "cache") in r.stderr
    # the same space with the binary on PATH passes the check
    ok = autotune("validate", str(space), env=_bare_env(tmp_path, binary))
    assert ok.returncode == 0, ok.stderr


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_sglang_missing_from_this_python_is_refused_by_validate_but_the_simulator_needs_none(tmp_path):
    space = _server_space(tmp_path, "sglang")
    r = autotune("validate", str(space))
    assert r.returncode == 2 and "no module 'sglang'" in r.stderr and sys.executable in r.stderr, r.stderr
    assert "pip install 'sglang[all]'" in r.stderr and "server.launcher" in r.stderr
    assert autotune("validate", str(space), "--simulate").returncode == 0  # --simulate launches the simulator
    dry = autotune("study", str(space), "--simulate", "--dry-run", "--studies-dir", str(tmp_path / "s"))
    assert dry.returncode == 0, dry.stderr


# ---------------------------------------------------------------------------------------------- a changed space


def _trials(studies: Path, name: str) -> list:
    # autotune's storage: a study starting in another process may be creating the database's schema this moment
    # (``storage._schema_race``; plain Optuna loses that race with "UNIQUE constraint failed: alembic_version")
    storage = make_storage(f"sqlite:///{studies}/{name}.db")
    return optuna.load_study(study_name=name, storage=storage).get_trials()


def test_a_changed_search_space_is_refused_naming_the_change(tmp_path):
    studies = tmp_path / "studies"
    space = space_file(tmp_path, "llama-8b-eagle3.yaml", name="narrowed")
    common = ["--simulate", "--studies-dir", str(studies)]
    run = [*common, "--in-process", "--n-trials", "4", "--no-confirm"]
    first = autotune("study", str(space), *run)
    assert first.returncode == 0, first.stderr
    before = len(_trials(studies, "narrowed-sim"))
    data = yaml.safe_load(space.read_text())
    data["search"]["num_steps"] = {"low": 1, "high": 4}  # narrowed from 1-8
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    for extra in ([], ["--dry-run"]):
        r = autotune("study", str(space), *run, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert "Traceback" not in r.stderr
        msg = r.stderr.strip().splitlines()[-1]
        assert "search.knobs.num_steps: the study has 1-8, this space file has 1-4" in msg, msg
        assert "new `name:`" in msg and "optuna delete-study --study-name narrowed-sim" in msg, msg
        assert "resuming study" not in r.stderr
    assert len(_trials(studies, "narrowed-sim")) == before  # nothing run, nothing written
    c = autotune("confirm", str(space), *common, "--in-process")
    assert c.returncode == 2 and "the study has 1-8" in c.stderr, c.stderr
    # under a new name it is a new study; the old space (and another budget) resumes the old one
    data["name"] = "narrowed-v2"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    new = autotune("study", str(space), *run)
    assert new.returncode == 0 and "resuming" not in new.stderr, new.stderr
    data["name"], data["search"]["num_steps"] = "narrowed", {"low": 1, "high": 8}
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    again = autotune("study", str(space), *common, "--in-process", "--n-trials", "5", "--no-confirm")
    assert again.returncode == 0 and "resuming study narrowed-sim" in again.stderr, again.stderr


def test_a_method_space_records_its_methods_and_a_changed_method_is_named():
    import dataclasses

    from autotune.space import IntRange, load_space
    from autotune.study import storage

    space = load_space(REPO / "spaces" / "methods.yaml")
    spec = storage.worker_spec(space)
    assert spec["search"]["methods"]["eagle3"]["knobs"]["num_steps"]["high"] == 8
    methods = dict(space.search.methods)
    eagle3 = methods["eagle3"]
    methods["eagle3"] = dataclasses.replace(eagle3, knobs={**eagle3.knobs, "num_steps": IntRange(1, 4)})
    other = dataclasses.replace(space, search=dataclasses.replace(space.search, methods=methods))
    assert storage.spec_differences(spec, storage.worker_spec(other)) == [
        "search.methods.eagle3.knobs.num_steps: the study has 1-8, this space file has 1-4"
    ]
    # a study recorded before the spec named the methods is compared without them
    old = {**spec, "search": {k: v for k, v in spec["search"].items() if k != "methods"}}
    assert storage.spec_differences(old, storage._comparable(old, storage.worker_spec(other))) == []


# ---------------------------------------------------------------------------------------------- running, unfinished

HOLD = textwrap.dedent(
    """
    import sys
    from autotune.study.storage import run_lock
    with run_lock(sys.argv[1], sys.argv[2]):
        print("held", flush=True)
        sys.stdin.readline()
    """
)


def _hold_run_lock(url: str, name: str) -> subprocess.Popen:
    """The run lock of ``name`` held as a running `autotune study` holds it."""
    argv = [sys.executable, "-c", HOLD, url, name]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_an_unfinished_study_is_not_exported_unless_a_trial_is_asked_for(tmp_path):
    studies = tmp_path / "studies"
    space = space_file(tmp_path, "llama-8b-eagle3.yaml", name="unfinished")
    common = ["--simulate", "--studies-dir", str(studies)]
    r = autotune("study", str(space), *common, "--in-process", "--n-trials", "4", "--no-confirm")
    assert r.returncode == 0, r.stderr
    e = autotune("export", str(space), *common, "--format", "sglang")
    assert e.returncode == 2 and e.stdout == "" and "Traceback" not in e.stderr, e.stderr
    assert "is not finished: 4 trials, confirmation not done" in e.stderr and "--trial N" in e.stderr, e.stderr
    assert f"autotune confirm {space} --simulate" in e.stderr
    out = tmp_path / "launch.sh"
    e = autotune("export", str(space), *common, "--format", "sglang", "-o", str(out))
    assert e.returncode == 2 and not out.exists()  # nothing half-written
    t = autotune("export", str(space), *common, "--format", "sglang", "--trial", "1")
    assert t.returncode == 0 and "trial 1" in t.stdout and t.stderr == "", t.stderr
    # a study nobody runs is reported as before: no note, no key
    rep = autotune("report", str(space), *common, "--json")
    assert rep.returncode == 0 and rep.stderr == "" and "running" not in json.loads(rep.stdout)

    # while an autotune runs it (its run lock held), report and export say so
    holder = _hold_run_lock(f"sqlite:///{studies}/unfinished-sim.db", "unfinished-sim")
    try:
        rep = autotune("report", str(space), *common, "--json")
        assert rep.returncode == 0, rep.stderr
        running = json.loads(rep.stdout)["running"]
        assert f"pid {holder.pid} on " in running["holder"] and running["trials"] == 4
        assert "is still running" in rep.stderr and "figures may change" in rep.stderr, rep.stderr
        text = autotune("report", str(space), *common)
        assert text.returncode == 0 and "is still running" in text.stderr
        e = autotune("export", str(space), *common, "--format", "yaml")
        assert e.returncode == 2 and "is still running" in e.stderr and "Wait for it to finish" in e.stderr
        assert "--trial N" in e.stderr and "Traceback" not in e.stderr
        t = autotune("export", str(space), *common, "--format", "yaml", "--trial", "1")
        assert t.returncode == 0 and "is still running" in t.stderr, t.stderr
    finally:
        holder.communicate("\n", timeout=30)


def test_a_finished_study_is_reported_and_exported_as_before(tmp_path):
    studies = tmp_path / "studies"
    space = space_file(tmp_path, "llama-8b-eagle3.yaml", name="finished")
    common = ["--simulate", "--studies-dir", str(studies)]
    r = autotune("study", str(space), *common, "--in-process", "--n-trials", "6", "--json")
    assert r.returncode == 0, r.stderr
    rep = autotune("report", str(space), *common, "--json")
    assert rep.returncode == 0 and rep.stderr == "", rep.stderr
    assert json.loads(rep.stdout).keys() == json.loads(r.stdout).keys()  # no "running"
    e = autotune("export", str(space), *common, "--format", "sglang")
    assert e.returncode == 0 and e.stderr == "", e.stderr


@pytest.mark.slow
def test_a_study_running_in_another_process_is_said_to_be_running(tmp_path):
    """A real `autotune study` (simulated server processes) in the background: mid-run, report says so and the
    export of its recommendation is refused; cut short (SIGTERM), it is not finished."""
    studies = tmp_path / "studies"
    space = space_file(tmp_path, "llama-8b-eagle3.yaml", name="bg", server={"port": _free_port()})
    common = ["--simulate", "--studies-dir", str(studies)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "study", str(space), *common, "--n-trials", "8", "--json"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        db = studies / "bg-sim.db"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:  # the file may exist before the study in it does
                if db.exists() and any(t.state.name == "COMPLETE" for t in _trials(studies, "bg-sim")):
                    break
            except KeyError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.5)
        rep = autotune("report", str(space), *common, "--json")
        assert rep.returncode == 0, rep.stderr
        assert f"pid {proc.pid} on " in json.loads(rep.stdout)["running"]["holder"]
        assert "is still running" in rep.stderr
        e = autotune("export", str(space), *common, "--format", "sglang")
        assert e.returncode == 2 and "is still running" in e.stderr and "--trial N" in e.stderr, e.stderr
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=120)
    assert proc.returncode == 130
    e = autotune("export", str(space), *common, "--format", "sglang")
    assert e.returncode == 2 and "is not finished" in e.stderr and "still running" not in e.stderr, e.stderr
    rep = autotune("report", str(space), *common, "--json")
    assert rep.returncode == 0 and "running" not in json.loads(rep.stdout)

"""`autotune dashboard` serves the study in optuna-dashboard on loopback, with every trial's evidence: its note
(argv, effective config, outcome and reason) and its artifacts (server log, per-prompt results and figure), read
through optuna-dashboard's own HTTP API (routes of optuna_dashboard/_app.py and artifact/_backend.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from .helpers import REPO, autotune, space_file

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _study(tmp_path, *extra: str):
    """A simulated study with real server processes (so that each trial has a server log)."""
    studies = tmp_path / "studies"
    name = f"dash-{uuid.uuid4().hex[:8]}"
    space = space_file(
        tmp_path,
        base="llama-8b-eagle3.yaml",
        name=name,
        server={"port": _free_port()},
    )
    r = autotune(
        "study", str(space), "--simulate", "--n-trials", "3", "--no-confirm", "--studies-dir", str(studies), *extra
    )
    assert r.returncode == 0, r.stderr
    return space, studies, f"{name}-sim"


def _serve_and_check(space, studies, study_name, *extra: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "dashboard",
            str(space),
            "--simulate",
            "--port",
            str(port),
            "--studies-dir",
            str(studies),
            *extra,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        listing = None
        while time.monotonic() < deadline:
            try:
                resp = httpx.get(f"{base}/api/studies", timeout=2)
                if resp.status_code == 200:
                    listing = resp.json()
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        assert listing is not None, "the dashboard never answered"
        mine = [s for s in listing["study_summaries"] if s["study_name"] == study_name]
        assert len(mine) == 1
        sid = mine[0]["study_id"]
        detail = httpx.get(f"{base}/api/studies/{sid}", timeout=10).json()
        assert detail["objective_names"] == ["tok_per_s"]  # set_metric_names
        trials = detail["trials"]
        assert {a["key"] for t in trials for a in t["user_attrs"]} >= {"role", "config", "config_key"}
        first = trials[0]
        assert first["state"] == "Complete"
        body = first["note"]["body"]
        assert "## Trial 0: COMPLETE" in body and "tok/s" in body
        assert "### Launch" in body and "--model-path" in body  # the argv
        assert "Effective server config" in body  # the server's own account
        names = {a["filename"]: a for a in first["artifacts"]}
        assert set(names) == {"trial-0-server.log", "trial-0-prompts.jsonl", "trial-0-prompts.svg"}
        log = httpx.get(
            f"{base}/artifacts/{sid}/{first['trial_id']}/{names['trial-0-server.log']['artifact_id']}", timeout=10
        )
        assert log.status_code == 200 and len(log.content) > 0
        rows = httpx.get(
            f"{base}/artifacts/{sid}/{first['trial_id']}/{names['trial-0-prompts.jsonl']['artifact_id']}", timeout=10
        ).text.splitlines()
        prompts = [json.loads(x) for x in rows]
        assert [p["prompt"] for p in prompts][:2] == ["general-relativity", "merge-sort"]
        assert all(p["tok_per_s"] > 0 and p["text"] for p in prompts)
        svg = httpx.get(
            f"{base}/artifacts/{sid}/{first['trial_id']}/{names['trial-0-prompts.svg']['artifact_id']}", timeout=10
        )
        assert svg.headers["content-type"].startswith("image/svg+xml") and b"<svg" in svg.content
        # a speculative trial's figures sit next to its baseline's
        spec = [t for t in trials if any(a["key"] == "role" and a["value"] == "speculative" for a in t["user_attrs"])]
        assert spec and all(t["note"]["body"].startswith(f"## Trial {t['number']}: ") for t in spec)
        measured = [t for t in spec if t["artifacts"]]
        for t in measured:
            jsonl = next(a for a in t["artifacts"] if a["filename"].endswith(".jsonl"))
            line = httpx.get(f"{base}/artifacts/{sid}/{t['trial_id']}/{jsonl['artifact_id']}", timeout=10).text
            assert json.loads(line.splitlines()[0])["baseline_tok_per_s"] > 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
    assert proc.returncode == 0
    assert "trial artifacts" in err and str(studies) in err  # it says where the artifacts live


def test_dashboard_shows_each_trials_note_and_artifacts(tmp_path):
    _serve_and_check(*_study(tmp_path))


@pytest.mark.postgres
def test_dashboard_on_a_postgres_study(tmp_path):
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL is not set (scripts/start_postgres.sh prints one)")
    _serve_and_check(*_study(tmp_path, "--storage", url), "--storage", url)


def test_dashboard_binds_to_loopback_unless_told(tmp_path):
    """The argv it starts optuna-dashboard with (read back from the process it started)."""
    space, studies, _name = _study(tmp_path)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "dashboard",
            str(space),
            "--simulate",
            "--port",
            str(port),
            "--studies-dir",
            str(studies),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import psutil

        deadline = time.monotonic() + 30
        child = None
        while time.monotonic() < deadline and child is None:
            kids = psutil.Process(proc.pid).children()
            child = kids[0] if kids else None
            time.sleep(0.1)
        assert child is not None
        cmd = child.cmdline()
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert cmd[cmd.index("--artifact-dir") + 1].endswith("artifacts")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_a_taken_port_is_exit_2_naming_it_before_anything_starts(tmp_path):
    """A port another process listens on: exit 2 naming the port and its owner, no traceback, no optuna-dashboard
    started (it would print "Listening on" and then die in a traceback)."""
    space, studies, _name = _study(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = autotune("dashboard", str(space), "--simulate", "--port", str(port), "--studies-dir", str(studies))
    assert r.returncode == 2, r.stderr
    assert f"port {port} on 127.0.0.1 is taken" in r.stderr and "--port N" in r.stderr
    assert "Traceback" not in r.stderr and "Listening" not in r.stdout + r.stderr

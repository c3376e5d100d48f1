"""`autotune dashboard` serves the study in optuna-dashboard on loopback, with our user attrs visible."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx

from .helpers import REPO, autotune


def test_dashboard_serves_the_study(tmp_path):
    studies = tmp_path / "studies"
    space = REPO / "spaces" / "llama-8b-eagle3.yaml"
    r = autotune(
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--n-trials",
        "4",
        "--no-confirm",
        "--studies-dir",
        str(studies),
    )
    assert r.returncode == 0, r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
        deadline = time.monotonic() + 60
        studies_json = None
        while time.monotonic() < deadline:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/api/studies", timeout=2)
                if resp.status_code == 200:
                    studies_json = resp.json()
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        assert studies_json is not None, "the dashboard never answered"
        names = [s["study_name"] for s in studies_json["study_summaries"]]
        assert names == ["llama31-8b-eagle3-sim"]
        sid = studies_json["study_summaries"][0]["study_id"]
        detail = httpx.get(f"http://127.0.0.1:{port}/api/studies/{sid}", timeout=10).json()
        attrs = {a["key"] for t in detail["trials"] for a in t["user_attrs"]}
        assert {"role", "config", "config_key"} <= attrs
        assert detail["trials"][0]["state"] == "Complete"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0

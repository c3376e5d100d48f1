"""Secrets in server.env never reach the study, the logs, the report or the exports; servers bind to loopback."""

from __future__ import annotations

import json

import pytest

from ..faults.test_study_faults import _assert_clean, _space
from .helpers import autotune

pytestmark = pytest.mark.slow
SECRET = "hf_s3cret-v4lue-never-stored"


def test_secret_env_values_are_never_written(tmp_path):
    space, port = _space(tmp_path, n_trials=2, env={"HF_TOKEN": SECRET, "PLAIN_SETTING": "visible"})
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--no-confirm", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    outputs = [
        autotune(
            "report",
            str(space),
            "--simulate",
            "--json",
            "--html",
            str(tmp_path / "r.html"),
            "--studies-dir",
            str(studies),
        )
    ]
    # a search-only study: its recommendation is not exported, a trial measured to the end is (the speculative one,
    # else the baseline: a short study's one speculative trial may be pruned)
    rep = json.loads(outputs[0].stdout)
    done = [t["number"] for t in rep["trials"] if t["state"] == "COMPLETE" and t["duplicate_of"] is None]
    trial = str(max(done))
    for fmt in ("sglang", "yaml", "json"):
        outputs.append(
            autotune(
                "export", str(space), "--simulate", "--format", fmt, "--trial", trial, "--studies-dir", str(studies)
            )
        )
    for o in outputs:
        assert o.returncode == 0, o.stderr
        assert SECRET not in o.stdout + o.stderr
    written = [p for p in [*studies.rglob("*"), tmp_path / "r.html"] if p.is_file()]
    assert any(p.suffix == ".db" for p in written) and any(p.suffix == ".log" for p in written)
    for p in written:
        assert SECRET.encode() not in p.read_bytes(), f"secret found in {p}"
    launched = [t for t in rep["trials"] if t.get("argv")]
    assert launched
    exported = json.loads(outputs[-1].stdout)
    assert exported["launch"]["env"]["HF_TOKEN"] == "***"
    assert exported["launch"]["env"]["PLAIN_SETTING"] == "visible"
    # the server was bound to loopback
    argv = launched[0]["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    _assert_clean(port)

"""Bad input: one clear paragraph, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import socket

from .helpers import autotune, space_file


def _no_traceback(r):
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout


def test_invalid_space_exits_2_with_location_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nserver:\n  backend: sglang\n  model_path: /m\n  prot: 30000\n")
    studies = tmp_path / "studies"
    r = autotune("study", str(bad), "--simulate", "--studies-dir", str(studies))
    assert r.returncode == 2
    _no_traceback(r)
    assert str(bad) in r.stderr and ":5" in r.stderr and "server.prot" in r.stderr and "port" in r.stderr
    assert not studies.exists()


def test_missing_file_is_a_clear_error(tmp_path):
    r = autotune("validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    _no_traceback(r)
    assert "nope.yaml" in r.stderr


def test_field_report_trap_fails_validation_naming_eagle3(tmp_path):
    space = space_file(
        tmp_path,
        drafters=[{"name": "custom-10k", "path": "/models/x", "algorithm": "EAGLE"}],
        search={"drafters": ["custom-10k"]},
    )
    r = autotune("validate", str(space), "--simulate")
    assert r.returncode == 2
    _no_traceback(r)
    assert "EAGLE3" in r.stderr and "custom-10k" in r.stderr
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--studies-dir", str(studies))
    assert r.returncode == 2
    assert "EAGLE3" in r.stderr and "not started" in r.stderr
    assert not studies.exists()


def test_port_in_use_by_a_foreign_process_exits_2_and_is_not_touched(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        space = space_file(tmp_path, server={"port": port})
        studies = tmp_path / "studies"
        r = autotune("study", str(space), "--simulate", "--n-trials", "3", "--studies-dir", str(studies))
        assert r.returncode == 2
        _no_traceback(r)
        assert f"port {port}" in r.stderr and "port_busy" in r.stderr
        assert not studies.exists()
        # the foreign listener is still alive
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


def test_bench_rejects_unknown_keys_and_infeasible_configs(tmp_path):
    r = autotune("bench", "spaces/eagle3.yaml", "--simulate", "--set", "bogus=1")
    assert r.returncode == 2 and "bogus" in r.stderr and "num_steps" in r.stderr
    _no_traceback(r)
    r = autotune(
        "bench",
        "spaces/eagle3.yaml",
        "--simulate",
        "--set",
        "drafter=aq-medai",
        "--set",
        "num_steps=1",
        "--set",
        "topk=2",
        "--set",
        "num_draft_tokens=9",
    )
    assert r.returncode == 2 and "num_draft_tokens=9" in r.stderr
    _no_traceback(r)


def test_report_without_study_is_a_clear_error(tmp_path):
    r = autotune("report", "spaces/eagle3.yaml", "--studies-dir", str(tmp_path / "none"))
    assert r.returncode == 2
    _no_traceback(r)
    assert "autotune study" in r.stderr


def test_n_trials_must_be_positive(tmp_path):
    r = autotune("study", "spaces/eagle3.yaml", "--simulate", "--n-trials", "0", "--studies-dir", str(tmp_path))
    assert r.returncode == 2 and "--n-trials" in r.stderr

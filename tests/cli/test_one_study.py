"""One study, one orchestrator; exit 2 writes nothing; the plan before the bill (issue #22, items 1, 2 and 7)."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing

import optuna
import pytest

from autotune import cli
from autotune.commands import study as study_cmd

from .helpers import REPO, autotune, space_file

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _llama(tmp_path, **server):
    return space_file(
        tmp_path,
        "llama-8b-eagle3.yaml",
        server={"port": _free_port(), "port_busy": "fail", **server},
        budget={"n_trials": 6, "timeout_s": None},
    )


@pytest.fixture
def port_taken_after_the_check(monkeypatch):
    """A free port that another program takes between autotune's port check (``preflight``, which passes) and the
    study's first launch: the race the issue saw. Yields the port; the other program lets go of it at teardown."""
    port = _free_port()
    holder = socket.socket()
    real = study_cmd.preflight

    def preflight_then_lose_the_port(ctx, slots=None):
        real(ctx, slots)
        holder.bind(("127.0.0.1", port))
        holder.listen()

    monkeypatch.setattr(study_cmd, "preflight", preflight_then_lose_the_port)
    try:
        yield port
    finally:
        holder.close()


def _trials(db):
    storage = f"sqlite:///{db}"
    (name,) = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def _trial_count_read_only(db) -> int:
    """How many trials the database holds, read without writing (0 while its tables are being made): watching a
    new study through Optuna would create the schema alongside the study (the race ``make_storage`` now survives,
    tests/study/test_storage_race.py)."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            return int(con.execute("SELECT count(*) FROM trials").fetchone()[0])
    except sqlite3.Error:  # no such table yet, or locked for a moment
        return 0


def test_a_second_study_on_a_running_sqlite_study_exits_2_and_the_first_measures_every_trial(tmp_path):
    # 10 trials and a short confirmation: long enough for the second run to meet the first, short on a loaded machine
    space = space_file(
        tmp_path,
        "llama-8b-eagle3.yaml",
        server={"port": _free_port(), "port_busy": "fail"},
        budget={"n_trials": 10, "timeout_s": None},
        verdict={"confirm_top": 1, "repeats": 2, "max_repeats": 2},
    )
    studies = tmp_path / "studies"
    # the first run's output goes to files, not pipes: a pipe nobody reads while we wait would block it once full
    out_path, err_path = tmp_path / "first.out", tmp_path / "first.err"
    with out_path.open("w") as out_f, err_path.open("w") as err_f:
        first = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autotune",
                "study",
                str(space),
                "--simulate",  # with its confirmation: it runs long enough for the second to meet it under load
                "--studies-dir",
                str(studies),
            ],
            cwd=REPO,
            stdout=out_f,
            stderr=err_f,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 300
        db = None
        while time.monotonic() < deadline and first.poll() is None:  # until the first run has begun a trial
            dbs = list(studies.glob("*.db"))
            begun = bool(dbs) and _trial_count_read_only(dbs[0]) > 0
            if begun and first.poll() is None:  # it holds the study's run lock until it ends
                db = dbs[0]
                break
            time.sleep(0.2)
        if db is None:
            rc = first.poll()
            raise AssertionError(
                f"the first study began no trial while running (exit code {rc}): {err_path.read_text()[-3000:]}"
            )
        second = autotune("study", str(space), "--simulate", "--studies-dir", str(studies))
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid} on " in second.stderr and "autotune worker" in second.stderr
        assert second.stderr.count("autotune: error:") == 1
        first.wait(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=60)
    err = err_path.read_text()
    assert first.returncode == 0, err
    assert "failed by another worker" not in err
    trials = _trials(db)
    assert trials and all(t.state.name in ("COMPLETE", "PRUNED") for t in trials), [t.state for t in trials]
    assert not any(t.user_attrs.get("interrupted") for t in trials)


def test_a_port_taken_after_the_check_exits_2_and_leaves_no_study(tmp_path, port_taken_after_the_check, capsys):
    """The race the issue saw: another program takes the port between autotune's check and the first launch."""
    space, studies = _llama(tmp_path, port=port_taken_after_the_check), tmp_path / "studies"
    rc = cli.main(["study", str(space), "--simulate", "--studies-dir", str(studies)])
    err = capsys.readouterr().err
    assert rc == 2 and "in use" in err, err
    assert not list(studies.glob("*.db")), "exit 2 must leave no study behind"


def test_a_port_race_in_a_resumed_study_is_recorded_with_its_reason_and_uses_no_budget(
    tmp_path, port_taken_after_the_check, capsys
):
    space, studies = _llama(tmp_path, port=port_taken_after_the_check), tmp_path / "studies"
    first = autotune(  # a subprocess: its port check is the real one, and the port is free
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--n-trials",
        "3",
        "--no-confirm",
        "--studies-dir",
        str(studies),
    )
    assert first.returncode == 0, first.stderr
    (db,) = studies.glob("*.db")
    before = len(_trials(db))
    rc = cli.main(["study", str(space), "--simulate", "--n-trials", "6", "--studies-dir", str(studies)])
    err = capsys.readouterr().err
    assert rc == 2 and "resuming study" in err
    new = _trials(db)[before:]
    failed = [t for t in new if t.state.name == "FAIL"]
    assert len(failed) == 1, [t.state for t in new]
    (t,) = failed
    assert t.user_attrs.get("interrupted") and "in use" in t.user_attrs["fail_reason"]  # its reason, no budget used
    assert all(w.user_attrs.get("requeued_from") == t.number for w in new if w.state.name == "WAITING")


def test_dry_run_prints_the_plan_and_writes_nothing_and_a_rerun_says_it_resumes(tmp_path):
    space, studies = _llama(tmp_path), tmp_path / "studies"
    dry = autotune("study", str(space), "--simulate", "--n-trials", "4", "--dry-run", "--studies-dir", str(studies))
    assert dry.returncode == 0, dry.stderr
    assert "plan: search 4 server starts" in dry.stderr and "estimated GPU time:" in dry.stderr
    assert not studies.exists() or not any(studies.iterdir())
    run = autotune(
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
    assert run.returncode == 0 and "resuming" not in run.stderr
    assert "plan: search 4 server starts" in run.stderr
    assert "[search · trials 1/4 · starts 1/4" in run.stderr  # the live progress on each trial's line
    again = autotune(
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--n-trials",
        "6",
        "--no-confirm",
        "--studies-dir",
        str(studies),
    )
    assert again.returncode == 0, again.stderr
    assert "resuming study" in again.stderr and "4 trials kept" in again.stderr
    assert "plan: search 2 server starts (6 trials in the budget, 4 used)" in again.stderr
    assert "measured in this study" in again.stderr  # the estimate now from the study's own starts


def test_version():
    r = autotune("--version")
    assert r.returncode == 0 and r.stdout.startswith("autotune ") and r.stdout.split()[1][0].isdigit()


def test_the_report_ends_with_the_recommendation_as_a_command(tmp_path):
    space, studies = _llama(tmp_path), tmp_path / "studies"
    run = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "6", "--studies-dir", str(studies))
    assert run.returncode == 0, run.stderr
    rep = autotune("report", str(space), "--simulate", "--studies-dir", str(studies))
    assert rep.returncode == 0, rep.stderr
    lines = rep.stdout.splitlines()
    rec = next(ln for ln in lines if ln.startswith("recommended: trial "))
    assert "{" not in rec  # a label, not a Python dict
    i = next(i for i, ln in enumerate(lines) if ln.startswith("to deploy "))
    assert "sglang.launch_server" in lines[i + 1] and "--model-path" in lines[i + 1]

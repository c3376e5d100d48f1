"""The run lock: one `autotune study` per study, the holder named, released when its process dies."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from autotune.errors import UserError
from autotune.study.storage import run_lock, running, sqlite_path

HOLD = textwrap.dedent(
    """
    import sys, time
    from autotune.study.storage import run_lock
    with run_lock(sys.argv[1], sys.argv[2]):
        print("held", flush=True)
        sys.stdin.readline()
    """
)


def _holder(url: str, name: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_sqlite_path_of_urls():
    assert str(sqlite_path("sqlite:///studies/x.db")) == "studies/x.db"
    assert str(sqlite_path("sqlite:////abs/x.db?timeout=5")) == "/abs/x.db"
    assert sqlite_path("sqlite:///:memory:") is None and sqlite_path("postgresql://h/db") is None


def test_a_second_run_of_a_sqlite_study_is_refused_naming_the_holder(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    p = _holder(url, "study-a")
    try:
        with pytest.raises(UserError) as e, run_lock(url, "study-a"):
            pass
        msg = str(e.value)
        assert f"pid {p.pid} on " in msg and "study-a" in msg and "autotune worker" in msg
        with run_lock(url, "study-b"):  # another study in the same file is another lock
            pass
    finally:
        p.communicate("\n", timeout=30)
    with run_lock(url, "study-a"):  # released by the holder's end
        pass


def test_the_lock_goes_with_a_killed_holder(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    p = _holder(url, "s")
    p.kill()
    p.communicate(timeout=30)  # reaps it and closes its pipes
    with run_lock(url, "s"):
        pass


def test_storage_objects_and_memory_need_no_lock():
    with run_lock(object(), "s"), run_lock("sqlite:///:memory:", "s"), run_lock("sqlite:///:memory:", "s"):
        pass


@pytest.mark.postgres
def test_a_second_run_of_a_postgres_study_is_refused_naming_the_holder():
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL not set")
    name = f"runlock-{os.getpid()}"
    p = _holder(url, name)
    try:
        with pytest.raises(UserError) as e, run_lock(url, name):
            pass
        assert f"autotune study pid {p.pid} on " in str(e.value)
    finally:
        p.communicate("\n", timeout=30)
    with run_lock(url, name):
        pass


def test_who_runs_a_sqlite_study_is_read_from_its_run_lock_without_taking_it(tmp_path):
    url = f"sqlite:///{tmp_path}/studies/s.db"
    assert running(url, "s") is None and not (tmp_path / "studies").exists()  # never run: nothing created
    p = _holder(url, "s")
    try:
        assert f"pid {p.pid} on " in (running(url, "s") or "")
        assert running(url, "other") is None
        with pytest.raises(UserError):  # the probe left the lock with its holder
            with run_lock(url, "s"):
                pass
    finally:
        p.communicate("\n", timeout=30)
    assert running(url, "s") is None  # ended (or killed): nothing runs it
    with run_lock(url, "s"):  # and the probe took nothing away
        assert running(url, "s") is not None
    assert running(object(), "s") is None and running("sqlite:///:memory:", "s") is None


@pytest.mark.postgres
def test_who_runs_a_postgres_study_is_read_from_its_advisory_lock():
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL not set")
    name = f"running-{os.getpid()}"
    assert running(url, name) is None
    p = _holder(url, name)
    try:
        assert f"autotune study pid {p.pid} on " in (running(url, name) or "")
    finally:
        p.communicate("\n", timeout=30)
    assert running(url, name) is None
    with run_lock(url, name):  # the probe released what it took
        pass


def test_a_run_that_writes_nothing_leaves_no_lock_file_or_folder(tmp_path):
    url = f"sqlite:///{tmp_path}/studies/s.db"
    with pytest.raises(RuntimeError), run_lock(url, "s"):
        raise RuntimeError("exit 2 before the study was created")
    assert not (tmp_path / "studies").exists()
    with run_lock(url, "s"):
        (tmp_path / "studies" / "s.db").write_bytes(b"")  # the study was written: its lock file stays beside it
    assert (tmp_path / "studies" / "s.db.s.lock").exists()

"""Processes that open one fresh study database at the same moment (``autotune study`` and a worker, a report, the
dashboard, a test watching the file) each create Optuna's schema; the loser used to crash with "UNIQUE constraint
failed: alembic_version.version_num" (seen in CI: the first study of tests/cli/test_one_study.py died that way while
the test polled its new SQLite file). ``make_storage`` now tries again, bounded."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import sqlalchemy.exc

from autotune.study import storage


def _open(url: str, barrier, out) -> None:
    barrier.wait(timeout=60)
    try:
        storage.make_storage(url)
        out.put("ok")
    except Exception as e:  # noqa: BLE001 - reported to the parent
        out.put(f"{type(e).__name__}: {e}"[:300])


def test_processes_opening_one_fresh_sqlite_database_together_all_get_it(tmp_path):
    ctx = mp.get_context("spawn")
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'race-{round_}.db'}"
        barrier, out = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, barrier, out)) for _ in range(6)]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert results == ["ok"] * 6, results


def _integrity() -> sqlalchemy.exc.IntegrityError:
    return sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception("UNIQUE constraint failed"))


def test_the_schema_race_is_tried_again_and_bounded():
    calls, sleeps = [], []

    def lose_twice():
        calls.append(1)
        if len(calls) < 3:
            raise _integrity()
        return "storage"

    assert storage._schema_race(lose_twice, sleep=sleeps.append) == "storage"
    assert len(calls) == 3 and sleeps == [0.5, 1.0]

    def always():
        raise _integrity()

    sleeps.clear()
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        storage._schema_race(always, sleep=sleeps.append)
    assert len(sleeps) == storage.SCHEMA_RACE_TRIES - 1

    def bad_url():  # not a race: reported at once
        raise sqlalchemy.exc.OperationalError("connect", {}, Exception("unable to open database file"))

    sleeps.clear()
    with pytest.raises(sqlalchemy.exc.OperationalError):
        storage._schema_race(bad_url, sleep=sleeps.append)
    assert sleeps == []

"""One study, one orchestrator: the run lock that keeps a second `autotune study` off a study that is running.

Taken before the study is opened or created, held until the run ends, released by the operating system or the
database server when the process dies (no stale locks to clean up):

- SQLite (and any storage that is a file): an exclusive ``flock`` on ``DB.NAME.lock`` beside the database file,
  with the holder's pid, host and start time written in it for the message;
- PostgreSQL: a session advisory lock on a connection of its own, its ``application_name`` naming the holder;
- in-memory storages: nothing to share, no lock.

Workers (``autotune worker``) join a running study on purpose and take only the per-trial study lock
(``storage.study_lock``); this lock is for the one process that seeds, searches and confirms.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import UserError


def holder_text(pid: Any, host: Any, since: Any) -> str:
    return f"pid {pid} on {host}" + (f" since {since}" if since else "")


def _busy(study_name: str, holder: str, where: str) -> UserError:
    return UserError(
        f"study {study_name!r} is being run by another autotune ({holder}; lock {where}): one study, one "
        "orchestrator. Wait for it to finish or stop it (Ctrl-C; it resumes with the same command), or add "
        "parallel workers with `autotune worker` on a server database"
    )


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL; None for other URLs and in-memory SQLite."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def _lock_path(db: Path, study_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study_name)
    return db.parent / f"{db.name}.{safe}.lock"


def _file_holder_text(fd: int) -> str:
    """The holder written in a lock file (pid, host, since), as ``holder_text`` words it."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    return holder_text(info.get("pid", "?"), info.get("host", "?"), info.get("since"))


@contextlib.contextmanager
def _file_lock(db: Path, study_name: str) -> Iterator[None]:
    path = _lock_path(db, study_name)
    created = [d for d in (db.parent, *db.parent.parents) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(study_name, _file_holder_text(fd), str(path)) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield
        finally:
            if new_file and not db.exists():  # nothing was written (e.g. exit 2 before the study): leave nothing
                path.unlink(missing_ok=True)
                for d in created:
                    with contextlib.suppress(OSError):  # only while empty
                        d.rmdir()
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _pg_key(study_name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"autotune-run:{study_name}".encode()).digest()[:8], "big", signed=True)


def _pg_holder(conn: Any, key: int) -> str:
    """Who holds the advisory lock ``key`` (its session's application name, address and start)."""
    import sqlalchemy

    u = key & 0xFFFFFFFFFFFFFFFF  # the lock's two 32-bit halves, as pg_locks shows them (classid, objid)
    row = conn.execute(
        sqlalchemy.text(
            "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.objsubid = 1 AND l.classid::bigint = :hi AND l.objid::bigint = :lo"
        ),
        {"hi": u >> 32, "lo": u & 0xFFFFFFFF},
    ).first()
    if row is None:
        return "another session"
    return f"{row[0] or 'a session'} ({row[1] or 'local'}, since {row[2]:%Y-%m-%d %H:%M:%S})"


@contextlib.contextmanager
def _pg_connection(url: str, name: str) -> Iterator[Any]:
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        url, poolclass=sqlalchemy.pool.NullPool, connect_args={"application_name": name[:63], "connect_timeout": 30}
    )
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@contextlib.contextmanager
def _pg_lock(url: str, study_name: str) -> Iterator[None]:
    import sqlalchemy

    key = _pg_key(study_name)
    with _pg_connection(url, f"autotune study pid {os.getpid()} on {socket.gethostname()}") as conn:
        got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        conn.commit()
        if not got:
            raise _busy(study_name, _pg_holder(conn, key), "a PostgreSQL advisory lock")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # the session may be gone; its end released the lock
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()


@contextlib.contextmanager
def run_lock(storage: Any, study_name: str) -> Iterator[None]:
    """Hold the run lock of ``study_name`` in ``storage`` (a URL; storage objects and in-memory URLs need none).
    Raises UserError (exit 2) naming the holder when another run has it."""
    if not isinstance(storage, str):
        yield
        return
    db = sqlite_path(storage)
    if db is not None:
        with _file_lock(db, study_name):
            yield
        return
    if storage.startswith(("postgresql", "postgres")):
        with _pg_lock(storage, study_name):
            yield
        return
    yield


def running(storage: Any, study_name: str) -> str | None:
    """Who runs ``study_name`` now (``pid P on HOST since T``, or the PostgreSQL session), from its run lock, or
    None when no `autotune study` / `autotune confirm` holds it (a finished, interrupted or killed run; workers of
    a shared study take no run lock). Creates nothing: a lock file that does not exist was never taken. The probe
    holds the lock for an instant when it is free (a run starting in that instant is refused, as by any holder)."""
    if not isinstance(storage, str):
        return None
    db = sqlite_path(storage)
    if db is not None:
        try:
            fd = os.open(_lock_path(db, study_name), os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _file_holder_text(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)
    if storage.startswith(("postgresql", "postgres")):
        import sqlalchemy

        key = _pg_key(study_name)
        with _pg_connection(storage, f"autotune report pid {os.getpid()} on {socket.gethostname()}") as conn:
            got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            if got:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()
            return None if got else _pg_holder(conn, key)
    return None


__all__ = ["holder_text", "run_lock", "running", "sqlite_path"]

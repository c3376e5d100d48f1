"""The PID record: a JSON file of the servers an orchestrator started and has not stopped yet, and
``reap_leftovers``, which stops what a SIGKILLed orchestrator left running, by that record (pid + create_time +
argv), never by name."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from autotune._io import atomic_write
from autotune.process.tree import alive, pgid_of, same_process, stop_processes


class PidRecord:
    """A JSON file listing the servers an orchestrator started and has not stopped yet.

    Written atomically (temp file + rename) under an advisory lock, so that a SIGKILLed orchestrator leaves a
    readable record behind for ``reap_leftovers``.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return []
        entries = data.get("servers") if isinstance(data, dict) else None
        return [e for e in entries or [] if isinstance(e, dict)]

    def _write(self, entries: list[dict[str, Any]]) -> None:
        atomic_write(self.path, json.dumps({"servers": entries}, indent=1), fsync=True)

    def put(self, entry: dict[str, Any]) -> None:
        with self._locked():
            entries = [e for e in self.read() if e.get("pid") != entry["pid"]]
            entries.append(entry)
            self._write(entries)

    def remove(self, pid: int) -> None:
        with self._locked():
            entries = self.read()
            kept = [e for e in entries if e.get("pid") != pid]
            if len(kept) != len(entries):
                self._write(kept)

    def clear(self, pids: set[int] | None = None) -> None:
        with self._locked():
            if pids is None:
                self._write([])
            else:
                self._write([e for e in self.read() if e.get("pid") not in pids])


def _recorded_processes(entry: dict[str, Any]) -> tuple[list[psutil.Process], int | None]:
    """The live processes one record entry names (the root, its descendants now, its recorded children), each only
    if pid + create_time (+ argv / cmdline) match, and the group to signal (the root's, when it leads one)."""
    try:
        pid = int(entry["pid"])
        ctime = float(entry["create_time"])
        argv = [str(a) for a in entry.get("argv") or []]
    except (KeyError, TypeError, ValueError):
        return [], None
    procs: list[psutil.Process] = []
    root = same_process(pid, ctime, argv)
    if root is not None:
        procs.append(root)
        with contextlib.suppress(psutil.Error):
            procs += [c for c in root.children(recursive=True) if c not in procs]
    for child in entry.get("children") or []:
        try:
            cp = same_process(int(child["pid"]), float(child["create_time"]), list(child.get("cmdline") or []))
        except (KeyError, TypeError, ValueError):
            cp = None
        if cp is not None and all(cp.pid != p.pid for p in procs):
            procs.append(cp)
    pgid = pid if root is not None and pgid_of(pid) == pid else None
    return procs, pgid


def _owner_alive(entry: dict[str, Any]) -> bool:
    """Whether the orchestrator that recorded ``entry`` still runs (its pid and start time match a live process)."""
    try:
        pid, ctime = int(entry["orchestrator_pid"]), float(entry["orchestrator_create_time"])
    except (KeyError, TypeError, ValueError):
        return False
    return same_process(pid, ctime) is not None


def reap_leftovers(record_path: str | Path, *, term_timeout_s: float = 20.0, kill_timeout_s: float = 5.0) -> list[int]:
    """Stop the servers (and their recorded children) a previous orchestrator run left running.

    Only processes whose pid, create_time and argv match the record are touched; entries of processes that
    are gone (or whose pid now belongs to someone else) are dropped. Returns the pids stopped.
    """
    record = PidRecord(Path(record_path))
    if not record.path.exists():
        return []
    # another worker on this host (a GPU slot, a second `autotune worker`) still runs its own servers: not ours
    entries = [e for e in record.read() if not _owner_alive(e)]
    stopped: list[int] = []
    for e in entries:
        procs, pgid = _recorded_processes(e)
        if not procs:
            continue
        stopped += [p.pid for p in procs if alive(p)]
        stop_processes(procs, pgid, term_timeout_s, kill_timeout_s)
    record.clear({int(e["pid"]) for e in entries if "pid" in e})
    return stopped

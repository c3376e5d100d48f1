"""Stopping a process tree: exactly the processes we started, never a pid that now belongs to someone else.

A process is named by its pid AND its create_time (psutil checks create_time again before each signal), so a pid
the system reused is never signalled. Stopping (``stop_processes``) sends SIGTERM to the process group and to each
process, waits a bounded time, sends SIGKILL to survivors, and waits a bounded time again; ``ProcessTree`` is the
tree of one started server: its root and every descendant seen so far.

The PID record (``PidRecord``) is a JSON file of the servers an orchestrator started and has not stopped yet;
``reap_leftovers`` stops what a SIGKILLed orchestrator left running, by that record (pid + create_time + argv),
never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict, cast

import psutil

from autotune._io import atomic_write


class RecordedChild(TypedDict):
    """A descendant of a started server, as the PID record keeps it."""

    pid: int
    create_time: float
    cmdline: list[str]


class RecordedServer(TypedDict, total=False):
    """One PID record entry: a server we started (pid + create_time + argv name it), its port and log, the
    orchestrator that started it, and its descendants seen so far. Read back from a file another run may have
    written, so every key is optional and checked where it is read."""

    pid: int
    create_time: float | None
    argv: list[str]
    port: int
    log_path: str
    orchestrator_pid: int
    orchestrator_create_time: float | None
    children: list[RecordedChild]


#: create_time of one process as seen twice by psutil agrees to well within this
_CTIME_TOLERANCE_S = 0.05


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """The live processes of process group ``pgid``."""
    return [p for p in psutil.process_iter() if pgid_of(p.pid) == pgid and alive(p)]


def same_process(pid: int, create_time: float, argv: list[str] | None = None) -> psutil.Process | None:
    """The live process ``pid`` if it is the one we recorded (create_time, and argv when given)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > _CTIME_TOLERANCE_S:
            return None
        if argv and not _argv_matches(p.cmdline(), argv):
            return None
        return p
    except psutil.Error:
        return None


def _argv_matches(cmdline: list[str], argv: list[str]) -> bool:
    if cmdline == argv:
        return True
    # a script started through its interpreter (shebang) shows as [interpreter, script, args...]
    rest = argv[1:]
    return bool(rest) and len(cmdline) > len(rest) and cmdline[-len(rest) :] == rest


def stop_processes(procs: list[psutil.Process], pgid: int | None, term_timeout_s: float, kill_timeout_s: float) -> None:
    """TERM (group + each), bounded wait, KILL survivors (group + each), bounded wait; on the monotonic clock.

    Waiting polls the processes' state instead of ``psutil.wait_procs``, which would reap our direct child
    and steal its exit status from ``Popen``.
    """
    for sig, timeout in ((signal.SIGTERM, term_timeout_s), (signal.SIGKILL, kill_timeout_s)):
        living = [p for p in procs if alive(p)]
        if pgid is not None and (living or sig == signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        for p in living:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        deadline = time.monotonic() + timeout
        while (procs := [p for p in living if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not procs:
            return


def stop_fresh_group(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Stop a server started moments ago (its own session, so its group id is its pid): TERM, then KILL; reaped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


class ProcessTree:
    """The processes of one started server: the root (started in its own session, so its pid is its process
    group's id) and each descendant seen by ``track()``, with the command line it had then."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.create_time: float | None = None  # the root's; None when psutil could not see it
        self._procs: dict[int, psutil.Process] = {}  # pid -> Process (psutil checks create_time on signals)
        self._cmdlines: dict[int, list[str]] = {}
        try:
            root = psutil.Process(root_pid)
            self.create_time = root.create_time()
            self._procs[root_pid] = root
        except psutil.Error:
            pass

    def track(self) -> bool:
        """Add the root's current descendants; True when new ones were added."""
        root = self._procs.get(self.root_pid)
        if root is None:
            return False
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            return False
        added = False
        for c in children:
            if c.pid not in self._procs:
                try:
                    c.create_time()
                    self._cmdlines[c.pid] = c.cmdline()
                except psutil.Error:
                    continue
                self._procs[c.pid] = c
                added = True
        return added

    def descendants(self) -> list[RecordedChild]:
        """The descendants seen so far, as PID record entries (pid, create_time, cmdline)."""
        return [
            RecordedChild(pid=pid, create_time=p.create_time(), cmdline=self._cmdlines.get(pid, []))
            for pid, p in self._procs.items()
            if pid != self.root_pid
        ]

    def stop(self, *, root_running: bool, term_timeout_s: float, kill_timeout_s: float) -> None:
        """Stop every live process of the tree and, while the root runs or any of ours lives, every member of the
        root's process group (e.g. re-parented grandchildren we never saw as descendants)."""
        self.track()
        ours = [p for p in self._procs.values() if alive(p)]
        pgid = self.root_pid if root_running or ours else None
        if pgid is not None:
            known = {p.pid for p in ours}
            ours += [p for p in group_members(pgid) if p.pid not in known]
        stop_processes(ours, pgid, term_timeout_s, kill_timeout_s)


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

    def read(self) -> list[RecordedServer]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return []
        entries = data.get("servers") if isinstance(data, dict) else None
        return [cast(RecordedServer, e) for e in entries or [] if isinstance(e, dict)]

    def _write(self, entries: list[RecordedServer]) -> None:
        atomic_write(self.path, json.dumps({"servers": entries}, indent=1), fsync=True)

    def put(self, entry: RecordedServer) -> None:
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


def _recorded_processes(entry: RecordedServer) -> tuple[list[psutil.Process], int | None]:
    """The live processes one record entry names (the root, its descendants now, its recorded children), each only
    if pid + create_time (+ argv / cmdline) match, and the group to signal (the root's, when it leads one)."""
    try:
        pid, recorded = int(entry["pid"]), entry["create_time"]
        if recorded is None:  # psutil could not see the server start
            return [], None
        ctime = float(recorded)
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


def _owner_alive(entry: RecordedServer) -> bool:
    """Whether the orchestrator that recorded ``entry`` still runs (its pid and start time match a live process)."""
    try:
        pid, recorded = int(entry["orchestrator_pid"]), entry["orchestrator_create_time"]
        if recorded is None:
            return False
        ctime = float(recorded)
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

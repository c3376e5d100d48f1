"""``ServerProcess``: one server process we start, wait for and stop, owning its ``Popen``, the tree of processes it
started (``ProcessTree``), its log file and its PID record entry (modelled on mirakuru's ``StartCheckExecutor`` and
pytest-xprocess's ``ProcessStarter``).

A process is named by its pid AND its create_time (psutil checks create_time again before each signal), so a pid the
system reused is never signalled; stopping sends SIGTERM to the process group and to each process, waits a bounded
time, then SIGKILLs survivors. The PID record (``PidRecord``) is a JSON file of the servers an orchestrator started
and has not stopped yet: ``reap_leftovers`` stops what a SIGKILLed orchestrator left running by that record (pid +
create_time + argv), never by name. Every probe and every wait has a limit; waits run on the injected clock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import psutil

from autotune._io import atomic_write
from autotune.errors import PortInUse, ServerExited, ServerOOM
from autotune.seam import Clock, MonotonicClock

if TYPE_CHECKING:
    from autotune.space import ServerSpec


log = logging.getLogger("autotune.process")


def _own_create_time() -> float | None:
    """This orchestrator's start time: with its pid, what tells ``reap_leftovers`` whether it still runs."""
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


class ServerProcess:
    """One server process: ``start()``, ``wait_ready(check)``, measure it from outside, ``stop()``."""

    #: the longest a single readiness check may take (wall seconds), whatever is left of the start-up limit
    check_limit_s: float = 10.0

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        host: str,
        port: int,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        record: PidRecord | None = None,
        term_timeout_s: float = 30.0,
        kill_timeout_s: float = 10.0,
        port_free_timeout_s: float = 15.0,
    ) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.host = host
        self.port = int(port)
        self.env = dict(env or {})
        self.clock: Clock = clock or MonotonicClock()
        self.record = record
        self.term_timeout_s = float(term_timeout_s)
        self.kill_timeout_s = float(kill_timeout_s)
        self.port_free_timeout_s = float(port_free_timeout_s)
        self.popen: subprocess.Popen[bytes] | None = None
        self.tree: ProcessTree | None = None
        self.started_at: float | None = None  # on ``clock``, right after the process was spawned
        self.returncode: int | None = None
        self.port_freed: bool | None = None
        self.stopped = False

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    # -- its port -----------------------------------------------------------------------------------

    @staticmethod
    def preflight(server: ServerSpec, where: str) -> None:
        """A port already in use by something we did not start is a user error (``PortInUse``), found before
        anything is written; ``where`` names the space file in the message. Only under ``port_busy: fail``."""
        if server.port_busy != "fail":
            return
        if accepts_connections(server.host, server.port, timeout_s=0.5):
            raise PortInUse(
                f"port {server.port} on {server.host} is already in use by another process (not started by "
                f"autotune; it will not be touched). Stop it, change server.port, or set "
                f"server.port_busy: next|wait in {where}"
            )

    @staticmethod
    def claim_port(server: ServerSpec, *, tries: int, clock: Clock) -> int:
        """The port the next launch gets by ``server.port_busy`` (fail, wait, or the next of ``tries`` ports)."""
        return choose_port(
            server.host, int(server.port), busy=server.port_busy, wait_s=server.port_wait_s, tries=tries, clock=clock
        )

    # -- starting -----------------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """The argv list (never a shell) in its own session, stdin from /dev/null, stdout + stderr appended to the log
        after a ``# autotune: [argv...]`` line, ``env`` on top of ours; its entry goes in the PID record. A Ctrl-C
        (or SIGTERM/SIGHUP) during the spawn is held back until the child is ours to stop (``uninterrupted``): raised
        inside ``subprocess.Popen`` after the fork it would lose the child, which then outlives us holding its port
        (seen: a reverify interrupted as its next server started)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log_path, "ab") as logf:
                logf.write(f"# autotune: {json.dumps(self.argv)}\n".encode())
                logf.flush()
                with uninterrupted():
                    self.popen = subprocess.Popen(
                        self.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=logf,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, **self.env},
                        start_new_session=True,
                        close_fds=True,
                    )
            self.started_at = self.clock.now()
            self.tree = ProcessTree(self.popen.pid)
            self.tree.track()
            if self.record is not None and self.tree.create_time is not None:
                self.record.put(self._record_entry())
        except BaseException:  # e.g. Ctrl-C right after the spawn: stop the process group we just started
            if self.popen is not None:
                stop_fresh_group(self.popen)
            raise
        return self

    def _record_entry(self) -> RecordedServer:
        assert self.popen is not None and self.tree is not None
        return RecordedServer(
            pid=self.popen.pid,
            create_time=self.tree.create_time,
            argv=list(self.argv),
            port=self.port,
            log_path=str(self.log_path),
            orchestrator_pid=os.getpid(),
            orchestrator_create_time=_own_create_time(),
            children=self.tree.descendants(),
        )

    def track(self) -> None:
        """Add the server's current descendants to what ``stop()`` stops (and to the PID record)."""
        if self.tree is None or not self.tree.track():
            return
        if self.record is not None and self.tree.create_time is not None:
            with contextlib.suppress(psutil.Error, OSError):
                self.record.put(self._record_entry())

    def wait_ready(self, check: Callable[[float], bool], *, timeout_s: float, poll_interval_s: float) -> bool:
        """Poll ``check(limit_s)`` until True (ready) or ``timeout_s`` (wall) after the start passed (False); an exit
        raises ``ServerExited`` (``ServerOOM`` when the log says out of memory) with the return code and log tail."""
        popen, started_at = self._started()
        deadline = started_at + timeout_s
        while True:
            rc = popen.poll()
            if rc is not None:
                tail = self.log_tail()
                cls, what = (ServerOOM, "ran out of memory") if looks_like_oom(tail) else (ServerExited, "exited")
                msg = f"server {what} during startup (return code {rc}); log: {self.log_path}"
                raise cls(msg, returncode=rc, log_tail=tail, log_path=str(self.log_path))
            remaining = deadline - self.clock.now()
            if remaining <= 0:
                return False
            if check(max(0.05, min(self.check_limit_s, remaining))):
                return True
            self.clock.sleep(max(0.0, min(poll_interval_s, deadline - self.clock.now())))

    def _started(self) -> tuple[subprocess.Popen[bytes], float]:
        if self.popen is None or self.started_at is None:
            raise RuntimeError("server not started")
        return self.popen, self.started_at

    def wait(self, timeout_s: float) -> int | None:
        """The exit status within ``timeout_s``; None when it still runs then."""
        popen, _ = self._started()
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    # -- stopping -----------------------------------------------------------------------------------

    def stop(self) -> int | None:
        """Stop exactly what we started, reap it, remove the PID record entry, wait for the port; the exit code."""
        if self.popen is None or self.stopped:
            return self.returncode
        self.stopped = True
        popen = self.popen
        try:
            if self.tree is not None:
                self.tree.stop(
                    root_running=popen.poll() is None,
                    term_timeout_s=self.term_timeout_s,
                    kill_timeout_s=self.kill_timeout_s,
                )
            try:
                self.returncode = popen.wait(timeout=self.kill_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                self.returncode = popen.wait(timeout=self.kill_timeout_s)
        finally:
            if self.record is not None:
                with contextlib.suppress(OSError):
                    self.record.remove(popen.pid)
        self.port_freed = wait_port_free(self.host, self.port, timeout_s=self.port_free_timeout_s, clock=self.clock)
        if not self.port_freed:
            log.warning("port %s still in use after stopping the server (by %s)", self.port, describe_owner(self.port))
        return self.returncode


def connect_host(host: str) -> str:
    """The address to connect to for a server bound to ``host`` (a wildcard address means this machine)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 in brackets)."""
    h = connect_host(host)
    return f"[{h}]" if ":" in h else h


def accepts_connections(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when a TCP connection to (host, port) succeeds within ``timeout_s``."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listeners(port: int) -> list[Any] | None:
    """psutil's listening sockets on ``port`` (None when psutil may not look)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    return [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def port_listening(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when something accepts connections on (host, port), or psutil sees a listener on the port."""
    return accepts_connections(host, port, timeout_s=timeout_s) or bool(_listeners(port))


def describe_owner(port: int) -> str:
    """The process listening on ``port``, as psutil may see it."""
    pid = next((c.pid for c in _listeners(port) or [] if c.pid), None)
    if pid is None:
        return "an unknown process"
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return "an unknown process"
    try:
        cmd = " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        cmd = "?"
    return f"pid {proc.pid} ({cmd})"


def bindable(host: str, port: int) -> bool:
    """True when a socket may bind (host, port) right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(host: str, port: int, *, busy: str, wait_s: float, tries: int, clock: Clock) -> int:
    """The port a launch gets: ``port`` when nothing listens there; otherwise by ``busy``: ``fail`` raises
    ``PortInUse`` naming the owner (never stopped), ``wait`` polls up to ``wait_s`` on ``clock``, ``next`` takes the
    first of the following ``tries`` ports that is free and bindable."""
    if not port_listening(host, port):
        return port
    if busy == "fail":
        raise PortInUse(
            f"port {port} on {host} is in use by {describe_owner(port)}; autotune did not start it "
            "and will not stop it (set server.port_busy to wait or next, or free the port)"
        )
    if busy == "wait":
        deadline = clock.now() + wait_s
        while clock.now() < deadline:
            clock.sleep(min(0.5, max(0.0, deadline - clock.now())))
            if not port_listening(host, port):
                return port
        raise PortInUse(
            f"port {port} on {host} still in use by {describe_owner(port)} after "
            f"{wait_s:g} s; autotune did not start it and will not stop it"
        )
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        if not port_listening(host, candidate) and bindable(host, candidate):
            return candidate
    raise PortInUse(f"no free port in {port}..{port + tries} on {host}")


def wait_port_free(host: str, port: int, *, timeout_s: float, clock: Clock) -> bool:
    """Wait up to ``timeout_s`` on ``clock`` until nothing listens on the port; False when something still does."""
    deadline = clock.now() + timeout_s
    while port_listening(host, port, timeout_s=0.2):
        if clock.now() >= deadline:
            return False
        clock.sleep(0.05)
    return True


def log_tail(path: str | Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (of its last 64 KiB; '' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def looks_like_oom(text: str) -> bool:
    return bool(re.search(r"out of memory|OutOfMemoryError", text, re.IGNORECASE))


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


class _Held:
    """A signal held back by ``uninterrupted`` (the CLI's handler asks ``hold_signal`` first)."""

    depth = 0
    signum: int | None = None


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A section a termination signal must not cut (spawning a server we must be able to stop): a signal that
    ``hold_signal`` held back during it is raised as KeyboardInterrupt when the section ends. Only where the
    signal's handler asks ``hold_signal`` (the CLI's, ``cli._interrupt_on_termination``); Python's default SIGINT
    handler raises at once."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.signum is not None:
            signum, _Held.signum = _Held.signum, None
            raise KeyboardInterrupt(f"signal {signum}")


def hold_signal(signum: int) -> bool:
    """For a signal handler: True (the signal is held, raised when the section ends) inside ``uninterrupted``."""
    if _Held.depth:
        _Held.signum = signum
        return True
    return False


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
            ours += [p for p in psutil.process_iter() if pgid_of(p.pid) == pgid and alive(p) and p.pid not in known]
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

    def clear(self, pids: set[int]) -> None:
        with self._locked():
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

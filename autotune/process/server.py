"""``ServerProcess``: one server process we start, wait for and stop, owning everything about it.

Modelled on mirakuru's ``StartCheckExecutor`` and pytest-xprocess's ``ProcessStarter``: the object owns its
``Popen``, the tree of processes it started (``ProcessTree``), its log file and its PID record entry.

- ``preflight(server, where)`` and ``claim_port(server, ...)``: its port checks, the one place they live. The first,
  before anything is written (the CLI): something we did not start answering on ``server.port`` under
  ``port_busy: fail`` raises ``PortInUse``; the second, before each launch builds its argv (the port is in it): the
  port the server gets by ``server.port_busy`` (``choose_port``: fail, wait or next).
- ``start()``: the argv list (never a shell) in its own session, stdin from /dev/null, stdout + stderr appended to
  ``log_path`` after a ``# autotune: [argv...]`` line, ``env`` on top of our environment; the entry (pid,
  create_time, argv, port, log path, children) goes in the PID record.
- ``wait_ready(check, timeout_s=..., poll_interval_s=...)``: calls ``check(limit_s)`` every poll, on the injected
  clock from the start, until it is True (ready) or ``timeout_s`` passed (False); each poll first checks the process
  is alive: an exit raises ``ServerExited`` (``ServerOOM`` when the log says out of memory) with the return code
  and the log's tail.
- ``stop()``: SIGTERM to our process group and to every process of the tree (only those whose pid AND create_time
  match what we saw), a bounded wait, SIGKILL to survivors, reaping, the exit code in ``returncode``, the PID
  record entry removed, then a bounded wait for the port to be free (``port_freed``). Idempotent.

Its ports: ``accepts_connections`` is the one connect probe: both port checks (``claim_port`` through
``port_listening``, and ``preflight``) use it; ``port_listening`` adds psutil's view of listeners on the port (one
bound to another address, or one that does not accept). Every probe and every wait has a limit; waits run on the
injected clock. Its log: ``log_tail`` (the last lines) and ``looks_like_oom``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from autotune.clock import Clock, MonotonicClock
from autotune.errors import PortInUse, ServerExited, ServerOOM
from autotune.process.tree import PidRecord, ProcessTree, RecordedServer, stop_fresh_group

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
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"argv must be a non-empty list of strings but got {argv!r}")
        for name, value in (
            ("term_timeout_s", term_timeout_s),
            ("kill_timeout_s", kill_timeout_s),
            ("port_free_timeout_s", port_free_timeout_s),
        ):
            if value < 0:
                raise ValueError(f"{name} must be at least 0 but got {value}")
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.host = host
        self.port = int(port)
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
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
        if self.popen is not None:
            raise RuntimeError(f"server already started (pid {self.popen.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            logf.write(f"# autotune: {json.dumps(self.argv)}\n".encode())
            logf.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                close_fds=True,
            )
        try:
            self.started_at = self.clock.now()
            self.tree = ProcessTree(self.popen.pid)
            self.tree.track()
            if self.record is not None and self.tree.create_time is not None:
                self.record.put(self._record_entry())
        except BaseException:  # e.g. Ctrl-C right after the spawn: stop the process group we just started
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
        """Poll ``check(limit_s)`` until True (ready) or ``timeout_s`` (wall) after the start passed (False)."""
        popen, started_at = self._started()
        deadline = started_at + timeout_s
        while True:
            rc = popen.poll()
            if rc is not None:
                raise self._exited_during_startup(rc)
            remaining = deadline - self.clock.now()
            if remaining <= 0:
                return False
            if check(max(0.05, min(self.check_limit_s, remaining))):
                return True
            self.clock.sleep(max(0.0, min(poll_interval_s, deadline - self.clock.now())))

    def _exited_during_startup(self, rc: int) -> ServerExited:
        tail = self.log_tail()
        cls = ServerOOM if looks_like_oom(tail) else ServerExited
        what = "ran out of memory" if cls is ServerOOM else "exited"
        return cls(
            f"server {what} during startup (return code {rc}); log: {self.log_path}",
            returncode=rc,
            log_tail=tail,
            log_path=str(self.log_path),
        )

    def _started(self) -> tuple[subprocess.Popen[bytes], float]:
        if self.popen is None or self.started_at is None:
            raise RuntimeError("server not started")
        return self.popen, self.started_at

    # -- while it runs ------------------------------------------------------------------------------

    def poll(self) -> int | None:
        """The exit status, None while it runs (or before it started)."""
        return None if self.popen is None else self.popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status within ``timeout_s``; None when it still runs then."""
        popen, _ = self._started()
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines=lines)

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

    def __enter__(self) -> ServerProcess:
        return self if self.popen is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_PORT_BUSY = ("fail", "wait", "next")


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


def port_owner(port: int) -> psutil.Process | None:
    """The process listening on ``port``, when psutil may see it."""
    for c in _listeners(port) or []:
        if c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def port_listening(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when something accepts connections on (host, port), or psutil sees a listener on the port."""
    return accepts_connections(host, port, timeout_s=timeout_s) or bool(_listeners(port))


def describe_owner(port: int) -> str:
    proc = port_owner(port)
    if proc is None:
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
    if busy not in _PORT_BUSY:
        raise ValueError(f"server.port_busy must be fail, wait or next but got {busy!r}")
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


_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)


def log_tail(path: str | Path | None, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a log file ('' when unreadable)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def looks_like_oom(text: str) -> bool:
    return bool(_OOM.search(text))

"""``ProcessRunner``: real server processes behind the ``Runner`` seam.

One launch:
1. resolve the config through the backend (an infeasible config raises ``InfeasibleConfig``, nothing starts);
2. check the port: anything listening there (connect test, plus psutil to name the owner) is handled by
   ``server.port_busy``: ``fail`` raises ``PortInUse`` naming the port and the owner (it is never stopped),
   ``wait`` polls up to ``server.port_wait_s``, ``next`` takes the next free port;
3. start the argv list (never a shell) in its own session, stdout+stderr to a per-trial log file, with the
   backend's environment on top of ours, and record (pid, create_time, argv, port) in the PID record file;
4. wait for ``backend.health_path`` on the monotonic clock up to ``server.startup_timeout_s`` (hardware
   seconds: divided by ``time_scale`` on the wall clock), checking each poll that the process is alive.
   Exit during startup raises ``ServerExited`` (``ServerOOM`` when the log says out of memory) with the log
   tail and return code; no health in time stops the server and raises ``StartupTimeout``;
5. read the resolved settings (``backend.info_path``) into ``LaunchInfo.effective``.

A ``ProcessSession`` measures prompts with ``autotune.client.BenchmarkClient`` (wall seconds times
``time_scale`` = hardware seconds) and ``close()`` stops exactly what was started: SIGTERM to our process
group and to the tree's processes (only those whose pid AND create_time match what we saw), a bounded wait,
SIGKILL to survivors, reaping, the exit code recorded, the PID record entry removed, then a bounded wait for
the port to be free. ``reap_leftovers`` stops processes a previous, SIGKILLed orchestrator left behind, by
the PID record (pid + create_time + argv), never by name.

Ctrl-C (KeyboardInterrupt) during a launch or a measurement stops the server before propagating.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil

from autotune.backends.base import Backend
from autotune.client import BenchmarkClient
from autotune.clock import Clock, MonotonicClock
from autotune.config import LaunchInfo, PromptResult, ReferenceOutput, TrialConfig
from autotune.errors import (
    BenchmarkError,
    PortInUse,
    ServerDied,
    ServerExited,
    ServerOOM,
    StartupTimeout,
)
from autotune.space import Space

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
#: create_time of one process as seen twice by psutil agrees to well within this
_CTIME_TOLERANCE_S = 0.05


# -- small helpers ---------------------------------------------------------------------------------------


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


def _connect_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def port_owner(port: int) -> psutil.Process | None:
    """The process listening on ``port``, when psutil may see it."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def port_listening(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when something accepts connections on (host, port), or psutil sees a listener on the port."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        pass
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def describe_owner(port: int) -> str:
    proc = port_owner(port)
    if proc is None:
        return "an unknown process"
    try:
        cmd = " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        cmd = "?"
    return f"pid {proc.pid} ({cmd})"


def _redacted(env: dict[str, str]) -> dict[str, str]:
    return {k: ("***" if _SECRET.search(k) else v) for k, v in env.items()}


def _same_process(pid: int, create_time: float, argv: list[str] | None = None) -> psutil.Process | None:
    """The live process ``pid`` if it is the one we recorded (create_time, and argv when given)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > _CTIME_TOLERANCE_S:
            return None
        if argv:
            cmd = p.cmdline()
            if not _argv_matches(cmd, argv):
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


def _stop_processes(
    procs: list[psutil.Process], pgid: int | None, term_timeout_s: float, kill_timeout_s: float
) -> None:
    """TERM (group + each), bounded wait, KILL survivors (group + each), bounded wait.

    Waiting polls the processes' state instead of ``psutil.wait_procs``, which would reap our direct child
    and steal its exit status from ``Popen``.
    """
    for sig, timeout in ((signal.SIGTERM, term_timeout_s), (signal.SIGKILL, kill_timeout_s)):
        alive = [p for p in procs if _alive(p)]
        if pgid is not None and (alive or sig == signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        deadline = time.monotonic() + timeout
        while (procs := [p for p in alive if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not procs:
            return


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -- the PID record --------------------------------------------------------------------------------------


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
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"servers": entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

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


def reap_leftovers(record_path: str | Path, *, term_timeout_s: float = 20.0, kill_timeout_s: float = 5.0) -> list[int]:
    """Stop the servers (and their recorded children) a previous orchestrator run left running.

    Only processes whose pid, create_time and argv match the record are touched; entries of processes that
    are gone (or whose pid now belongs to someone else) are dropped. Returns the pids stopped.
    """
    record = PidRecord(Path(record_path))
    if not record.path.exists():
        return []
    entries = record.read()
    stopped: list[int] = []
    for e in entries:
        try:
            pid = int(e["pid"])
            ctime = float(e["create_time"])
            argv = [str(a) for a in e.get("argv") or []]
        except (KeyError, TypeError, ValueError):
            continue
        procs: list[psutil.Process] = []
        root = _same_process(pid, ctime, argv)
        if root is not None:
            procs.append(root)
            with contextlib.suppress(psutil.Error):
                procs += [c for c in root.children(recursive=True) if c not in procs]
        for child in e.get("children") or []:
            try:
                cp = _same_process(int(child["pid"]), float(child["create_time"]), list(child.get("cmdline") or []))
            except (KeyError, TypeError, ValueError):
                cp = None
            if cp is not None and all(cp.pid != p.pid for p in procs):
                procs.append(cp)
        if not procs:
            continue
        pgid = pid if root is not None and _pgid(pid) == pid else None
        stopped += [p.pid for p in procs if _alive(p)]
        _stop_processes(procs, pgid, term_timeout_s, kill_timeout_s)
    record.clear({int(e["pid"]) for e in entries if "pid" in e})
    return stopped


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter():
        if _pgid(p.pid) == pgid and _alive(p):
            members.append(p)
    return members


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


# -- runner and session ----------------------------------------------------------------------------------


class ProcessRunner:
    """Starts one real server process per trial (``Runner``)."""

    #: wall seconds between health polls: fixed and short, so that ``startup_s`` is the server's own start-up time
    #: within this much (a poll that backed off to 1 s reported 2.5-4.5 s for servers up in 2.0-2.9 s)
    poll_interval_s: float = 0.05
    #: wall seconds given to SIGTERM before SIGKILL, and to SIGKILL before giving up
    term_timeout_s: float = 30.0
    kill_timeout_s: float = 10.0
    #: wall seconds to wait for the port to be free after stopping
    port_free_timeout_s: float = 15.0
    #: wall seconds to wait for a server's exit status after a failed request
    death_grace_s: float = 2.0
    #: how many ports past the configured one ``port_busy: next`` tries
    next_port_tries: int = 100

    def __init__(
        self,
        space: Space,
        backend: Backend,
        *,
        log_dir: Path,
        clock: Clock | None = None,
        time_scale: float = 1.0,
        simulated: bool = False,
        record_path: Path | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive but got {time_scale}")
        if space.server.port_busy not in ("fail", "wait", "next"):
            raise ValueError(f"server.port_busy must be fail, wait or next but got {space.server.port_busy!r}")
        self.space = space
        self.backend = backend
        self.log_dir = Path(log_dir)
        self.clock: Clock = clock or MonotonicClock()
        self.time_scale = float(time_scale)
        self.simulated = bool(simulated)
        self.record = PidRecord(Path(record_path)) if record_path is not None else None
        self._launches = 0
        self._probed = False

    def reap_leftovers(self) -> list[int]:
        """Stop what a previous, killed orchestrator left in this runner's PID record (see ``reap_leftovers``)."""
        if self.record is None:
            return []
        stopped = reap_leftovers(
            self.record.path, term_timeout_s=self.term_timeout_s, kill_timeout_s=self.kill_timeout_s
        )
        if stopped:
            log.warning("stopped %d server process(es) left by a previous run: %s", len(stopped), stopped)
        return stopped

    # -- ports --------------------------------------------------------------------------------------

    def choose_port(self) -> int:
        server = self.space.server
        port = int(server.port)
        if not port_listening(server.host, port):
            return port
        if server.port_busy == "fail":
            raise PortInUse(
                f"port {port} on {server.host} is in use by {describe_owner(port)}; autotune did not start it "
                "and will not stop it (set server.port_busy to wait or next, or free the port)"
            )
        if server.port_busy == "wait":
            deadline = self.clock.now() + server.port_wait_s
            while self.clock.now() < deadline:
                self.clock.sleep(min(0.5, max(0.0, deadline - self.clock.now())))
                if not port_listening(server.host, port):
                    return port
            raise PortInUse(
                f"port {port} on {server.host} still in use by {describe_owner(port)} after "
                f"{server.port_wait_s:g} s; autotune did not start it and will not stop it"
            )
        for candidate in range(port + 1, min(port + 1 + self.next_port_tries, 65536)):
            if not port_listening(server.host, candidate) and _bindable(server.host, candidate):
                return candidate
        raise PortInUse(f"no free port in {port}..{port + self.next_port_tries} on {server.host}")

    # -- launching ----------------------------------------------------------------------------------

    def launch(self, config: TrialConfig) -> ProcessSession:
        effective = self.backend.resolve(config, self.space)
        if not self._probed and self.space.server.version is None and not self.simulated:
            self._probed = True
            self.backend.probe(self.space)
        port = self.choose_port()
        argv = self.backend.argv(effective, self.space, port=port, simulate=self.simulated)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"backend {self.backend.name!r} built a bad argv: {argv!r}")
        own_env = {str(k): str(v) for k, v in self.backend.env(effective, self.space).items()}
        self._launches += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.log_dir / f"server-{stamp}-{os.getpid()}-{self._launches:04d}.log"
        with open(log_path, "ab") as logf:
            logf.write(f"# autotune: {json.dumps(argv)}\n".encode())
            logf.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env={**os.environ, **own_env},
                start_new_session=True,
                close_fds=True,
            )
        t0 = self.clock.now()
        info = LaunchInfo(
            argv=argv, env=_redacted(own_env), log_path=str(log_path), pid=proc.pid, simulated=self.simulated
        )
        try:
            session = ProcessSession(self, proc, port, info, effective)
        except BaseException:  # e.g. Ctrl-C before the session exists: stop the process group we just started
            _stop_fresh_group(proc)
            raise
        try:
            session._track()
            self._wait_healthy(session, t0)
            info.startup_s = (self.clock.now() - t0) * self.time_scale
            raw = (
                session.client.get_json(
                    self.backend.info_path, fallbacks=self.backend.info_fallback_paths, timeout_s=10.0
                )
                if self.backend.info_path
                else None
            )
            if isinstance(raw, dict):
                info.effective = self.backend.read_effective(raw)
            session._track()
        except BaseException:
            session.close()
            raise
        return session

    def _wait_healthy(self, session: ProcessSession, t0: float) -> None:
        wall_timeout = self.space.server.startup_timeout_s / self.time_scale
        deadline = t0 + wall_timeout
        while True:
            rc = session.proc.poll()
            if rc is not None:
                tail = log_tail(session.info.log_path)
                cls = ServerOOM if looks_like_oom(tail) else ServerExited
                what = "ran out of memory" if cls is ServerOOM else "exited"
                raise cls(
                    f"server {what} during startup (return code {rc}); log: {session.info.log_path}",
                    returncode=rc,
                    log_tail=tail,
                    log_path=session.info.log_path,
                )
            remaining = deadline - self.clock.now()
            if remaining <= 0:
                session.close()
                raise StartupTimeout(
                    f"server not healthy within {self.space.server.startup_timeout_s:g} s "
                    f"({wall_timeout:g} s wall); log: {session.info.log_path}",
                    log_tail=log_tail(session.info.log_path),
                    log_path=session.info.log_path,
                )
            status = session.client.status(self.backend.health_path, timeout_s=max(0.05, min(10.0, remaining)))
            if status == 200:
                return
            self.clock.sleep(max(0.0, min(self.poll_interval_s, deadline - self.clock.now())))


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class ProcessSession:
    """A started server: measure prompts, then ``close()`` (idempotent; also a context manager)."""

    def __init__(
        self, runner: ProcessRunner, proc: subprocess.Popen[bytes], port: int, info: LaunchInfo, config: TrialConfig
    ) -> None:
        self.runner = runner
        self.proc = proc
        self.port = port
        self.info = info
        self.config = config
        self.returncode: int | None = None
        self.port_freed: bool | None = None
        self.closed = False
        space = runner.space
        self.client = BenchmarkClient.for_space(
            space, runner.backend, f"http://{_url_host(space.server.host)}:{port}", clock=runner.clock
        )
        self._create_time: float | None = None
        self._tree: dict[int, psutil.Process] = {}  # pid -> Process (psutil checks create_time on signals)
        self._cmdlines: dict[int, list[str]] = {}
        try:
            root = psutil.Process(proc.pid)
            self._create_time = root.create_time()
            self._tree[proc.pid] = root
        except psutil.Error:
            pass
        if runner.record is not None and self._create_time is not None:
            runner.record.put(self._record_entry())

    def _record_entry(self) -> dict[str, Any]:
        return {
            "pid": self.proc.pid,
            "create_time": self._create_time,
            "argv": self.info.argv,
            "port": self.port,
            "log_path": self.info.log_path,
            "orchestrator_pid": os.getpid(),
            "children": [
                {"pid": pid, "create_time": p.create_time(), "cmdline": self._cmdlines.get(pid, [])}
                for pid, p in self._tree.items()
                if pid != self.proc.pid
            ],
        }

    def _track(self) -> None:
        """Add the root's current descendants to the set of processes we stop at close."""
        root = self._tree.get(self.proc.pid)
        if root is None:
            return
        added = False
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            return
        for c in children:
            if c.pid not in self._tree:
                try:
                    c.create_time()
                    self._cmdlines[c.pid] = c.cmdline()
                except psutil.Error:
                    continue
                self._tree[c.pid] = c
                added = True
        if added and self.runner.record is not None and self._create_time is not None:
            with contextlib.suppress(psutil.Error, OSError):
                self.runner.record.put(self._record_entry())

    def __enter__(self) -> ProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- measuring ----------------------------------------------------------------------------------

    def _scaled(self, r: PromptResult) -> PromptResult:
        k = self.runner.time_scale
        if k == 1.0:
            return r
        return PromptResult(
            index=r.index,
            completion_tokens=r.completion_tokens,
            seconds=r.seconds * k,
            ttft_s=None if r.ttft_s is None else r.ttft_s * k,
            prompt_tokens=r.prompt_tokens,
            accept_length=r.accept_length,
            text=r.text,
            finish_reason=r.finish_reason,
        )

    def _measure(self, index: int, text: str) -> PromptResult:
        return self._call(index, lambda: self._scaled(self.client.measure(index, text)))

    def _call(self, index: int, request: Callable[[], _T]) -> _T:
        """One request to the server; a failure of a server that has exited is ``ServerDied``."""
        if self.closed:
            raise BenchmarkError("the session is closed")
        self._track()
        try:
            return request()
        except BenchmarkError as e:
            try:  # a dying server closes its sockets a moment before its exit status is visible
                rc = self.proc.wait(timeout=self.runner.death_grace_s)
            except subprocess.TimeoutExpired:
                rc = None
            if rc is not None:
                raise ServerDied(
                    f"server exited (return code {rc}) while measuring prompt {index}: {e}",
                    returncode=rc,
                    log_tail=log_tail(self.info.log_path),
                ) from e
            raise
        except KeyboardInterrupt:
            self.close()
            raise

    def warmup(self) -> None:
        prompts = self.runner.space.benchmark.prompts
        if not prompts:
            return
        for i in range(self.runner.space.benchmark.warmup_requests):
            self._measure(i % len(prompts), prompts[i % len(prompts)].text)

    def run_prompt(self, index: int) -> PromptResult:
        prompts = self.runner.space.benchmark.prompts
        if not 0 <= index < len(prompts):
            raise IndexError(f"prompt index {index} outside 0..{len(prompts) - 1}")
        return self._measure(index, prompts[index].text)

    def reference(self, index: int, top_n: int) -> ReferenceOutput | None:
        prompts = self.runner.space.benchmark.prompts
        if not 0 <= index < len(prompts):
            raise IndexError(f"prompt index {index} outside 0..{len(prompts) - 1}")
        return self._call(index, lambda: self.client.reference(index, prompts[index].text, top_n))

    # -- stopping -----------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.client.close()
            self._track()
            ours = [p for p in self._tree.values() if _alive(p)]
            pgid = self.proc.pid if self.proc.poll() is None or ours else None
            if pgid is not None:
                # members of our process group we did not see as descendants (e.g. re-parented grandchildren)
                known = {p.pid for p in ours}
                ours += [p for p in _group_members(pgid) if p.pid not in known]
            _stop_processes(ours, pgid, self.runner.term_timeout_s, self.runner.kill_timeout_s)
            try:
                self.returncode = self.proc.wait(timeout=self.runner.kill_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.returncode = self.proc.wait(timeout=self.runner.kill_timeout_s)
        finally:
            if self.runner.record is not None:
                with contextlib.suppress(OSError):
                    self.runner.record.remove(self.proc.pid)
        self.port_freed = self._wait_port_free()
        if not self.port_freed:
            log.warning("port %s still in use after stopping the server (by %s)", self.port, describe_owner(self.port))

    def _wait_port_free(self) -> bool:
        host = self.runner.space.server.host
        clock = self.runner.clock
        deadline = clock.now() + self.runner.port_free_timeout_s
        while port_listening(host, self.port, timeout_s=0.2):
            if clock.now() >= deadline:
                return False
            clock.sleep(0.05)
        return True


def _url_host(host: str) -> str:
    h = _connect_host(host)
    return f"[{h}]" if ":" in h else h


__all__ = [
    "PidRecord",
    "ProcessRunner",
    "ProcessSession",
    "describe_owner",
    "log_tail",
    "looks_like_oom",
    "port_listening",
    "port_owner",
    "reap_leftovers",
]


def _stop_fresh_group(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Stop a server we started moments ago (its own session, so its group id is its pid): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue

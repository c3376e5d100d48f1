"""``ProcessRunner``: one real server process per trial, behind the ``Runner`` seam (``autotune.runner``).

``launch(config)``: the backend resolves the config unless it is an ``EffectiveConfig`` already (an infeasible one
raises ``InfeasibleConfig``, nothing starts) and builds the argv list, environment and files (``Backend.files``,
written into the launch's own folder beside its log file, which argv names); the port is chosen
(``ServerProcess.claim_port``); a ``ServerProcess`` is started with a per-trial log file and waited for
(``backend.health_path``, up to ``server.startup_timeout_s`` hardware seconds: divided by ``time_scale`` on the wall
clock); the resolved settings (``backend.info_path``) go in ``LaunchInfo.effective``; the ``ProcessSession`` it
returns owns the server process. Any failure or Ctrl-C during a launch stops the server before propagating.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from autotune._io import atomic_write
from autotune.backends.base import Backend
from autotune.client import BenchmarkClient
from autotune.clock import Clock, MonotonicClock
from autotune.config import EffectiveConfig, LaunchInfo, TrialConfig
from autotune.errors import LaunchError, StartupTimeout
from autotune.process.pidrecord import PidRecord, reap_leftovers
from autotune.process.ports import url_host
from autotune.process.server import ServerProcess
from autotune.process.session import ProcessSession
from autotune.redact import redact_env
from autotune.space import Space

log = logging.getLogger("autotune.process")


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

    def choose_port(self) -> int:
        """The port the next launch gets (``server.port_busy``: fail, wait or next)."""
        return ServerProcess.claim_port(self.space.server, tries=self.next_port_tries, clock=self.clock)

    # -- launching ----------------------------------------------------------------------------------

    def launch(self, config: TrialConfig) -> ProcessSession:
        return self._start(self.backend.effective(config, self.space))

    def _probe_once(self) -> None:
        """Learn the installed server's flags before the first argv (``Backend.probe``)."""
        if (
            not self._probed
            and (self.space.server.version is None or self.backend.probe_before_argv)
            and not self.simulated
        ):
            self._probed = True
            self.backend.probe(self.space)

    def _start(self, effective: EffectiveConfig) -> ProcessSession:
        """A fresh server for ``effective``."""
        self._probe_once()
        port = self.choose_port()
        log_path = self._log_path()
        files = self.backend.files(effective, self.space)
        files_dir = str(log_path.with_suffix("")) if files else None
        argv = self.backend.argv(effective, self.space, port=port, simulate=self.simulated, files_dir=files_dir)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"backend {self.backend.name!r} built a bad argv: {argv!r}")
        own_env = {str(k): str(v) for k, v in self.backend.env(effective, self.space).items()}
        for name, text in files.items():
            path = Path(str(files_dir)) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
        server = self._server(argv, own_env, port, log_path).start()
        info = LaunchInfo(
            argv=argv, env=redact_env(own_env), log_path=str(server.log_path), pid=server.pid, simulated=self.simulated
        )
        session: ProcessSession | None = None
        try:
            session = self._session(server, info, effective)
            self._wait_healthy(session)
            assert server.started_at is not None
            info.startup_s = (self.clock.now() - server.started_at) * self.time_scale
            self._read_effective(session)
            server.track()
        except BaseException as e:
            if isinstance(e, LaunchError) and server.started_at is not None:  # the GPUs it held until it failed
                e.server_s = (self.clock.now() - server.started_at) * self.time_scale
            if session is not None:
                session.close()
            else:
                server.stop()
            raise
        return session

    def _log_path(self) -> Path:
        """The next launch's log file (its files, if any, go in the folder of the same name without ``.log``)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return self.log_dir / f"server-{stamp}-{os.getpid()}-{self._launches + 1:04d}.log"

    def _server(self, argv: list[str], env: dict[str, str], port: int, log_path: Path) -> ServerProcess:
        """A (not yet started) server process with this launch's log file and the runner's current limits."""
        self._launches += 1
        return ServerProcess(
            argv,
            log_path=log_path,
            host=self.space.server.host,
            port=port,
            env=env,
            clock=self.clock,
            record=self.record,
            term_timeout_s=self.term_timeout_s,
            kill_timeout_s=self.kill_timeout_s,
            port_free_timeout_s=self.port_free_timeout_s,
        )

    def _session(self, server: ServerProcess, info: LaunchInfo, config: TrialConfig) -> ProcessSession:
        space = self.space
        client = BenchmarkClient.for_space(
            space, self.backend, f"http://{url_host(space.server.host)}:{server.port}", clock=self.clock
        )
        return ProcessSession(
            server,
            client,
            info,
            config,
            benchmark=space.benchmark,
            time_scale=self.time_scale,
            death_grace_s=self.death_grace_s,
        )

    def _wait_healthy(self, session: ProcessSession) -> None:
        limit_s = self.space.server.startup_timeout_s
        wall_timeout = limit_s / self.time_scale
        health = self.backend.health_path

        def healthy(timeout_s: float) -> bool:
            return session.client.status(health, timeout_s=timeout_s) == 200

        server = session.server
        if not server.wait_ready(healthy, timeout_s=wall_timeout, poll_interval_s=self.poll_interval_s):
            session.close()
            raise StartupTimeout(
                f"server not healthy within {limit_s:g} s ({wall_timeout:g} s wall); log: {server.log_path}",
                log_tail=server.log_tail(),
                log_path=str(server.log_path),
            )

    def _read_effective(self, session: ProcessSession) -> None:
        """The server's resolved settings (``backend.info_path``) into ``session.info.effective``."""
        if not self.backend.info_path:
            return
        raw = session.client.get_json(
            self.backend.info_path, fallbacks=self.backend.info_fallback_paths, timeout_s=10.0
        )
        if isinstance(raw, dict):
            session.info.effective = self.backend.read_effective(raw)

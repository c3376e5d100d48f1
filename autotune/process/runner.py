"""``ProcessRunner``: one real server process per trial, behind the ``Runner`` seam (``autotune.runner``).

``launch(config)``: the backend resolves the config unless it is an ``EffectiveConfig`` already (an infeasible one
raises ``InfeasibleConfig``, nothing starts) and builds the argv list, environment and files (``Backend.files``,
written into the launch's own folder beside its log file, which argv names); the port is chosen
(``ServerProcess.claim_port``); a ``ServerProcess`` is started with a per-trial log file and waited for
(``backend.health_path``, up to ``server.startup_timeout_s`` hardware seconds: divided by ``time_scale`` on the wall
clock); the resolved settings (``backend.info_path``) go in ``LaunchInfo.effective``; the ``ProcessSession`` it
returns owns the server process. Any failure or Ctrl-C during a launch stops the server before propagating.

``share_starts(True)`` (the study's search phase): configs differing only in knobs the server takes per request
run on one kept server (``autotune.process.sharing``); ``share_starts(False)`` stops it, and every launch is a
fresh start again (confirmation's rounds).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

from autotune._io import atomic_write
from autotune.backends.base import Backend
from autotune.backends.per_request import Honoured
from autotune.client import BenchmarkClient
from autotune.clock import Clock, MonotonicClock
from autotune.config import EffectiveConfig, LaunchInfo, TrialConfig
from autotune.errors import LaunchError, StartupTimeout
from autotune.process.pidrecord import PidRecord, reap_leftovers
from autotune.process.ports import url_host
from autotune.process.server import ServerProcess
from autotune.process.session import ProcessSession
from autotune.process.sharing import KeptStart, StartSharing, attach, launch_key, probe
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
        #: shared starts (None: every launch is a fresh start); see ``share_starts``
        self.sharing: StartSharing | None = None
        #: why the backend's per-request knobs are not shared (kept across ``share_starts`` calls: a server that
        #: ignored them once is not trusted again by this runner)
        self._sharing_off: str | None = None

    def share_starts(self, on: bool) -> StartSharing | None:
        """Turn shared starts on (when the backend declares per-request knobs for the space: ``Backend.per_request``)
        or off (a kept server is stopped). Returns the sharing state, None when off or not supported."""
        if self.sharing is not None:
            self._sharing_off = self.sharing.off_reason
            self.sharing.release()
            self.sharing = None
        if not on or self.simulated:
            return None
        per = self.backend.per_request(self.space)
        if per is None:
            return None
        self.sharing = StartSharing(per, off_reason=self._sharing_off)
        return self.sharing

    def close(self) -> None:
        """Stop a kept server (shared starts off)."""
        self.share_starts(False)

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
        effective = self.backend.effective(config, self.space)
        sharing = self.sharing
        if sharing is None:
            return self._start(effective)
        if not sharing.on or not sharing.per.applies(effective):
            sharing.release()
            return self._start(effective)
        return self._launch_shared(effective, sharing)

    def _launch_shared(self, effective: EffectiveConfig, sharing: StartSharing) -> ProcessSession:
        """``effective`` on the kept server of its launch key, or on a new one kept for the next trials."""
        per = sharing.per
        launch = per.launch_config(effective)
        self._probe_once()
        files = self.backend.files(launch, self.space)
        files_dir = "@files" if files else None
        key = launch_key(
            self.backend.argv(launch, self.space, port=0, simulate=self.simulated, files_dir=files_dir),
            self.backend.env(launch, self.space),
            files,
        )
        kept = sharing.kept
        if kept is not None and (kept.key != key or not self._healthy(kept)):
            sharing.release()
            kept = None
        if kept is None:
            session = self._start(launch)
            kept = KeptStart(key, session.server, launch, session.info, f"{os.getpid()}-{self._launches:04d}")
            sharing.kept = kept
            sharing.starts += 1
            shared = False
        else:
            session = self._session(kept.server, dataclasses.replace(kept.info, startup_s=0.0, start={}), effective)
            sharing.reused += 1
            shared = True
        session.config = effective
        attach(session, sharing, effective, kept)
        kept.trials += 1
        values = per.body(effective)
        by_knob = {k: effective.knob(k) for k in per.knobs}  # the trial's per-request values, by knob name
        start: dict[str, Any] = {"id": kept.start_id, "shared": shared, "per_request": by_knob}
        if values != per.body(launch) and kept.probe is None:
            try:
                check = probe(session, sharing, kept, self._first_prompt())
            except BaseException:
                session.failed = True
                session.close()
                raise
            start["probe"] = check.to_dict()
            if check.honoured is Honoured.NO:
                sharing.turn_off(f"the server ignored the per-request values ({check.reason})")
                start["sharing_off"] = sharing.off_reason
            if check.honoured not in (Honoured.YES, Honoured.CONSISTENT):
                session.failed = True
                session.close()  # stops the kept server
                sharing.kept = None
                own = self._start(effective)
                # the refused start's time is recorded with the trial that paid it
                own.info.start = {
                    **start,
                    "id": None,
                    "shared": False,
                    "own_start": check.reason,
                    "refused_start_s": kept.info.startup_s,
                }
                return own
            kept.probe = check
        elif kept.probe is not None:
            start["probe"] = kept.probe.to_dict()
        session.info.start = start
        # the server reports its launch values of the per-request knobs: the session's own are in the request
        session.info.effective = {k: v for k, v in session.info.effective.items() if k not in per.knobs}
        return session

    def _first_prompt(self) -> str:
        prompts = self.space.benchmark.prompts
        return prompts[0].text if prompts else "Hello"

    def _healthy(self, kept: KeptStart) -> bool:
        """A kept server still running and answering its health check."""
        if kept.server.returncode is not None:
            return False
        client = BenchmarkClient.for_space(
            self.space, self.backend, f"http://{url_host(self.space.server.host)}:{kept.server.port}", clock=self.clock
        )
        with client:
            return client.status(self.backend.health_path, timeout_s=5.0) == 200

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

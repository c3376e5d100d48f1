"""``ProcessRunner``: one real server process per trial behind the ``Runner`` seam (``autotune.seam``), and the
``ProcessSession`` that measures it. Times are hardware seconds: wall seconds times ``time_scale`` (the simulator's);
any failure or Ctrl-C during a launch or a measurement stops the server before propagating.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from autotune._io import atomic_write
from autotune.backends.base import Backend
from autotune.client import BenchmarkClient
from autotune.config import LaunchInfo, LevelResult, PromptResult, ReferenceOutput, TrialConfig, level_requests
from autotune.errors import BenchmarkError, LaunchError, ServerDied, StartupTimeout
from autotune.process.server import PidRecord, ServerProcess, reap_leftovers, url_host
from autotune.redact import redact_env
from autotune.seam import Clock, MonotonicClock
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

    def launch(self, config: TrialConfig) -> ProcessSession:
        """A fresh server for ``config``: the backend resolves it unless it is an ``EffectiveConfig`` already (an
        infeasible one raises ``InfeasibleConfig``, nothing starts) and builds its argv, environment and files
        (written into the launch's own folder beside its log file); then the port, the start, the health wait (up
        to ``server.startup_timeout_s`` hardware seconds) and the resolved settings (``LaunchInfo.effective``)."""
        effective = self.backend.effective(config, self.space)
        server_spec = self.space.server
        if not self._probed and (server_spec.version is None or self.backend.probe_before_argv) and not self.simulated:
            self._probed = True
            self.backend.probe(self.space)  # the installed server's flags, before the first argv
        port = ServerProcess.claim_port(server_spec, tries=self.next_port_tries, clock=self.clock)
        self._launches += 1
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.log_dir / f"server-{stamp}-{os.getpid()}-{self._launches:04d}.log"
        files = self.backend.files(effective, self.space)
        files_dir = str(log_path.with_suffix("")) if files else None
        argv = self.backend.argv(effective, self.space, port=port, simulate=self.simulated, files_dir=files_dir)
        own_env = {str(k): str(v) for k, v in self.backend.env(effective, self.space).items()}
        for name, text in files.items():
            path = Path(str(files_dir)) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
        server = ServerProcess(
            argv,
            log_path=log_path,
            host=server_spec.host,
            port=port,
            env=own_env,
            clock=self.clock,
            record=self.record,
            term_timeout_s=self.term_timeout_s,
            kill_timeout_s=self.kill_timeout_s,
            port_free_timeout_s=self.port_free_timeout_s,
        ).start()
        session: ProcessSession | None = None
        try:
            info = LaunchInfo(
                argv=argv,
                env=redact_env(own_env),
                log_path=str(server.log_path),
                pid=server.pid,
                simulated=self.simulated,
            )
            session = ProcessSession(self, server, info, effective)
            client = session.client
            limit_s = server_spec.startup_timeout_s
            wall_timeout = limit_s / self.time_scale

            def healthy(timeout_s: float) -> bool:
                return client.status(self.backend.health_path, timeout_s=timeout_s) == 200

            if not server.wait_ready(healthy, timeout_s=wall_timeout, poll_interval_s=self.poll_interval_s):
                session.close()
                raise StartupTimeout(
                    f"server not healthy within {limit_s:g} s ({wall_timeout:g} s wall); log: {server.log_path}",
                    log_tail=server.log_tail(),
                    log_path=str(server.log_path),
                )
            assert server.started_at is not None
            info.startup_s = (self.clock.now() - server.started_at) * self.time_scale
            if self.backend.info_path:  # the server's resolved settings
                raw = client.get_json(
                    self.backend.info_path, fallbacks=self.backend.info_fallback_paths, timeout_s=10.0
                )
                if isinstance(raw, dict):
                    info.effective = self.backend.read_effective(raw)
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


_T = TypeVar("_T")

#: max_tokens of a load level's warm-up requests
LEVEL_WARMUP_TOKENS = 64


@dataclasses.dataclass
class _Progress:
    """A load level's streams' shared count (under their lock): the next request, the failed ones, the last end."""

    next: int = 0
    failed: int = 0
    end: float = 0.0


class ProcessSession:
    """A started server: measure prompts, then ``close()`` (idempotent; also a context manager)."""

    def __init__(self, runner: ProcessRunner, server: ServerProcess, info: LaunchInfo, config: TrialConfig) -> None:
        url = f"http://{url_host(runner.space.server.host)}:{server.port}"
        self.client = BenchmarkClient.for_space(runner.space, runner.backend, url, clock=runner.clock)
        self.server = server
        self.info = info
        self.config = config
        self.benchmark = runner.space.benchmark
        self.time_scale = runner.time_scale
        self.death_grace_s = runner.death_grace_s
        self.closed = False

    @property
    def port(self) -> int:
        return self.server.port

    def __enter__(self) -> ProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- measuring ----------------------------------------------------------------------------------

    def _scaled(self, r: PromptResult) -> PromptResult:
        k = self.time_scale
        if k == 1.0:
            return r
        return dataclasses.replace(r, seconds=r.seconds * k, ttft_s=None if r.ttft_s is None else r.ttft_s * k)

    def _measure(self, index: int, text: str) -> PromptResult:
        prompt = self.benchmark.prompt_at(index)
        return self._call(index, lambda: self._scaled(self.client.measure(index, text, request=prompt)))

    def _call(self, index: int, request: Callable[[], _T], *, track: bool = True) -> _T:
        """One request to the server; a failure of a server that has exited is ``ServerDied``. ``track``: note
        the server's descendants first (a load level's streams leave that to the level, once)."""
        if self.closed:
            raise BenchmarkError("the session is closed")
        if track:
            self.server.track()
        try:
            return request()
        except BenchmarkError as e:
            # a dying server closes its sockets a moment before its exit status is visible
            rc = self.server.wait(self.death_grace_s)
            if rc is not None:
                raise ServerDied(
                    f"server exited (return code {rc}) while measuring prompt {index}: {e}",
                    returncode=rc,
                    log_tail=self.server.log_tail(),
                ) from e
            raise
        except KeyboardInterrupt:
            self.close()
            raise

    def warmup(self) -> None:
        prompts = self.benchmark.prompts
        if not prompts:
            return
        for i in range(self.benchmark.warmup_requests):
            self._measure(i % len(prompts), prompts[i % len(prompts)].text)

    def run_prompt(self, index: int) -> PromptResult:
        return self._measure(index, self.benchmark.prompt_at(index).text)

    def run_level(self, level: int) -> LevelResult:
        """``level`` streams at once, each sending its next request when its last one ended: first ``level``
        warm-up requests (prompt 0, 64 tokens; none with ``warmup_requests`` 0), then the prompts cycled to
        max(prompts, 2 x level) requests. Token counts from the server's usage; the level's time runs from the
        first request sent to the last one's end (hardware seconds). A request that fails after its retries is
        counted in ``failed``; a server that exits is ``ServerDied``."""
        if self.benchmark.warmup_requests > 0 and self.benchmark.prompts:
            self._streams([0] * level, level, max_tokens=min(LEVEL_WARMUP_TOKENS, self.benchmark.max_tokens))
        indices = level_requests(level, len(self.benchmark.prompts))
        results, wall, failed = self._streams(indices, level)
        return LevelResult(level, tuple(self._scaled(r) for r in results), wall * self.time_scale, failed)

    def _streams(
        self, indices: list[int], streams: int, *, max_tokens: int | None = None
    ) -> tuple[list[PromptResult], float, int]:
        prompts = self.benchmark.prompts
        lock = threading.Lock()
        out: list[PromptResult | None] = [None] * len(indices)
        state = _Progress()
        died: list[BaseException] = []
        clock = self.client.clock

        def worker() -> None:
            while True:
                with lock:
                    k = state.next
                    if k >= len(indices) or died:
                        return
                    state.next = k + 1
                i = indices[k]
                try:
                    r = self._call(
                        i,
                        functools.partial(
                            self.client.measure,
                            i,
                            prompts[i].text,
                            max_tokens=max_tokens,
                            alone=streams == 1,
                            request=prompts[i],
                        ),
                        track=False,
                    )
                except ServerDied as e:
                    with lock:
                        died.append(e)
                    return
                except BenchmarkError:
                    with lock:
                        state.failed += 1
                    continue
                now = clock.now()
                with lock:
                    out[k] = r
                    state.end = max(state.end, now)

        self.server.track()
        t0 = clock.now()
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(streams, len(indices)))]
        for th in threads:
            th.start()
        # a bound on the whole level: every request's own limit, one after another per stream, plus retries
        per_stream = -(-len(indices) // max(len(threads), 1))
        limit = (self.client.request_timeout_s + 5.0) * per_stream * (self.client.retries + 1)
        try:
            for th in threads:
                th.join(max(limit - (clock.now() - t0), 0.0))
        except KeyboardInterrupt:
            self.close()
            raise
        if any(th.is_alive() for th in threads):
            raise BenchmarkError(f"a load level of {streams} streams did not finish within {limit:.0f} s")
        if died:
            raise died[0]
        results = [r for r in out if r is not None]
        if not results:
            raise BenchmarkError(f"every request of the load level of {streams} streams failed")
        return results, max(state.end - t0, 0.0), state.failed

    def reference(self, index: int, top_n: int) -> ReferenceOutput | None:
        prompt = self.benchmark.prompt_at(index)
        return self._call(index, lambda: self.client.reference(index, prompt.text, top_n, request=prompt))

    # -- stopping -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client, then stop the server (see ``ServerProcess.stop``); idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.client.close()
        finally:
            self.server.stop()

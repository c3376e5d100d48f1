"""``ProcessSession``: a started server process behind the ``Session`` seam (``autotune.runner``).

It measures prompts with its ``BenchmarkClient`` (wall seconds times ``time_scale`` = hardware seconds) and
``close()`` stops its ``ServerProcess``. A failed request of a server that has exited is ``ServerDied``; Ctrl-C
(KeyboardInterrupt) during a measurement stops the server before propagating.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from autotune.client import BenchmarkClient
from autotune.config import LaunchInfo, LevelResult, PromptResult, ReferenceOutput, TrialConfig, level_requests
from autotune.errors import BenchmarkError, ServerDied
from autotune.process.server import ServerProcess

if TYPE_CHECKING:
    from autotune.space import BenchmarkSpec

_T = TypeVar("_T")

#: max_tokens of a load level's warm-up requests
LEVEL_WARMUP_TOKENS = 64


@dataclass
class _Progress:
    """A load level's streams' shared count (under their lock): the next request, the failed ones, the last end."""

    next: int = 0
    failed: int = 0
    end: float = 0.0


class ProcessSession:
    """A started server: measure prompts, then ``close()`` (idempotent; also a context manager)."""

    def __init__(
        self,
        server: ServerProcess,
        client: BenchmarkClient,
        info: LaunchInfo,
        config: TrialConfig,
        *,
        benchmark: BenchmarkSpec,
        time_scale: float = 1.0,
        death_grace_s: float = 2.0,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive but got {time_scale}")
        self.server = server
        self.client = client
        self.info = info
        self.config = config
        self.benchmark = benchmark
        self.time_scale = float(time_scale)
        #: wall seconds to wait for the server's exit status after a failed request
        self.death_grace_s = float(death_grace_s)
        self.closed = False

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def returncode(self) -> int | None:
        return self.server.returncode

    @property
    def port_freed(self) -> bool | None:
        return self.server.port_freed

    def __enter__(self) -> ProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- measuring ----------------------------------------------------------------------------------

    def _scaled(self, r: PromptResult) -> PromptResult:
        k = self.time_scale
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
            positions=r.positions,
        )

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

    def _prompt_text(self, index: int) -> str:
        return self.benchmark.prompt_at(index).text

    def warmup(self) -> None:
        prompts = self.benchmark.prompts
        if not prompts:
            return
        for i in range(self.benchmark.warmup_requests):
            self._measure(i % len(prompts), prompts[i % len(prompts)].text)

    def run_prompt(self, index: int) -> PromptResult:
        return self._measure(index, self._prompt_text(index))

    def run_level(self, level: int) -> LevelResult:
        """``level`` streams at once, each sending its next request when its last one ended: first ``level``
        warm-up requests (prompt 0, 64 tokens; none with ``warmup_requests`` 0), then the prompts cycled to
        max(prompts, 2 x level) requests. Token counts from the server's usage; the level's time runs from the
        first request sent to the last one's end (hardware seconds). A request that fails after its retries is
        counted in ``failed``; a server that exits is ``ServerDied``."""
        if level < 1:
            raise ValueError(f"a load level must be at least 1 but got {level}")
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

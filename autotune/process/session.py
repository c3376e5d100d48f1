"""``ProcessSession``: a started server process behind the ``Session`` seam (``autotune.runner``).

It measures prompts with its ``BenchmarkClient`` (wall seconds times ``time_scale`` = hardware seconds) and
``close()`` stops its ``ServerProcess``. A failed request of a server that has exited is ``ServerDied``; Ctrl-C
(KeyboardInterrupt) during a measurement stops the server before propagating.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from autotune.client import BenchmarkClient
from autotune.config import LaunchInfo, PromptResult, ReferenceOutput, TrialConfig
from autotune.errors import BenchmarkError, ServerDied
from autotune.process.server import ServerProcess

if TYPE_CHECKING:
    from autotune.space import BenchmarkSpec

_T = TypeVar("_T")


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
        )

    def _measure(self, index: int, text: str) -> PromptResult:
        return self._call(index, lambda: self._scaled(self.client.measure(index, text)))

    def _call(self, index: int, request: Callable[[], _T]) -> _T:
        """One request to the server; a failure of a server that has exited is ``ServerDied``."""
        if self.closed:
            raise BenchmarkError("the session is closed")
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
        prompts = self.benchmark.prompts
        if not 0 <= index < len(prompts):
            raise IndexError(f"prompt index {index} outside 0..{len(prompts) - 1}")
        return prompts[index].text

    def warmup(self) -> None:
        prompts = self.benchmark.prompts
        if not prompts:
            return
        for i in range(self.benchmark.warmup_requests):
            self._measure(i % len(prompts), prompts[i % len(prompts)].text)

    def run_prompt(self, index: int) -> PromptResult:
        return self._measure(index, self._prompt_text(index))

    def reference(self, index: int, top_n: int) -> ReferenceOutput | None:
        text = self._prompt_text(index)
        return self._call(index, lambda: self.client.reference(index, text, top_n))

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

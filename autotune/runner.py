"""The one seam between the search loop and the world.

A ``Runner`` starts a server for a ``TrialConfig`` and returns a ``Session`` that measures prompts
one at a time (so the loop can prune between prompts) and stops the server when closed.

Implementations:
- ``autotune.process.ProcessRunner``: real server processes (SGLang, llama.cpp, vLLM, or the simulator
  started as ``python -m autotune.sim``), real HTTP, the real clock.
- ``autotune.sim.runner.ModelRunner``: the simulator's performance model in-process, on a
  ``VirtualClock`` (no processes, no sleeping); same argv parsing, same numbers, same noise model.
"""

from __future__ import annotations

from typing import Protocol

from autotune.config import LaunchInfo, LevelResult, PromptResult, ReferenceOutput, TrialConfig


class Session(Protocol):
    """What the study and ``autotune.measure`` call on a started server; nothing else is looked up on it."""

    info: LaunchInfo

    def warmup(self) -> None:
        """Send the space's warm-up requests (not measured)."""

    def run_prompt(self, index: int) -> PromptResult:
        """Measure prompt ``index`` of the space's fixed prompt set. Raises BenchmarkError/ServerDied."""

    def run_level(self, level: int) -> LevelResult:
        """Load level ``level``: that many concurrent streams over the prompt set on the same server, after its
        own warm-up. Raises BenchmarkError/ServerDied."""

    def reference(self, index: int, top_n: int) -> ReferenceOutput | None:
        """Prompt ``index`` once more, not timed, with the ``top_n`` most likely tokens at every position (the
        lossless check's reference). None when the server gives no log-probabilities."""

    def close(self) -> None:
        """Stop the server (and only what was started for it); idempotent."""


class Runner(Protocol):
    simulated: bool

    def launch(self, config: TrialConfig) -> Session:
        """Start a server for ``config`` and wait until healthy. Raises LaunchError subclasses."""

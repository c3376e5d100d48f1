"""The one seam between the search loop and the world: a runner and a clock, passed in, never monkeypatched.

Runners: ``autotune.process.ProcessRunner`` (real server processes, real HTTP, the real clock) and
``autotune.sim.runner.ModelRunner`` (the simulator's performance model in-process, on a ``VirtualClock`` that advances
only when told: thousands of trials with no sleeping).
"""

from __future__ import annotations

import time
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


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (origin arbitrary)."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that only moves when ``sleep``/``advance`` is called. ``charged`` keeps a ledger per category."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self.charged: dict[str, float] = {}

    def now(self) -> float:
        return self._t

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float, category: str = "other") -> None:
        if seconds < 0:
            raise ValueError(f"cannot advance a clock by a negative time ({seconds})")
        self._t += seconds
        self.charged[category] = self.charged.get(category, 0.0) + seconds


class ParallelClocks:
    """Virtual clocks of parallel workers (threads) on one timeline: a discrete-event simulation of GPU slots.

    Exactly one worker runs at a time: the one whose clock is the earliest (ties: the lower index), so the workers'
    reads and writes of a shared study happen in the order of their virtual times. A worker calls ``start(i)`` before
    its first step and ``done(i)`` at the end, and must not advance its clock while it holds a lock another worker
    may wait for.
    """

    def __init__(self, n: int, *, limit_s: float = 600.0) -> None:
        import threading

        self._cond = threading.Condition()
        self._clocks = [_SlotClock(self, i) for i in range(n)]
        self._active = set(range(n))
        self.limit_s = limit_s  # wall seconds one worker waits for its turn before giving up (a deadlock)

    def clock(self, i: int) -> VirtualClock:
        return self._clocks[i]

    def now(self) -> float:
        """The latest time any worker reached."""
        return max(c.now() for c in self._clocks)

    def start(self, i: int) -> None:
        with self._cond:
            self._wait_turn(i)

    def done(self, i: int) -> None:
        with self._cond:
            self._active.discard(i)
            self._cond.notify_all()

    def _earliest(self) -> int:
        return min(self._active, key=lambda j: (self._clocks[j].now(), j))

    def _wait_turn(self, i: int) -> None:
        if not self._cond.wait_for(lambda: self._earliest() == i, timeout=self.limit_s):
            raise TimeoutError(f"worker {i} waited {self.limit_s:g} s of wall time for its turn")

    def _advanced(self, i: int) -> None:
        with self._cond:
            self._cond.notify_all()
            if i in self._active:
                self._wait_turn(i)


class _SlotClock(VirtualClock):
    def __init__(self, timeline: ParallelClocks, index: int) -> None:
        super().__init__()
        self._timeline = timeline
        self._index = index

    def advance(self, seconds: float, category: str = "other") -> None:
        super().advance(seconds, category)
        self._timeline._advanced(self._index)

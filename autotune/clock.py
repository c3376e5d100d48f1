"""Clocks: the only source of time for the search loop and the runners.

``MonotonicClock`` is the real one; ``VirtualClock`` advances only when told, so a study on the
simulator's in-process model runs thousands of trials with no sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


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

"""Knobs a server takes in each request's body, not at launch (``Backend.per_request``).

Trials whose launches differ only in such knobs can share one server start: the server is launched with the
knobs at their shared launch values (``launch_config``), each request carries the trial's own values
(``body``), and each answer's telemetry says whether the server honoured them (``check``). A backend declares
this by returning a ``PerRequest`` from ``Backend.per_request(space)``; None (the default) means every trial
is its own start. Pure: no I/O here, the process runner sends and reads (``autotune.process.sharing``).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.config import EffectiveConfig


class Honoured(enum.StrEnum):
    """What one answer's telemetry says about the per-request values it was sent."""

    YES = "honoured"  # the counters are consistent with the values and would not be with the launch values
    CONSISTENT = "consistent"  # consistent with the values; the counters cannot tell them from the launch's
    NO = "ignored"  # the counters break a bound the values set: the server ran other values
    UNKNOWN = "unknown"  # no telemetry to judge by (nothing drafted, no counters)


@dataclass(frozen=True)
class Check:
    """The verdict on one answer, with the figures it was judged by (recorded on the trial)."""

    honoured: Honoured
    reason: str
    figures: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"honoured": self.honoured.value, "reason": self.reason, **dict(self.figures)}


class PerRequest(abc.ABC):
    """One backend's per-request knobs for one space."""

    #: the knob names (the backend's own) that go in the request body
    knobs: tuple[str, ...] = ()

    def applies(self, config: EffectiveConfig) -> bool:
        """Whether ``config`` takes its per-request knobs in the body (e.g. not the baseline)."""
        return not config.is_baseline

    def siblings(self, config: EffectiveConfig) -> list[EffectiveConfig]:
        """The space's configs that share ``config``'s start (same launch values; itself included). Default: none."""
        return []

    @abc.abstractmethod
    def launch_config(self, config: EffectiveConfig) -> EffectiveConfig:
        """``config`` with every per-request knob at its shared launch value: configs equal here share a start."""

    @abc.abstractmethod
    def body(self, config: EffectiveConfig) -> dict[str, Any]:
        """The request body entries that carry ``config``'s per-request values."""

    @abc.abstractmethod
    def probe_body(self, launch: EffectiveConfig) -> dict[str, Any] | None:
        """Entries for one verification request whose answer tells an honouring server from an ignoring one
        started with ``launch`` (None: no such request exists, e.g. nothing the counters could show)."""

    @abc.abstractmethod
    def telemetry(self, chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        """The counters an answer's last streamed chunks carry (None: none)."""

    @abc.abstractmethod
    def check(self, sent: Mapping[str, Any], launch: EffectiveConfig, telemetry: Mapping[str, Any] | None) -> Check:
        """Whether an answer to a request with body entries ``sent``, on a server started with ``launch``, ran
        the values sent."""


__all__ = ["Check", "Honoured", "PerRequest"]

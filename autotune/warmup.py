"""Warm-up (pure): how many untimed passes of the prompts a fresh server gets before the timed ones.

A server that builds its fast paths lazily is slower on its first requests: llama.cpp captures a CUDA graph the first
time it meets a batch shape, and speculative decoding's verify batches come in many shapes. On an H200 the first pass
with a draft model ran 8.2% under the next; after one untimed pass the timed one measured as warm, and more passes
did no better (docs/gpu-runs/2026-12-04-h200-warmup24). Servers that capture their graphs at start-up (SGLang, vLLM)
take none by default (``Backend.warmup_passes``); ``benchmark.warmup_passes`` overrides it.

The passes are measured like the timed ones and kept as evidence, but never enter a figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True)
class Rule:
    """How a start warms up: ``passes`` untimed passes of the prompts."""

    passes: int
    source: str  # where the rule comes from: "benchmark.warmup_passes" or "<server>'s default"

    @property
    def none(self) -> bool:
        return self.passes == 0

    def done(self, passes: Sequence[Sequence[float]]) -> bool:
        """Whether the passes so far end the warm-up."""
        return len(passes) >= self.passes


def resolve(value: int | None, server_default: int, server: str) -> Rule:
    """The rule from ``benchmark.warmup_passes`` (``value``) or, when it is not given, the server's default."""
    if value is None:
        return Rule(server_default, f"{server}'s default")
    return Rule(value, "benchmark.warmup_passes")


def shift(before: Sequence[float], after: Sequence[float]) -> float:
    """How much faster ``after`` ran than ``before``, prompt by prompt: exp(mean log(after_i / before_i)) - 1 over
    the prompts both measured (0 when none did)."""
    logs = [math.log(b / a) for a, b in zip(before, after, strict=False) if a > 0 and b > 0]
    return math.exp(sum(logs) / len(logs)) - 1.0 if logs else 0.0


class WarmUpJSON(TypedDict, total=False):
    """``WarmUp``'s stored form (a trial's user attr ``warmup``, a confirmation start's ``warmup``)."""

    tok_per_s: list[list[float]]
    seconds: float
    steady: bool | None


@dataclass(frozen=True)
class WarmUp:
    """What one start's warm-up passes measured: each pass's per-prompt tok/s and their seconds; ``steady``: None
    (kept in the record: a study recorded with warm-up ``auto``, since removed, has whether its last pass was
    within 1% of the one before)."""

    tok_per_s: tuple[tuple[float, ...], ...] = ()
    seconds: float = 0.0
    steady: bool | None = None

    @property
    def passes(self) -> int:
        return len(self.tok_per_s)

    @property
    def last_shift(self) -> float | None:
        """The last pass over the one before (None with fewer than two)."""
        return shift(self.tok_per_s[-2], self.tok_per_s[-1]) if self.passes >= 2 else None

    def to_dict(self) -> WarmUpJSON:
        return {"tok_per_s": [list(p) for p in self.tok_per_s], "seconds": self.seconds, "steady": self.steady}

    @classmethod
    def from_dict(cls, d: WarmUpJSON | None) -> WarmUp:
        d = d or {}
        return cls(
            tuple(tuple(float(x) for x in p) for p in d.get("tok_per_s") or ()),
            float(d.get("seconds") or 0.0),
            d.get("steady"),
        )


@dataclass(frozen=True)
class WarmUpSummary:
    """The study's warm-ups in a few figures (``summary``): starts, passes per start (median, most), seconds, the
    starts still rising at the end (recorded with ``auto``), and the median shift of the last pass and of the first
    pass after the first (how far below steady a start measured right after one pass would be)."""

    starts: int
    passes_median: int
    passes_max: int
    seconds: float
    not_steady: int
    first_shift_median: float | None
    last_shift_median: float | None

    @property
    def text(self) -> str:
        """One line for the report."""
        line = (
            f"{self.starts} starts warmed up with {self.passes_median} pass(es) of the prompts (median; at most "
            f"{self.passes_max}), {self.seconds:.0f} s in all"
        )
        if self.first_shift_median is not None:
            line += f"; the second pass ran {self.first_shift_median:+.1%} against the first"
        if self.last_shift_median is not None and self.passes_max > 2:
            line += f", the last {self.last_shift_median:+.1%} against the one before"
        if self.not_steady:
            line += f"; {self.not_steady} start(s) still rising after the most passes (measured all the same)"
        return line

    def to_dict(self) -> dict[str, object]:
        """The report's JSON: the figures and their line as ``text``."""
        return {**self.__dict__, "text": self.text}


def summary(warmups: Sequence[WarmUp]) -> WarmUpSummary | None:
    """The warm-ups' ``WarmUpSummary`` (None when no start warmed up with passes)."""
    ws = [w for w in warmups if w.passes]
    if not ws:
        return None
    passes = sorted(w.passes for w in ws)
    lasts = sorted(s for w in ws if (s := w.last_shift) is not None)
    firsts = sorted(shift(w.tok_per_s[0], w.tok_per_s[1]) for w in ws if w.passes >= 2)
    return WarmUpSummary(
        starts=len(ws),
        passes_median=passes[len(passes) // 2],
        passes_max=passes[-1],
        seconds=sum(w.seconds for w in ws),
        not_steady=sum(1 for w in ws if w.steady is False),
        first_shift_median=firsts[len(firsts) // 2] if firsts else None,
        last_shift_median=lasts[len(lasts) // 2] if lasts else None,
    )

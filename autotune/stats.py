"""Samples to statistics: paired speedups, confidence intervals, the prune rule and the verdict rule.

Everything here is pure. Speedups are analysed on the log scale (ratios are multiplicative; the log makes
them symmetric), and intervals are Student-t intervals of the mean log-ratio, mapped back with exp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st

VERDICTS = ("speculation-wins", "baseline-wins", "inconclusive")


def log_ratios(trial: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Paired log-ratios log(trial_i / baseline_i) over the pairs where both are positive."""
    out = []
    for t, b in zip(trial, baseline, strict=False):
        if t is None or b is None or t <= 0 or b <= 0 or math.isnan(t) or math.isnan(b):
            continue
        out.append(math.log(t / b))
    return out


@dataclass(frozen=True)
class Interval:
    """A speedup estimate: ``point`` with a two-sided ``confidence`` interval [low, high] (ratios, not logs)."""

    point: float
    low: float
    high: float
    n: int
    confidence: float

    def to_dict(self) -> dict[str, float]:
        return {"point": self.point, "low": self.low, "high": self.high, "n": self.n, "confidence": self.confidence}


def _t_quantile(q: float, df: int) -> float:
    return float(_st.t.ppf(q, df))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    m = sum(values) / n
    if n == 1:
        return m, float("nan")
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var)


def speedup_interval(logs: Sequence[float], confidence: float = 0.95) -> Interval:
    """Two-sided t-interval of the geometric-mean speedup from paired log-ratios (needs n >= 2)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
    n = len(logs)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 paired samples but got {n}")
    m, sd = mean_sd(logs)
    half = _t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(point=math.exp(m), low=math.exp(m - half), high=math.exp(m + half), n=n, confidence=confidence)


#: default sd of the log speedup between server starts (see ``PruningSpec.start_noise``)
START_NOISE = 0.035


def upper_bound(logs: Sequence[float], confidence: float, start_noise: float = START_NOISE) -> float:
    """One-sided upper confidence bound of the geometric-mean speedup (a ratio) of one trial start over one
    baseline start. The prompts of one start share that start's speed, so the spread between prompts cannot show
    the start-to-start noise: it is added as ``start_noise`` (sd of the log ratio), or the bound would be too
    tight and good configs would be pruned on an unlucky start (measured: scripts/bench_search.py)."""
    n = len(logs)
    if n < 2:
        return math.inf
    m, sd = mean_sd(logs)
    return math.exp(m + _t_quantile(confidence, n - 1) * math.sqrt(sd * sd / n + start_noise**2))


@dataclass(frozen=True)
class PruneDecision:
    prune: bool
    upper_bound: float
    n: int
    reason: str


def prune_decision(
    trial: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float,
    min_prompts: int,
    start_noise: float = START_NOISE,
) -> PruneDecision:
    """Prune once the one-sided upper confidence bound of the paired speedup falls below 1.

    ``trial`` and ``baseline`` are per-prompt tok/s for the same prompts in the same order.
    """
    logs = log_ratios(trial, baseline)
    n = len(logs)
    if n < max(2, min_prompts):
        return PruneDecision(False, math.inf, n, f"only {n} paired prompts (need {max(2, min_prompts)})")
    ub = upper_bound(logs, confidence, start_noise)
    if ub < 1.0:
        return PruneDecision(
            True,
            ub,
            n,
            f"upper {confidence:.0%} bound of the speedup over the baseline is {ub:.3f} < 1 after {n} prompts",
        )
    return PruneDecision(False, ub, n, f"upper bound {ub:.3f} >= 1 after {n} prompts")


def verdict(interval: Interval | None, min_gain: float) -> str:
    """speculation-wins when the interval's low end clears 1 + min_gain; baseline-wins when its high end is
    below 1; otherwise inconclusive. No interval (nothing to confirm) is baseline-wins."""
    if interval is None:
        return "baseline-wins"
    if interval.low > 1.0 + min_gain:
        return "speculation-wins"
    if interval.high < 1.0:
        return "baseline-wins"
    return "inconclusive"

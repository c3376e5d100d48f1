"""Samples to statistics: paired speedups, confidence intervals, upper bounds, the pooled prompt spread.

Everything here is pure; the rules built on it (prune, verdict) are in ``autotune.verdict``. Speedups are
analysed on the log scale (ratios are multiplicative; the log makes them symmetric), and intervals are Student-t
intervals of the mean log-ratio, mapped back with exp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st


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


def two_sided_t(confidence: float, df: int) -> float:
    """The multiplier of a two-sided ``confidence`` t-interval with ``df`` degrees of freedom."""
    return _t_quantile(0.5 + confidence / 2, df)


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


@dataclass(frozen=True)
class Spread:
    """A pooled estimate of the sd of per-prompt log ratios around their trial's mean: ``sd`` with ``df``
    degrees of freedom. The spread is a property of the prompt set and the server, shared by the configs of a
    study, so every measured trial adds to it (``pooled_spread``)."""

    sd: float
    df: float

    def __post_init__(self) -> None:
        if self.sd < 0 or math.isnan(self.sd):
            raise ValueError(f"spread sd must be at least 0 but got {self.sd}")
        if self.df < 0:
            raise ValueError(f"spread df must be at least 0 but got {self.df}")


#: the spread a study starts from, before it has measured anything: a per-prompt sd of 0.25 in the log (prompts
#: of one trial 25% apart, wider than any measured landscape: Kimi's prompts spread ~10%, the H200 run's ~5%)
#: worth 3 degrees of freedom, so the first trials are judged conservatively and the study's own data take over
PRIOR_SPREAD = Spread(sd=0.25, df=3.0)


def pooled_spread(groups: Sequence[Sequence[float]], prior: Spread | None = PRIOR_SPREAD) -> Spread | None:
    """The pooled within-group sd of ``groups`` (each: one trial's per-prompt log ratios), with ``prior`` as
    ``prior.df`` pseudo-observations (the conjugate normal model's scaled inverse chi-square prior on the
    variance). None when there is neither a prior nor a group of two or more values."""
    ss = 0.0 if prior is None else prior.df * prior.sd**2
    df = 0.0 if prior is None else prior.df
    for g in groups:
        if len(g) < 2:
            continue
        m = sum(g) / len(g)
        ss += sum((x - m) ** 2 for x in g)
        df += len(g) - 1
    if df <= 0:
        return None
    return Spread(sd=math.sqrt(ss / df), df=df)


def upper_bound(
    logs: Sequence[float], confidence: float, start_noise: float = START_NOISE, spread: Spread | None = None
) -> float:
    """One-sided upper confidence bound of the geometric-mean speedup (a ratio) of one trial start over one
    reference start (its baseline, or the leader). The prompts of one start share that start's speed, so the
    spread between prompts cannot show the start-to-start noise: it is added as ``start_noise`` (sd of the log
    ratio), or the bound would be too tight and good configs would be pruned on an unlucky start (measured:
    scripts/bench_search.py).

    Without ``spread`` the sd is the trial's own, with n - 1 degrees of freedom (two prompts: t = 6.3). With the
    study's pooled ``spread`` (from other trials), the trial's own prompts join the pool; the sd used is the
    pool's or the trial's own, whichever is larger (a config whose prompts differ more than the study's is
    judged by its own), with the pool's degrees of freedom, so two prompts already give a usable bound."""
    n = len(logs)
    if n < 2:
        return math.inf
    m, sd = mean_sd(logs)
    df: float = n - 1
    if spread is not None and spread.df > 0:
        total_df = spread.df + n - 1
        pooled = math.sqrt((spread.df * spread.sd**2 + (n - 1) * sd * sd) / total_df)
        sd, df = max(pooled, sd), total_df
    return math.exp(m + float(_st.t.ppf(confidence, df)) * math.sqrt(sd * sd / n + start_noise**2))

"""Samples to statistics: paired speedups, confidence intervals, upper bounds, the pooled prompt spread.

Everything here is pure; the rules built on it (prune, verdict) are in ``autotune.verdict``. Speedups are
analysed on the log scale (ratios are multiplicative; the log makes them symmetric), and intervals are Student-t
intervals of the mean log-ratio, mapped back with exp.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# the Student-t quantile from scipy.special (what scipy.stats.t.ppf calls; identical values): importing scipy.stats
# costs ~0.5 s a process on 2 cores (~1.3 s under load), paid by every CLI command and test subprocess that reads a
# study, scipy.special ~0.1 s
from scipy.special import stdtrit as _stdtrit


def log_ratios(trial: Sequence[float | None], baseline: Sequence[float | None]) -> list[float]:
    """Paired log-ratios log(trial_i / baseline_i) over the pairs where both are positive (None: not measured)."""
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
    #: the t-quantile's degrees of freedom (n - 1 without a prior on the spread; ``speedup_interval``)
    df: float | None = None

    def to_dict(self) -> dict[str, float]:
        out = {"point": self.point, "low": self.low, "high": self.high, "n": self.n, "confidence": self.confidence}
        if self.df is not None:
            out["df"] = self.df
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, float]) -> Interval:
        df = d.get("df")
        return cls(d["point"], d["low"], d["high"], int(d["n"]), d["confidence"], df)

    @property
    def sd(self) -> float:
        """The sd of one paired log ratio the interval was built on (its half-width taken back through t)."""
        df = self.df if self.df is not None else self.n - 1
        return (
            (math.log(self.high) - math.log(self.point)) * math.sqrt(self.n) / t_quantile(0.5 + self.confidence / 2, df)
        )


def interval_text(ci: Interval | Mapping[str, float] | None, digits: int = 3) -> str:
    """``1.234 [1.100, 1.380]``: a typed interval, or one as a JSON section holds it; ``-`` for none."""
    d = ci.to_dict() if isinstance(ci, Interval) else ci
    return f"{d['point']:.{digits}f} [{d['low']:.{digits}f}, {d['high']:.{digits}f}]" if d else "-"


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf(q, df)``)."""
    return float(_stdtrit(df, q))


def two_sided_t(confidence: float, df: float) -> float:
    """The multiplier of a two-sided ``confidence`` t-interval with ``df`` degrees of freedom."""
    return t_quantile(0.5 + confidence / 2, df)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    m = sum(values) / n
    if n == 1:
        return m, float("nan")
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var)


def speedup_interval(logs: Sequence[float], confidence: float = 0.95, prior: Spread | None = None) -> Interval:
    """Two-sided t-interval of the geometric-mean speedup from paired log-ratios (needs n >= 2).

    Without ``prior`` the sd is the sample's own with n - 1 degrees of freedom. With ``prior`` (what the spread
    of one paired log ratio is known to be, worth ``prior.df`` observations: ``start_prior``) the sd is the
    pooled one of the conjugate normal model (``pooled_spread``) with ``prior.df + n - 1`` degrees of freedom: a
    few rounds that happen to agree closely cannot make the interval much narrower than the start-to-start
    noise allows, and many rounds outweigh the prior."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
    n = len(logs)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 paired samples but got {n}")
    m, sd = mean_sd(logs)
    df: float = n - 1
    if prior is not None and prior.df > 0:
        pooled = pooled_spread([logs], prior)
        assert pooled is not None
        sd, df = pooled.sd, pooled.df
    half = t_quantile(0.5 + confidence / 2, df) * sd / math.sqrt(n)
    return Interval(
        point=math.exp(m),
        low=math.exp(m - half),
        high=math.exp(m + half),
        n=n,
        confidence=confidence,
        df=df if prior is not None and prior.df > 0 else None,
    )


def two_sample_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """Two-sided Welch t-interval of exp(mean(a) - mean(b)) from two independent samples of logs (each n >= 2):
    the ratio of two geometric means when nothing pairs the samples (e.g. two sets of prompts on one server).
    ``n`` is the smaller sample's size, ``df`` Welch-Satterthwaite's."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a two-sample interval needs at least 2 values in each sample but got {len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    half = t_quantile(0.5 + confidence / 2, df) * se
    d = ma - mb
    return Interval(
        point=math.exp(d),
        low=math.exp(d - half),
        high=math.exp(d + half),
        n=min(len(a), len(b)),
        confidence=confidence,
        df=df,
    )


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Two-sided t-interval of the arithmetic mean of ``values`` (n >= 2): for figures that may be 0 (accepted
    draft tokens per round), where a geometric mean cannot be taken."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values but got {len(values)}")
    m, sd = mean_sd(values)
    half = t_quantile(0.5 + confidence / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return Interval(point=m, low=m - half, high=m + half, n=len(values), confidence=confidence)


def ratio_of_means_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """Two-sided interval of mean(a) / mean(b) from two independent samples (each n >= 2, both means positive):
    the delta method on the log of the ratio, se^2 = var(a) / (n_a mean(a)^2) + var(b) / (n_b mean(b)^2), with
    Welch-Satterthwaite's degrees of freedom on those two terms; mapped back with exp (so it stays positive).
    ``n`` is the smaller sample's size."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a two-sample interval needs at least 2 values in each sample but got {len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    if ma <= 0 or mb <= 0:
        raise ValueError(f"a ratio of means needs both means positive but got {ma} and {mb}")
    va, vb = sa * sa / (len(a) * ma * ma), sb * sb / (len(b) * mb * mb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    half = t_quantile(0.5 + confidence / 2, df) * se
    r = ma / mb
    return Interval(
        point=r, low=r * math.exp(-half), high=r * math.exp(half), n=min(len(a), len(b)), confidence=confidence, df=df
    )


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


#: degrees of freedom of the start-to-start noise as a prior on the spread of paired log ratios between server
#: starts (``start_prior``): worth three rounds
START_PRIOR_DF = 3.0


#: ``rounds_to_settle`` says "more than this" instead of a number: a gap this small is not worth settling
SETTLE_MOST_ROUNDS = 100


def rounds_to_settle(
    sd: float,
    point: float,
    bar: float,
    confidence: float,
    prior_df: float = START_PRIOR_DF,
    most: int = SETTLE_MOST_ROUNDS,
) -> int | None:
    """How many fresh rounds (a start of the config and one of its baseline each, one look at ``confidence``) would
    put a speedup's interval wholly on one side of ``bar``, if its point estimate stays at ``point`` and one round's
    paired log ratio spreads by ``sd`` (with ``prior_df`` degrees of freedom of the start prior pooled in, as
    ``speedup_interval`` does): the smallest n >= 2 with t(confidence, prior_df + n - 1) * sd / sqrt(n) under
    |log bar - log point|. None when more than ``most`` would be needed (a point about on the bar is not settled
    by rounds). What an inconclusive verdict would cost to settle (``confirm``; the report says it)."""
    if not (sd >= 0 and point > 0 and bar > 0 and 0 < confidence < 1 and most >= 2):
        raise ValueError(
            "rounds_to_settle needs sd >= 0, point and bar > 0, confidence in (0, 1) and most >= 2 "
            f"(got {sd}, {point}, {bar}, {confidence}, {most})"
        )
    gap = abs(math.log(bar) - math.log(point))
    if gap == 0:
        return None
    for n in range(2, most + 1):
        if two_sided_t(confidence, prior_df + n - 1) * sd / math.sqrt(n) < gap:
            return n
    return None


def start_prior(start_noise: float = START_NOISE) -> Spread:
    """The start-to-start noise (``pruning.start_noise``: the sd of the log speedup of one server start over
    another) as a prior on the spread of rounds of fresh starts, worth ``START_PRIOR_DF`` rounds. Three rounds
    whose ratios agree to 0.8% when starts differ by 3.5% are luck, not precision: on the field report's case such
    a start gave a 1.004x config the interval [1.03, 1.07] and a false winner (scripts/bench_search.py, kimi)."""
    return Spread(sd=start_noise, df=START_PRIOR_DF)


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
    return math.exp(m + t_quantile(confidence, df) * math.sqrt(sd * sd / n + start_noise**2))

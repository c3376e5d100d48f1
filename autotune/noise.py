"""Where a start's noise comes from, and how many passes of the prompts a start should measure (pure).

A start's tok/s differs from another start's of the same config for two reasons: the server start itself (a
per-start factor that every prompt on that server shares: memory placement, clocks, kernel choices) and each
request (the time one prompt takes, which a second pass of the prompts on the same server draws again). Only the
second averages out over more passes on one server; the first only over more starts. With ``s`` the start-to-start
sd of log tok/s, ``r`` one request's sd, ``P`` prompts, ``k`` passes of them per start, ``C`` a start's cost (start-up
and warm-up) and ``c`` one pass's: a start's log tok/s varies by ``s^2 + r^2 / (P k)`` and costs ``C + k c``, and the
product (GPU time to a given precision, ``n`` starts each) is least at ``k* = sqrt(r^2 / P / s^2 * C / c)``: the
classic two-stage sample size. Slow starts and noisy requests (sampling at a temperature, a shared node) call for
more passes; on a small model that starts in seconds, or with temperature-0 requests that repeat to 0.1%, one.

``split`` estimates ``s`` and ``r`` from starts of the same configs over the same prompts (a two-way layout, start x
prompt): the prompts' own speeds are taken out, what is left between starts is ``s`` (with ``r`` removed), what is
left within a start is ``r`` (with any start x prompt interaction, which passes cannot average: so it is an upper
bound of ``r``), unless starts measured with two or more passes show ``r`` itself (the spread of one prompt's
passes on one server). ``passes_for`` chooses ``k``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: most passes of the prompt set one start measures (a start with more is mostly prompts)
MAX_PASSES = 4

#: starts of one config needed before its spread counts (two starts: one degree of freedom between them)
MIN_STARTS = 2

#: degrees of freedom between starts, pooled over configs, before ``passes_for`` departs from one pass: a split from
#: two rounds of one config is not worth a change
MIN_START_DF = 2

#: the start-to-start sd below which starts count as identical (``passes_for`` would otherwise divide by it)
START_SD_FLOOR = 0.002

#: one start's measurement: its passes, each the per-prompt tok/s of the prompt set in order
Start = Sequence[Sequence[float]]


@dataclass(frozen=True)
class NoiseSplit:
    """The start-to-start sd of log tok/s (``start_sd``, with ``start_df`` degrees of freedom) and one request's
    (``request_sd``, ``request_df``; ``repeat`` says whether it comes from repeated passes on one server or is the
    within-start residual, an upper bound), over ``prompts`` prompts."""

    start_sd: float
    start_df: int
    request_sd: float
    request_df: int
    prompts: int
    repeat: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _logs(p: Sequence[float]) -> list[float] | None:
    if not p or any(not (x > 0 and math.isfinite(x)) for x in p):
        return None
    return [math.log(x) for x in p]


def split(configs: Sequence[Sequence[Start]]) -> NoiseSplit | None:
    """The noise split over ``configs`` (each: its starts, each its passes of per-prompt tok/s over one prompt set),
    or None when no config has ``MIN_STARTS`` starts of the same prompt count, or no prompt set has two prompts.
    The between-start figure is from each start's first pass (every start has one); ``repeat`` is from starts
    with two or more passes."""
    ss_start = ss_resid = ss_rep = 0.0
    df_start = df_resid = df_rep = 0
    prompts = 0
    for starts in configs:
        firsts = [_logs(s[0]) for s in starts if s]
        firsts = [f for f in firsts if f is not None]
        if not firsts:
            continue
        p = len(firsts[0])
        rows = [f for f in firsts if len(f) == p]
        if len(rows) < MIN_STARTS or p < 2:
            continue
        prompts = max(prompts, p)
        j = len(rows)
        grand = sum(map(sum, rows)) / (j * p)
        row_m = [sum(r) / p for r in rows]
        col_m = [sum(r[i] for r in rows) / j for i in range(p)]
        ss_start += p * sum((m - grand) ** 2 for m in row_m)
        ss_resid += sum((rows[a][i] - row_m[a] - col_m[i] + grand) ** 2 for a in range(j) for i in range(p))
        df_start += j - 1
        df_resid += (j - 1) * (p - 1)
        for s in starts:  # repeated passes on one server: each prompt's spread over them
            passes = [x for x in (_logs(q) for q in s) if x is not None and len(x) == p]
            if len(passes) < 2:
                continue
            for i in range(p):
                v = [q[i] for q in passes]
                m = sum(v) / len(v)
                ss_rep += sum((x - m) ** 2 for x in v)
                df_rep += len(v) - 1
    if df_start == 0 or df_resid == 0:
        return None
    ms_resid = ss_resid / df_resid
    ms_start = ss_start / df_start
    start_var = max(0.0, (ms_start - ms_resid) / prompts)
    if df_rep > 0:
        return NoiseSplit(math.sqrt(start_var), df_start, math.sqrt(ss_rep / df_rep), df_rep, prompts, True)
    return NoiseSplit(math.sqrt(start_var), df_start, math.sqrt(ms_resid), df_resid, prompts, False)


def _start_var(noise: NoiseSplit, prior: tuple[float, float] | None) -> float:
    """The start-to-start variance, pooled with ``prior`` (an sd and its degrees of freedom) where given."""
    var, df = noise.start_sd**2 * noise.start_df, float(noise.start_df)
    if prior is not None:
        var, df = var + prior[0] ** 2 * prior[1], df + prior[1]
    return var / df


@dataclass(frozen=True)
class Passes:
    """How many passes of the prompts each start should measure, and why (``text``)."""

    passes: int
    optimum: float  # the unrounded k*
    text: str
    head: str = ""  # the split and the costs in words (``text`` without its conclusion)


def passes_for(
    noise: NoiseSplit | None,
    start_s: float,
    pass_s: float,
    most: int = MAX_PASSES,
    now: int = 1,
    prior: tuple[float, float] | None = None,
) -> Passes:
    """The passes per start that reach a given precision at the least GPU time (the module's ``k*``, rounded, at
    least 1 and at most ``most``): ``start_s`` a start's seconds before its first prompt (start-up and warm-up),
    ``pass_s`` one pass's. ``now`` (the passes measured so far) is kept while the split is not worth a change
    (fewer than ``MIN_START_DF`` degrees of freedom between starts, or no cost measured). ``prior`` (an sd between
    starts and its degrees of freedom: the space's start-to-start noise) is pooled with the measured one, so that
    a few starts that happen to agree do not buy passes: a wrong choice costs GPU time, never the verdict's
    validity (its interval is over starts)."""
    if most < 1 or now < 1:
        raise ValueError(f"passes_for needs most >= 1 and now >= 1 but got {most} and {now}")
    if noise is None or noise.start_df < MIN_START_DF or not (start_s >= 0 and pass_s > 0):
        return Passes(now, float(now), "not enough repeated starts yet to tell where the noise is")
    s = max(math.sqrt(_start_var(noise, prior)), START_SD_FLOOR)
    per_pass = noise.request_sd / math.sqrt(noise.prompts)
    k_star = per_pass / s * math.sqrt(start_s / pass_s)
    best = max(1, int(math.floor(k_star + 0.5)))
    k = min(most, best)
    which = "repeated passes" if noise.repeat else "the prompts' residual (an upper bound)"
    pooled = "" if prior is None else f" ({s:.1%} with the prior)"
    head = (
        f"between starts {noise.start_sd:.1%}{pooled}, per request {noise.request_sd:.1%} (from {which}); one "
        f"pass of {noise.prompts} prompts {per_pass:.1%}; a start costs {start_s:.0f} s, a pass {pass_s:.0f} s"
    )
    if best == 1:
        return Passes(1, k_star, f"{head}: one pass per start is cheapest (more starts, not more prompts)", head)
    if k == best:
        return Passes(k, k_star, f"{head}: {k} passes per start reach the same precision for less GPU time", head)
    return Passes(k, k_star, f"{head}: {best} passes per start would be cheapest; the policy allows {most}", head)


def start_variance(noise: NoiseSplit | None, passes: float, prior: tuple[float, float] | None = None) -> float | None:
    """One start's variance of log tok/s at ``passes`` passes of the prompts (the between-start sd pooled with
    ``prior`` as ``passes_for`` does); None without a split."""
    if noise is None:
        return None
    return _start_var(noise, prior) + noise.request_sd**2 / (noise.prompts * passes)


def shrink(
    noise: NoiseSplit | None, passes: int, so_far: Sequence[int], prior: tuple[float, float] | None = None
) -> float:
    """The variance of a round to come at ``passes`` passes over the mean variance of the rounds so far (their
    passes ``so_far``): below 1 when the coming rounds measure more passes. 1 without a split or rounds."""
    now = start_variance(noise, passes, prior)
    if now is None or not so_far:
        return 1.0
    before = sum(start_variance(noise, k, prior) or 0.0 for k in so_far) / len(so_far)
    return now / before if before > 0 else 1.0


__all__ = [
    "MAX_PASSES",
    "MIN_START_DF",
    "MIN_STARTS",
    "NoiseSplit",
    "Passes",
    "passes_for",
    "shrink",
    "split",
    "start_variance",
]

"""The baseline check, pure over the recorded rounds: did the search's single baseline start run at the speed of
confirmation's fresh baseline starts of the same CUDA-graph setting?

The search measures each baseline once, at its first start, and every search decision rests on it: the speedups it
shows, the baseline rule's prunes, which configs are worth confirming. On a real GPU one start can be off by 10%
or more. Confirmation's verdict does not depend on it (each round pairs a candidate with a fresh baseline), but the
search's figures do:

- search baseline **slow** (fresh ones faster): the search's speedups were too high and its pruning lenient (time
  lost, nothing missed); the check says so.
- search baseline **fast** (fresh ones slower): the search's speedups were too low, so a config pruned by the
  baseline rule may have been a winner. The trials so pruned whose upper bound, corrected by the check's ratio,
  reaches 1 are *suspect*: the verdict cannot be "the baseline wins" while one is left (``apply``).

The search's start counts as one more draw of the fresh starts' distribution: it is flagged when it falls outside
the ``confidence`` prediction interval of the fresh starts. Their spread is pooled with the space's
``pruning.start_noise`` (the start-to-start noise the pruner already allows for) as a prior worth 3 degrees of
freedom (``stats.start_prior``, as confirmation's intervals), so that two fresh starts are enough to catch a
start that is off by 10% or more.

When the search left nothing to confirm (every config clearly slower than its baseline), confirmation measures
``CHECK_ROUNDS`` fresh baselines alone before it says "the baseline wins"; if the search's baseline ran fast, the
configs it made look slow are confirmed against the fresh ones (``autotune.study.confirm``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping

from autotune.records import BaselineCheck, Round, SuspectPrune
from autotune.stats import pooled_spread, start_prior, t_quantile
from autotune.verdict import clearly_loses

#: fresh baseline starts measured when nothing is left to confirm
CHECK_ROUNDS = 2


def check(
    rounds: list[Round], search: Mapping[bool, float], *, confidence: float, start_noise: float
) -> list[BaselineCheck]:
    """Per CUDA-graph setting with a search baseline and two or more fresh ones: the fresh starts' geometric mean
    against the search's value and whether it is flagged."""
    out = []
    for cg, value in sorted(search.items()):
        fresh = [float(r.baseline[cg]) for r in rounds if r.baseline.get(cg)]
        if len(fresh) < 2 or not value or value <= 0:
            continue
        logs = [math.log(f / value) for f in fresh]
        n = len(logs)
        mean = statistics.fmean(logs)
        spread = pooled_spread([logs], start_prior(start_noise))
        assert spread is not None
        limit = t_quantile(0.5 + confidence / 2, spread.df) * spread.sd * math.sqrt(1 + 1 / n)
        geomean = float(math.exp(statistics.fmean(math.log(f) for f in fresh)))
        flagged = abs(mean) > limit
        out.append(
            BaselineCheck(str(cg), float(value), geomean, tuple(fresh), math.exp(mean), math.exp(limit), flagged)
        )
    return out


def fast(checks: list[BaselineCheck]) -> dict[str, float]:
    """``{cuda_graph: ratio}`` of the settings whose search baseline was flagged as fast (ratio below 1)."""
    return {c.cuda_graph: float(c.ratio) for c in checks if c.flagged and c.ratio < 1.0}


def suspects(checks: list[BaselineCheck], pruned: list[SuspectPrune]) -> list[SuspectPrune]:
    """The trials pruned by the baseline rule, under a setting whose search baseline was flagged as *fast*, whose
    upper bound corrected by the check's ratio (the fresh baselines' speed over the search's) is at least 1."""
    ratios = fast(checks)
    out = []
    for p in pruned:
        ratio = ratios.get(p.cuda_graph)
        if ratio is None or p.speedup_upper is None:
            continue
        corrected = float(p.speedup_upper) / ratio
        if not clearly_loses(corrected):
            out.append(dataclasses.replace(p, corrected_upper=corrected))
    return out


def text(c: BaselineCheck) -> str:
    """One line for the report and the live view."""
    graphs = {"True": "graphs on", "False": "graphs off"}.get(c.cuda_graph, c.cuda_graph)
    head = (
        f"baseline check ({graphs}): the search's baseline ran {c.search_tok_per_s:.1f} tok/s, confirmation's "
        f"{len(c.fresh)} fresh starts {c.fresh_tok_per_s:.1f} ({c.ratio - 1:+.1%})"
    )
    if not c.flagged:
        return f"{head}: within the start-to-start noise"
    if c.ratio > 1.0:
        return (
            f"{head}: the search's baseline start was slow, so the search's speedups are about "
            f"{c.ratio - 1:.0%} too high (pruning was lenient; the verdict rests on confirmation's paired rounds)"
        )
    return (
        f"{head}: the search's baseline start was fast, so the search's speedups are about {1 - c.ratio:.0%} "
        f"too low and configs pruned against it may have been winners"
    )

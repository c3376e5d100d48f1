"""The study's objective under load: pure functions over per-level figures.

With ``benchmark.concurrency`` [1] (the default) the objective is tok/s over the prompt set, as always. With more
levels it is the weighted geometric mean of the levels' aggregate tok/s (``objective.weights``, equal without
them): for two configs under the same CUDA-graph setting the ratio of their objectives is the weighted geometric
mean of their paired per-level speedups, so the search, the surrogate, confirmation and the verdict keep working
on one number per start.

Pruning steps: prompt ``i`` at level index ``li`` is step ``li * n_prompts + i`` (level 1's steps are the prompt
indices, as without levels); the value at a step is that prompt's per-stream tok/s at that level.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.stats import _t_quantile, log_ratios, mean_sd
from autotune.verdict import PruneDecision, clearly_loses

#: an unmeasured (higher) level is assumed to gain at most this much more (log ratio) than the best upper bound
#: of the levels measured so far: speculation's gain shrinks with load on dense targets, but can come back a
#: little on MoE targets once every expert is read anyway (the simulator's Kimi scenario)
UNMEASURED_SLACK = math.log(1.10)


def step_of(level_index: int, prompt: int, n_prompts: int) -> int:
    return level_index * n_prompts + prompt


def level_of_step(step: int, n_prompts: int) -> tuple[int, int]:
    """(level index, prompt index) of a pruning step."""
    return divmod(step, n_prompts)


def weighted_value(level_tok_per_s: Mapping[int, float], weights: Mapping[int, float]) -> float:
    """The weighted geometric mean of the levels' tok/s (levels with weight 0 do not count); 0 if any weighted level
    produced nothing."""
    total = 0.0
    for level, w in weights.items():
        if w <= 0:
            continue
        v = level_tok_per_s.get(level)
        if v is None or v <= 0:
            return 0.0
        total += w * math.log(v)
    return math.exp(total)


def speedups(trial: Mapping[int, float], baseline: Mapping[int, float]) -> dict[int, float]:
    """Per-level aggregate speedups over the levels both have."""
    return {c: trial[c] / baseline[c] for c in trial if c in baseline and baseline[c] > 0 and trial[c] > 0}


def slo_broken(summary: Mapping[str, Any], slo: Any) -> list[str]:
    """Which limits of ``slo`` (``SloSpec``) a level's summary breaks, as 'itl_p99_ms 71.2 > 60'."""
    out = []
    for key in ("itl_p99_ms", "ttft_p99_ms"):
        limit = getattr(slo, key, None)
        v = summary.get(key)
        if limit is not None and v is not None and v > limit:
            out.append(f"{key} {v:.1f} > {limit:g}")
    return out


def prune_decision(
    trial: Mapping[int, float],
    baseline: Mapping[int, float],
    *,
    levels: Sequence[int],
    weights: Mapping[int, float],
    n_prompts: int,
    confidence: float,
    min_prompts: int,
    start_noise: float,
) -> PruneDecision:
    """Prune once the one-sided upper confidence bound of the objective's speedup falls below 1.

    ``trial`` / ``baseline``: intermediate values by step. Per measured level the mean paired log ratio and its
    variance; a weighted level not measured yet is bounded by the largest upper bound measured so far plus
    ``UNMEASURED_SLACK``. The start-to-start noise is added once (one start's levels share it)."""
    need = max(2, min_prompts)
    by_level: dict[int, list[float]] = {}
    for step in sorted(trial):
        if step not in baseline:
            continue
        li, _ = level_of_step(step, n_prompts)
        if li < len(levels):
            by_level.setdefault(levels[li], []).extend(log_ratios([trial[step]], [baseline[step]]))
    measured = {c: v for c, v in by_level.items() if len(v) >= need}
    if not measured:
        n = max((len(v) for v in by_level.values()), default=0)
        return PruneDecision(False, math.inf, n, f"only {n} paired prompts (need {need})")
    q = _t_quantile(confidence, max(min(len(v) for v in measured.values()) - 1, 1))
    mean = 0.0
    var = start_noise**2
    best_upper = -math.inf
    for c, logs in measured.items():
        m, sd = mean_sd(logs)
        se2 = sd * sd / len(logs)
        best_upper = max(best_upper, m + q * math.sqrt(se2 + start_noise**2))
        w = weights.get(c, 0.0)
        mean += w * m
        var += w * w * se2
    for c in levels:
        if c not in measured:
            mean += weights.get(c, 0.0) * (best_upper + UNMEASURED_SLACK)
    ub = math.exp(mean + q * math.sqrt(var))
    n = sum(len(v) for v in measured.values())
    where = ", ".join(str(c) for c in sorted(measured))
    if clearly_loses(ub):
        return PruneDecision(
            True,
            ub,
            n,
            f"upper {confidence:.0%} bound of the objective's speedup over the baseline is {ub:.3f} < 1 "
            f"(levels {where} measured)",
        )
    return PruneDecision(False, ub, n, f"objective upper bound {ub:.3f} >= 1 (levels {where} measured)")

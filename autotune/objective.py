"""The study's objective under load: pure functions over per-level figures.

With ``benchmark.concurrency`` [1] (the default) the objective is tok/s over the prompt set, as always. With more
levels it is the weighted geometric mean of the levels' aggregate tok/s (``objective.weights``, equal without
them): for two configs under the same CUDA-graph setting the ratio of their objectives is the weighted geometric
mean of their paired per-level speedups, so the search, the surrogate, confirmation and the verdict keep working
on one number per start.

Pruning steps: prompt ``i`` at level index ``li`` is step ``li * n_prompts + i`` (level 1's steps are the prompt
indices, as without levels); the value at a step is that prompt's per-stream tok/s at that level.

Prompt categories (``objective.weights`` naming ``benchmark.prompts[].category``, one stream only): the objective is
the weighted geometric mean of the categories' aggregate tok/s (each category's tokens over its seconds), the same
combination as the levels', so the ratio of two configs' objectives is the weighted geometric mean of their paired
per-category speedups (``category_value``, ``category_speedup``). A prompt of a category without weight is measured
but does not count. The prune bound is the weighted mean of the per-category mean log ratios with its variance
(``category_prune_decision``); it decides nothing before every weighted category has its prompts measured (a
method's gain can differ from one category to the next by more than any slack could cover).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.stats import log_ratios, mean_sd, t_quantile
from autotune.verdict import PruneDecision, clearly_loses

if TYPE_CHECKING:
    from autotune.config import LevelSummary, PromptResult
    from autotune.space import Space
    from autotune.stats import Spread

#: an unmeasured (higher) level is assumed to gain at most this much more (log ratio) than the best upper bound
#: of the levels measured so far: speculation's gain shrinks with load on dense targets, but can come back a
#: little on MoE targets once every expert is read anyway (the simulator's Kimi scenario)
UNMEASURED_SLACK = math.log(1.10)


def step_of(level_index: int, prompt: int, n_prompts: int) -> int:
    return level_index * n_prompts + prompt


def level_of_step(step: int, n_prompts: int) -> tuple[int, int]:
    """(level index, prompt index) of a pruning step."""
    return divmod(step, n_prompts)


def weighted_value(level_tok_per_s: Mapping[Any, float], weights: Mapping[Any, float]) -> float:
    """The weighted geometric mean of the levels' (or categories') tok/s (those with weight 0 do not count); 0 if
    any weighted one produced nothing."""
    total = 0.0
    for level, w in weights.items():
        if w <= 0:
            continue
        v = level_tok_per_s.get(level)
        if v is None or v <= 0:
            return 0.0
        total += w * math.log(v)
    return math.exp(total)


def speedups(trial: Mapping[Any, float], baseline: Mapping[Any, float]) -> dict[Any, float]:
    """Per-level (or per-category) aggregate speedups over the levels both have."""
    return {c: trial[c] / baseline[c] for c in trial if c in baseline and baseline[c] > 0 and trial[c] > 0}


def slo_broken(summary: LevelSummary, slo: Any) -> list[str]:
    """Which limits of ``slo`` (``SloSpec``) a level's summary breaks, as 'itl_p99_ms 71.2 > 60'."""
    out = []
    for key in ("itl_p99_ms", "ttft_p99_ms"):
        limit = getattr(slo, key, None)
        v = getattr(summary, key)
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
    q = t_quantile(confidence, max(min(len(v) for v in measured.values()) - 1, 1))
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


# ------------------------------------------------------------------------------------------ prompt categories


def category_tok_per_s(results: Iterable[PromptResult], categories: Sequence[str | None]) -> dict[str, float]:
    """Each category's aggregate tok/s (its prompts' tokens over their seconds) over ``results``; ``categories``:
    each prompt's category by prompt index."""
    tokens: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for r in results:
        c = categories[r.index] if 0 <= r.index < len(categories) else None
        if c is None:
            continue
        tokens[c] = tokens.get(c, 0.0) + r.completion_tokens
        seconds[c] = seconds.get(c, 0.0) + r.seconds
    return {c: tokens[c] / seconds[c] for c in tokens if seconds[c] > 0}


def category_value(
    results: Iterable[PromptResult], categories: Sequence[str | None], weights: Mapping[str, float]
) -> float:
    """The objective over prompt categories: the weighted geometric mean of the categories' aggregate tok/s."""
    return weighted_value(category_tok_per_s(results, categories), weights)


def category_speedup(
    results: Iterable[PromptResult],
    reference: Iterable[PromptResult],
    categories: Sequence[str | None],
    weights: Mapping[str, float],
) -> tuple[float | None, list[str]]:
    """The objective's speedup over ``reference`` on the prompts both measured: the weighted geometric mean of the
    per-category speedups, the weights of the categories measured renormalised (all of them: exactly the ratio of
    the objectives), and the weighted categories it rests on; (None, []) with none measured."""
    ref = {r.index: r for r in reference}
    pairs = [(r, ref[r.index]) for r in results if r.index in ref]
    ratios = speedups(
        category_tok_per_s([a for a, _ in pairs], categories), category_tok_per_s([b for _, b in pairs], categories)
    )
    w = {c: float(weights.get(c, 0.0)) for c in ratios if weights.get(c, 0.0) > 0}
    if not w:
        return None, []
    total = sum(w.values())
    return math.exp(sum(x * math.log(ratios[c]) for c, x in w.items()) / total), [c for c in weights if c in w]


def one_stream_value(results: Sequence[PromptResult], space: Space) -> float:
    """A one-stream start's objective: tok/s over the prompt set, or with ``objective.weights`` over prompt
    categories ``category_value``."""
    weights = space.objective.category_weights()
    if weights:
        return category_value(results, space.benchmark.categories, weights)
    seconds = sum(r.seconds for r in results)
    return sum(r.completion_tokens for r in results) / seconds if seconds > 0 else 0.0


def one_stream_speedup(
    results: Sequence[PromptResult], reference: Sequence[PromptResult], space: Space
) -> float | None:
    """``category_speedup`` under the space's weights over categories."""
    return category_speedup(results, reference, space.benchmark.categories, space.objective.category_weights() or {})[0]


def category_basis(
    results: Sequence[PromptResult],
    reference: Sequence[PromptResult],
    categories: Sequence[str | None],
    weights: Mapping[str, float],
    n_prompts: int,
) -> tuple[float | None, str | None]:
    """A trial stopped early: its ``category_speedup`` over ``reference`` and what it rests on, in words."""
    value, measured = category_speedup(results, reference, categories, weights)
    if value is None:
        return None, None
    of = len([c for c, w in weights.items() if w > 0])
    return value, (
        f"categories {', '.join(measured)} of {of} measured ({len(results)} of {n_prompts} prompts; weights of those "
        "categories)"
    )


@dataclass(frozen=True)
class ObjectiveLine:
    """What the study maximises, in words (every speedup of a report is a ratio of it), with its weights: by load
    level or by prompt category (``describe``); ``to_dict``: the report's JSON."""

    text: str
    weights: dict[int, float] | None = None
    category_weights: dict[str, float] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "text": self.text,
            "weights": self.weights and {str(c): w for c, w in self.weights.items()},
        }
        if self.category_weights is not None:
            out["category_weights"] = self.category_weights
        return out


def describe(weights: Mapping[int, float], category_weights: Mapping[str, float] | None = None) -> ObjectiveLine:
    """The study's ``ObjectiveLine``."""
    if category_weights:
        mix = ", ".join(f"{c} {w:.3g}" for c, w in category_weights.items())
        return ObjectiveLine(
            f"weighted over categories {mix} (the weighted geometric mean of each prompt category's aggregate tok/s, "
            "one stream)",
            category_weights=dict(category_weights),
        )
    if not weights:
        return ObjectiveLine("tok/s over the prompt set, one stream")
    mix = ", ".join(f"{c}: {w:g}" for c, w in sorted(weights.items()))
    return ObjectiveLine(
        f"weighted geometric mean of the load levels' aggregate tok/s (weights {mix})", dict(sorted(weights.items()))
    )


def category_prune_decision(
    trial: Mapping[int, float],
    reference: Mapping[int, float],
    *,
    categories: Sequence[str | None],
    weights: Mapping[str, float],
    confidence: float,
    min_prompts: int,
    start_noise: float,
    spread: Spread | None = None,
    rule: str = "baseline",
    against: int | None = None,
) -> PruneDecision:
    """Prune once the one-sided upper confidence bound of the objective's speedup over ``reference`` (the baseline,
    or the leader's figures shrunk by the leader margin) falls below 1.

    ``trial`` / ``reference``: per-prompt tok/s by step (= prompt index, one stream). Per weighted category the
    mean paired log ratio; the bound is the weights' combination of those means, with the within-category sd
    (the trial's own, pooled with the study's ``spread`` as ``stats.upper_bound`` does, the larger of the two) over
    each category's prompts and the start-to-start noise once. No decision until every category with a positive
    weight has ``max(2, min_prompts)`` paired prompts."""
    need = max(2, min_prompts)
    by: dict[str, list[float]] = {}
    for step in sorted(trial):
        if step not in reference or not 0 <= step < len(categories):
            continue
        c = categories[step]
        if c is None or weights.get(c, 0.0) <= 0:
            continue
        by.setdefault(c, []).extend(log_ratios([trial[step]], [reference[step]]))
    n = sum(len(v) for v in by.values())
    for c, w in weights.items():
        if w > 0 and len(by.get(c, [])) < need:
            got = len(by.get(c, []))
            why = f"category {c}: only {got} paired prompts (need {need} in every weighted category)"
            return PruneDecision(False, math.inf, n, why, rule, against)
    means = {c: sum(v) / len(v) for c, v in by.items()}
    ss = sum((x - means[c]) ** 2 for c, v in by.items() for x in v)
    df: float = sum(len(v) - 1 for v in by.values())
    sd = math.sqrt(ss / df) if df > 0 else 0.0
    if spread is not None and spread.df > 0:
        total_df = spread.df + df
        pooled = math.sqrt((spread.df * spread.sd**2 + df * sd * sd) / total_df)
        sd, df = max(pooled, sd), total_df
    total = sum(w for w in weights.values() if w > 0)
    mean = sum(weights[c] / total * means[c] for c in by)
    var = sum((weights[c] / total) ** 2 * sd * sd / len(by[c]) for c in by) + start_noise**2
    ub = math.exp(mean + t_quantile(confidence, max(df, 1)) * math.sqrt(var))
    what = "the baseline" if rule == "baseline" else f"the leader (trial {against})"
    where = ", ".join(f"{c} {len(by[c])}" for c in weights if c in by)
    if clearly_loses(ub):
        reason = (
            f"upper {confidence:.0%} bound of the objective's speedup over {what} is {ub:.3f} < 1 after {n} "
            f"prompts (categories weighted; prompts per category: {where})"
        )
        return PruneDecision(True, ub, n, reason, rule, against)
    return PruneDecision(False, ub, n, f"objective upper bound {ub:.3f} over {what} >= 1 ({where})", rule, against)


def study_level_weights(study: Any) -> dict[int, float]:
    """The objective's weight per load level (the study's pruner holds them, as every worker builds it from the
    space); empty without load levels."""
    weights = getattr(getattr(study, "pruner", None), "weights", None) or {}
    return {int(c): float(w) for c, w in weights.items()} if len(weights) > 1 else {}


def study_category_weights(study: Any) -> tuple[dict[str, float], tuple[str | None, ...]]:
    """The objective's weights over prompt categories and each prompt's category (the study's pruner holds them,
    as every worker builds it from the space); ({}, ()) without them."""
    pruner = getattr(study, "pruner", None)
    weights = getattr(pruner, "category_weights", None) or {}
    return {str(c): float(w) for c, w in weights.items()}, tuple(getattr(pruner, "categories", None) or ())

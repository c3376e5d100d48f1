"""The study's objective: one ``Objective``, built once from the space, whatever its mode.

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
per-category speedups. A prompt of a category without weight is measured but does not count. The prune bound is the
weighted mean of the per-category mean log ratios with its variance; it decides nothing before every weighted
category has its prompts measured (a method's gain can differ from one category to the next by more than any slack
could cover).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.stats import log_ratios, mean_sd, t_quantile
from autotune.verdict import PruneDecision, clearly_loses, prune_decision

if TYPE_CHECKING:
    from autotune.config import LevelResult, LevelSummary, PromptResult
    from autotune.space import Space
    from autotune.stats import Spread

#: an unmeasured (higher) level is assumed to gain at most this much more (log ratio) than the best upper bound
#: of the levels measured so far: speculation's gain shrinks with load on dense targets, but can come back a
#: little on MoE targets once every expert is read anyway (the simulator's Kimi scenario)
UNMEASURED_SLACK = math.log(1.10)


def weighted_value(tok_per_s: Mapping[Any, float], weights: Mapping[Any, float]) -> float:
    """The weighted geometric mean of the levels' (or categories') tok/s (those with weight 0 do not count); 0 if
    any weighted one produced nothing."""
    total = 0.0
    for level, w in weights.items():
        if w <= 0:
            continue
        v = tok_per_s.get(level)
        if v is None or v <= 0:
            return 0.0
        total += w * math.log(v)
    return math.exp(total)


def slo_broken(summary: LevelSummary, slo: Any) -> list[str]:
    """Which limits of ``slo`` (``SloSpec``) a level's summary breaks, as 'itl_p99_ms 71.2 > 60'."""
    out = []
    for key in ("itl_p99_ms", "ttft_p99_ms"):
        limit = getattr(slo, key, None)
        v = getattr(summary, key)
        if limit is not None and v is not None and v > limit:
            out.append(f"{key} {v:.1f} > {limit:g}")
    return out


def _tok_per_s(results: Iterable[PromptResult]) -> float:
    results = list(results)
    seconds = sum(r.seconds for r in results)
    return sum(r.completion_tokens for r in results) / seconds if seconds > 0 else 0.0


def _geo(ratios: Mapping[Any, float], weights: Mapping[Any, float]) -> tuple[float | None, list[Any]]:
    """The weighted geometric mean of ``ratios`` over the positively weighted keys they have, weights renormalised,
    and those keys in the weights' order; (None, []) with none."""
    w = {c: float(weights.get(c, 0.0)) for c in ratios if weights.get(c, 0.0) > 0}
    if not w:
        return None, []
    total = sum(w.values())
    return math.exp(sum(x * math.log(ratios[c]) for c, x in w.items()) / total), [c for c in weights if c in w]


def _ratios(trial: Mapping[Any, float], reference: Mapping[Any, float]) -> dict[Any, float]:
    """Per-level (or per-category) aggregate speedups over the keys both have."""
    return {c: trial[c] / reference[c] for c in trial if c in reference and reference[c] > 0 and trial[c] > 0}


@dataclass(frozen=True)
class ObjectiveLine:
    """What the study maximises, in words (every speedup of a report is a ratio of it), with its weights: by load
    level or by prompt category (``Objective.describe``); ``to_dict``: the report's JSON."""

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


@dataclass(frozen=True)
class Objective:
    """The study's objective, one of three modes: plain (one level, no category weights), load levels (``levels``
    with their normalised ``weights``) or prompt categories (``category_weights`` over each prompt's category,
    ``categories``). Every question whose answer depends on the mode is a method here."""

    levels: tuple[int, ...] = (1,)
    weights: Mapping[int, float] = field(default_factory=dict)
    #: each prompt's category by prompt index (kept in every mode: the pruner's leader rule reads it)
    categories: tuple[str | None, ...] = ()
    category_weights: Mapping[str, float] = field(default_factory=dict)
    n_prompts: int = 0

    def __post_init__(self) -> None:
        if self.category_weights and not self.categories:
            raise ValueError("category_weights need the prompts' categories")

    @classmethod
    def of(cls, space: Space) -> Objective:
        levels = space.benchmark.concurrency
        return cls(
            levels,
            space.objective.weights_for(levels),
            space.benchmark.categories,
            space.objective.category_weights() or {},
            len(space.benchmark.prompts),
        )

    @property
    def level_weights(self) -> dict[int, float]:
        """The weight per load level; empty without load levels."""
        return dict(self.weights) if len(self.weights) > 1 else {}

    @property
    def leader_rule(self) -> bool:
        """Whether the pruner's leader rule applies: not with load levels (the objective's bound over prompts x
        levels, against the baseline only)."""
        return not (len(self.levels) > 1 and self.n_prompts > 0)

    # ----------------------------------------------------------------------------------- values and speedups

    def value(self, results: Sequence[PromptResult], levels: Iterable[LevelResult] = ()) -> float:
        """A start's objective from its one-stream ``results`` and its ``levels`` (``LevelResult``s)."""
        if len(self.weights) > 1:
            return weighted_value({lv.level: lv.tok_per_s for lv in levels}, self.weights)
        if self.category_weights:
            return weighted_value(self.category_tok_per_s(results), self.category_weights)
        return _tok_per_s(results)

    def category_tok_per_s(self, results: Iterable[PromptResult]) -> dict[str, float]:
        """Each category's aggregate tok/s (its prompts' tokens over their seconds) over ``results``."""
        tokens: dict[str, float] = {}
        seconds: dict[str, float] = {}
        for r in results:
            c = self.categories[r.index] if 0 <= r.index < len(self.categories) else None
            if c is None:
                continue
            tokens[c] = tokens.get(c, 0.0) + r.completion_tokens
            seconds[c] = seconds.get(c, 0.0) + r.seconds
        return {c: tokens[c] / seconds[c] for c in tokens if seconds[c] > 0}

    def category_speedup(
        self, results: Iterable[PromptResult], reference: Iterable[PromptResult]
    ) -> tuple[float | None, list[str]]:
        """The objective's speedup over ``reference`` on the prompts both measured: the weighted geometric mean of
        the per-category speedups, the weights of the categories measured renormalised (all of them: exactly the
        ratio of the objectives), and the weighted categories it rests on; (None, []) with none measured."""
        ref = {r.index: r for r in reference}
        pairs = [(r, ref[r.index]) for r in results if r.index in ref]
        mine, theirs = (self.category_tok_per_s(x) for x in ([a for a, _ in pairs], [b for _, b in pairs]))
        return _geo(_ratios(mine, theirs), self.category_weights)

    def speedup(self, results: Sequence[PromptResult], reference: Sequence[PromptResult]) -> float | None:
        """A one-stream start's speedup over ``reference`` (its baseline's prompts): aggregate tok/s over the
        measured prompts over the reference's first as many; with weights over categories ``category_speedup``."""
        if self.category_weights:
            return self.category_speedup(results, reference)[0]
        n = len(results)
        base_tokens = sum(p.completion_tokens for p in reference[:n])
        base_seconds = sum(p.seconds for p in reference[:n])
        tokens = sum(r.completion_tokens for r in results)
        seconds = sum(r.seconds for r in results)
        if base_seconds > 0 and seconds > 0 and base_tokens > 0:
            return (tokens / seconds) / (base_tokens / base_seconds)
        return None

    def partial_speedup(
        self,
        results: Sequence[PromptResult],
        reference: Sequence[PromptResult],
        levels: Mapping[int, float],
        reference_levels: Mapping[int, float],
        n_prompts: int,
    ) -> tuple[float | None, str | None]:
        """A trial stopped early: the objective's ratio over what it measured and what that rests on, in words: the
        weighted geometric mean of its per-category (or measured levels') speedups, weights of those; else its
        prompts' aggregate tok/s against the reference's over the same prompts."""
        if self.category_weights:
            value, measured = self.category_speedup(results, reference)
            if value is None:
                return None, None
            of = len([c for c, w in self.category_weights.items() if w > 0])
            return value, (
                f"categories {', '.join(measured)} of {of} measured ({len(results)} of {n_prompts} prompts; "
                "weights of those categories)"
            )
        weights = self.level_weights
        if weights and levels:
            value, on = _geo(_ratios(levels, reference_levels), weights)
            if value is not None:
                where = ", ".join(str(c) for c in sorted(on))
                return value, f"levels {where} of {len(weights)} measured (weights of those levels)"
        base = {p.index: p for p in reference}
        pairs = [(p, q) for p in results if (q := base.get(p.index)) is not None and p.seconds and q.seconds]
        if not pairs:
            return None, None
        tps = sum(p.completion_tokens for p, _ in pairs) / sum(p.seconds for p, _ in pairs)
        ref_tps = sum(q.completion_tokens for _, q in pairs) / sum(q.seconds for _, q in pairs)
        where = f"{len(pairs)} of {n_prompts} prompts" + (" at 1 stream (level 1 only)" if weights else "")
        return (tps / ref_tps if ref_tps > 0 else None), where

    # ----------------------------------------------------------------------------------------------- pruning

    def step(self, level: int, prompt: int) -> int:
        """The pruning step of ``prompt`` at load level ``level``."""
        return self.levels.index(level) * self.n_prompts + prompt

    def every_category(self, steps: Iterable[int]) -> bool:
        """Whether ``steps`` cover a prompt of every category of the prompt set (True without categories)."""
        wanted = {c for c in self.categories if c is not None}
        return wanted <= {self.categories[s] for s in steps if 0 <= s < len(self.categories)}

    def prune(
        self,
        trial: Mapping[int, float],
        reference: Mapping[int, float],
        *,
        confidence: float,
        min_prompts: int,
        start_noise: float,
        spread: Spread | None = None,
        rule: str = "baseline",
        against: int | None = None,
    ) -> PruneDecision:
        """Prune once the one-sided upper confidence bound of the objective's speedup over ``reference`` (the
        baseline, or the leader's figures shrunk by the leader margin) falls below 1. ``trial`` / ``reference``:
        intermediate values by step. Plain: the paired per-prompt bound (``verdict.prune_decision``); with load
        levels the levels' bound (against the baseline; it takes no ``spread`` and names no reference), with weights
        over categories the categories'."""
        if not self.leader_rule:
            return self._level_prune(trial, reference, confidence, min_prompts, start_noise)
        if self.category_weights:
            return self._category_prune(trial, reference, confidence, min_prompts, start_noise, spread, rule, against)
        steps = sorted(s for s in trial if s in reference)
        t, b = [trial[s] for s in steps], [reference[s] for s in steps]
        return prune_decision(
            t,
            b,
            confidence=confidence,
            min_prompts=min_prompts,
            start_noise=start_noise,
            spread=spread,
            rule=rule,
            against=against,
        )

    def _level_prune(
        self,
        trial: Mapping[int, float],
        baseline: Mapping[int, float],
        confidence: float,
        min_prompts: int,
        start_noise: float,
    ) -> PruneDecision:
        """Per measured level the mean paired log ratio and its variance; a weighted level not measured yet is
        bounded by the largest upper bound measured so far plus ``UNMEASURED_SLACK``. The start-to-start noise is
        added once (one start's levels share it)."""
        need = max(2, min_prompts)
        by_level: dict[int, list[float]] = {}
        for step in sorted(trial):
            if step not in baseline:
                continue
            li = step // self.n_prompts
            if li < len(self.levels):
                by_level.setdefault(self.levels[li], []).extend(log_ratios([trial[step]], [baseline[step]]))
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
            w = self.weights.get(c, 0.0)
            mean += w * m
            var += w * w * se2
        for c in self.levels:
            if c not in measured:
                mean += self.weights.get(c, 0.0) * (best_upper + UNMEASURED_SLACK)
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

    def _category_prune(
        self,
        trial: Mapping[int, float],
        reference: Mapping[int, float],
        confidence: float,
        min_prompts: int,
        start_noise: float,
        spread: Spread | None,
        rule: str,
        against: int | None,
    ) -> PruneDecision:
        """Per weighted category the mean paired log ratio (step = prompt index, one stream); the bound is the
        weights' combination of those means, with the within-category sd (the trial's own, pooled with the study's
        ``spread`` as ``stats.upper_bound`` does, the larger of the two) over each category's prompts and the
        start-to-start noise once. No decision until every category with a positive weight has
        ``max(2, min_prompts)`` paired prompts."""
        weights, categories = self.category_weights, self.categories
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

    # ------------------------------------------------------------------------------------------------ words

    def describe(self) -> ObjectiveLine:
        """The study's ``ObjectiveLine``."""
        if self.category_weights:
            mix = ", ".join(f"{c} {w:.3g}" for c, w in self.category_weights.items())
            return ObjectiveLine(
                f"weighted over categories {mix} (the weighted geometric mean of each prompt category's aggregate "
                "tok/s, one stream)",
                category_weights=dict(self.category_weights),
            )
        weights = self.level_weights
        if not weights:
            return ObjectiveLine("tok/s over the prompt set, one stream")
        mix = ", ".join(f"{c}: {w:g}" for c, w in sorted(weights.items()))
        return ObjectiveLine(
            f"weighted geometric mean of the load levels' aggregate tok/s (weights {mix})",
            dict(sorted(weights.items())),
        )

    def identity(self) -> dict[str, object]:
        """What of the objective must not change under a running study (nothing for the plain one: as before)."""
        out: dict[str, object] = {}
        if len(self.levels) > 1:
            out["concurrency"] = list(self.levels)
            out["weights"] = {str(c): w for c, w in self.weights.items()}
        if self.category_weights:
            out["categories"] = list(self.categories)
            out["category_weights"] = dict(self.category_weights)
        return out

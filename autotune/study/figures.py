"""A trial's speedup figure over its baseline, from the measured prompts (``trial.Objective`` records it)."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from autotune import objective
from autotune.config import PromptResult
from autotune.records import TrialRecord
from autotune.space import Space


def speedup_of(results: list[PromptResult], baseline: FrozenTrial | None, space: Space | None = None) -> float | None:
    """Aggregate tok/s over the measured prompts over the baseline's there (or ``objective.one_stream_speedup``)."""
    if baseline is None or not results:
        return None
    base_prompts = TrialRecord(baseline).prompts
    if space is not None and space.objective.by_category:
        return objective.one_stream_speedup(results, [PromptResult.from_dict(p) for p in base_prompts], space)
    n = len(results)
    base_tokens = sum(p["completion_tokens"] for p in base_prompts[:n])
    base_seconds = sum(p["seconds"] for p in base_prompts[:n])
    tokens = sum(r.completion_tokens for r in results)
    seconds = sum(r.seconds for r in results)
    if base_seconds > 0 and seconds > 0 and base_tokens > 0:
        return (tokens / seconds) / (base_tokens / base_seconds)
    return None

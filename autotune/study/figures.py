"""A trial's figures (``trial.Objective`` records them): its speedup over its baseline, from the measured prompts;
its lossless record against the baseline's answers; a new baseline's answers against the other baselines' (the
server's own numerics, ``lossless_floor``), and confirmation's fresh baselines against the search's."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune import objective, records
from autotune.config import PromptResult, TrialConfig
from autotune.records import TrialRecord
from autotune.space import Space
from autotune.study.context import StudyContext


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


def lossless_record(ctx: StudyContext, texts: list[str], baseline: FrozenTrial) -> dict[str, Any]:
    """The lossless record of ``texts`` (one answer per prompt) against ``baseline``'s answers and references."""
    record = ctx.compare_outputs(texts, baseline, ctx.lossless_tolerance())
    record["tolerance_source"] = ctx.tie_tolerance[1]
    return record


def baseline_floor(ctx: StudyContext, number: int, config: TrialConfig, texts: list[str]) -> None:
    """Compare a new baseline's answers with every other baseline's (another CUDA-graph setting: other kernels
    and batch shapes; a fresh start in confirmation): a divergence there is this server's own numerics. Each
    classified divergence joins the study's ``lossless_floor``; a confident one raises the tolerance in force
    (``StudyContext.lossless_tolerance``) and is reported."""
    floor = records.lossless_floor(ctx.study)
    for other in records.trials(ctx.study, (TrialState.COMPLETE,)):
        r = TrialRecord(other)
        if other.number == number or not r.is_baseline or r.is_duplicate or not r.outputs:
            continue
        rec = ctx.compare_outputs(texts, other, ctx.tie_tolerance[0])
        for d in rec["divergences"]:
            floor.append({**d, "baseline": number, "against": other.number, "cuda_graph": config.cuda_graph})
    floor.append({"baseline": number, "checked": True, "cuda_graph": config.cuda_graph})
    records.set_lossless_floor(ctx.study, floor)


def confirmation_floor(ctx: StudyContext, config: TrialConfig, texts: list[str]) -> None:
    """A fresh baseline start of confirmation against the search's baseline of the same setting: the floor."""
    base = records.find_baseline(ctx.study, config.cuda_graph)
    if base is None or not TrialRecord(base).outputs:
        return
    rec = ctx.compare_outputs(texts, base, ctx.tie_tolerance[0])
    if rec["divergences"]:
        floor = records.lossless_floor(ctx.study)
        for d in rec["divergences"]:
            floor.append({**d, "baseline": "confirmation", "against": base.number, "cuda_graph": config.cuda_graph})
        records.set_lossless_floor(ctx.study, floor)

"""With load levels, after the search: the draft-length ladder of the best config, so each level's winner is
measured, not left to the sampler's luck.

The best measured speculative config's static part (drafter, CUDA graphs, topk) is kept and its draft length
(``autotune.schedule.DRAFT_KNOB``: SGLang's steps, llama.cpp's longest draft) goes through every value of its
range in the space that the server accepts; configs already measured are not launched again (a resumed study
measures only the rest). These trials (user attr ``seeded=ladder``) go through the same objective and use the
budget like any other; the per-level confirmation then races each level's winner.
"""

from __future__ import annotations

from optuna.trial import TrialState

from autotune import records
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.records import TrialRecord
from autotune.schedule import DRAFT_KNOB
from autotune.space import Choices, IntRange
from autotune.study import search as _search
from autotune.study.context import StudyContext

SEEDED_LADDER = "ladder"
#: at most this many rungs, spread evenly on a log scale over the range (the ends always in)
MAX_RUNGS = 6


def rungs(values: list[int], most: int = MAX_RUNGS) -> list[int]:
    """``values`` (sorted), thinned to ``most`` spread evenly on a log scale, the smallest and largest kept."""
    values = sorted(set(values))
    if len(values) <= most:
        return values
    import math

    lo, hi = math.log(max(values[0], 1)), math.log(max(values[-1], 1))
    picks = {values[0], values[-1]}
    for i in range(1, most - 1):
        target = math.exp(lo + (hi - lo) * i / (most - 1))
        picks.add(min(values, key=lambda v: (abs(v - target), v)))
    return sorted(picks)


def ladder_configs(ctx: StudyContext) -> list[TrialConfig]:
    """The unmeasured rungs of the best speculative config's draft-length ladder ([] without load levels)."""
    space = ctx.space
    if not space.benchmark.loaded:
        return []
    done = [t for t in records.trials(ctx.study, (TrialState.COMPLETE,)) if records.is_measured_speculative(t)]
    done = [t for t in done if not TrialRecord(t).lossy and t.value]
    if not done:
        return []
    best = TrialRecord(max(done, key=lambda t: float(t.value or 0.0))).effective_config()
    knob = DRAFT_KNOB.get(space.server.backend, "num_steps")
    domain = space.search.knobs.get(knob)
    if isinstance(domain, IntRange):
        values = domain.values()
    elif isinstance(domain, Choices):
        values = sorted(v for v in domain.values if isinstance(v, int))
    else:
        return []
    keys = {TrialRecord(t).config_key for t in records.trials(ctx.study)}
    out = []
    for v in rungs(values):
        changes = {knob: v}
        if space.server.backend == "sglang" and best.knob("topk") == 1:
            changes["num_draft_tokens"] = v + 1  # a chain: SGLang verifies steps + 1 tokens
        try:
            cfg = ctx.backend.resolve(best.with_knobs(**changes), space)
        except InfeasibleConfig:
            continue
        if cfg.key() not in keys:
            keys.add(cfg.key())
            out.append(cfg)
    return out


def run(ctx: StudyContext, objective: _search.Objective, *, deadline: float | None = None) -> int:
    """Measure the ladder's unmeasured rungs; returns how many were queued."""
    configs = ladder_configs(ctx)
    for cfg in configs:
        records.enqueue_speculative(ctx.study, ctx.backend.params(cfg, ctx.space), seeded=SEEDED_LADDER)
    if configs:
        target = _search.counted_trials(ctx) + len(configs)
        cap = len(records.trials(ctx.study)) + 2 * len(configs) + 4
        _search._optimize(ctx, objective, target, cap, deadline)
    return len(configs)

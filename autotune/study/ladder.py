"""With load levels, after the search: each level's likely winner and the draft-length ladder of the best config,
so each level's winner is measured, not left to the sampler's luck (it ranks by the objective).

Per level a surrogate of that level's log tok/s picks the unmeasured grid point it ranks highest (``level_picks``).

The best measured speculative config's static part (drafter, CUDA graphs, topk) is kept and its draft length
(``Backend.schedule_knob``: SGLang's steps, llama.cpp's longest draft) goes through every value of its range in
the space that the server accepts (``Backend.resolve`` fills in what follows from it); configs already measured are
not launched again (a resumed study measures only the rest). These trials (user attr ``seeded``: ``level`` or
``ladder``) go through the same objective and use the budget like any other; the per-level confirmation then races
each level's winner.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.records import TrialRecord
from autotune.space import Choices, IntRange
from autotune.study import _optuna
from autotune.study import search as _search
from autotune.study.context import StudyContext
from autotune.surrogate import Encoding, Surrogate

SEEDED_LADDER = "ladder"
#: user attr ``seeded`` of a level's surrogate pick
SEEDED_LEVEL = "level"
#: rounds of per-level picks (each refits on the last round's measurements; a level gets none once its surrogate's
#: best upper bound no longer beats its best measurement)
LEVEL_ROUNDS = 2
#: at most this many rungs, spread evenly on a log scale over the range (the ends always in)
MAX_RUNGS = 6


def rungs(values: list[int], most: int = MAX_RUNGS) -> list[int]:
    """``values`` (sorted), thinned to ``most`` spread evenly on a log scale, the smallest and largest kept."""
    values = sorted(set(values))
    if len(values) <= most:
        return values
    lo, hi = math.log(max(values[0], 1)), math.log(max(values[-1], 1))
    picks = {values[0], values[-1]}
    for i in range(1, most - 1):
        target = math.exp(lo + (hi - lo) * i / (most - 1))
        picks.add(min(values, key=lambda v: (abs(v - target), v)))
    return sorted(picks)


def ladder_configs(ctx: StudyContext) -> list[TrialConfig]:
    """The unmeasured rungs of the best speculative config's draft-length ladder ([] without load levels)."""
    space, knob = ctx.space, ctx.backend.schedule_knob
    if not space.benchmark.loaded or knob is None:
        return []
    done = [t for t in records.trials(ctx.study, (TrialState.COMPLETE,)) if records.is_measured_speculative(t)]
    done = [t for t in done if not TrialRecord(t).lossy and t.value]
    if not done:
        return []
    best = TrialRecord(max(done, key=lambda t: float(t.value or 0.0))).effective_config()
    domain = space.search.knobs.get(knob)
    if isinstance(domain, IntRange):
        values = domain.values()
    elif isinstance(domain, Choices):
        values = sorted(v for v in domain.values if isinstance(v, int))
    else:
        return []
    keys = {TrialRecord(t).config_key for t in records.trials(ctx.study)}
    out: list[TrialConfig] = []
    for v in rungs(values):
        try:
            cfg = ctx.backend.resolve(best.with_knobs(**{knob: v}), space)
        except InfeasibleConfig:
            continue
        if cfg.key() not in keys:
            keys.add(cfg.key())
            out.append(cfg)
    return out


def family(cfg: TrialConfig) -> tuple[str | None, Any]:
    """A config's drafter and method: what a level's surrogate can only guess at without a measurement of it."""
    return cfg.drafter, cfg.knob("method")


def level_pool(grid: list[TrialConfig], keys: Collection[str | None], observed: list[TrialConfig]) -> list[TrialConfig]:
    """The grid points a level's pick may be: not launched yet (``keys``), of a family (drafter, method) measured
    to the end at that level. The surrogate knows nothing of a family that never was (its trials pruned as losing,
    or failed): its upper bound is the prior's, which outranks every measured point."""
    families = {family(c) for c in observed}
    return [g for g in grid if g.key() not in keys and family(g) in families]


def level_picks(ctx: StudyContext) -> list[TrialConfig]:
    """Per load level, the unmeasured grid point a surrogate of that level's log tok/s ranks highest (posterior mean
    + ``search.REFINE_KAPPA`` sd), when it could beat the level's best measurement: the search ranks by the
    objective, so a config that wins only at one level (a deep tree at one stream) would otherwise never be
    measured. Levels where every measured config clearly loses to the baseline (best speedup below 0.9) get none."""
    space = ctx.space
    grid = ctx.grid
    if not space.benchmark.loaded or grid is None:
        return []
    done = [t for t in records.trials(ctx.study, (TrialState.COMPLETE,)) if records.is_measured_speculative(t)]
    keys = {TrialRecord(t).config_key for t in records.trials(ctx.study)}
    floor = max(space.pruning.start_noise / math.sqrt(2), 0.005)
    picks: list[TrialConfig] = []
    for c in space.benchmark.concurrency:
        obs = []
        best_speedup = 0.0
        for t in done:
            r = TrialRecord(t)
            x = r.level(c)
            if x is None or not x.tok_per_s or r.lossy or x.slo_broken:
                continue
            obs.append((r.effective_config(), math.log(x.tok_per_s)))
            best_speedup = max(best_speedup, x.speedup or 0.0)
        if len({cfg.key() for cfg, _ in obs}) < _search.MIN_SURROGATE_POINTS or best_speedup < 0.9:
            continue
        model = Surrogate(Encoding.from_configs(grid + [cfg for cfg, _ in obs]), obs, noise_floor=floor)
        pool = level_pool(grid, keys, [cfg for cfg, _ in obs])
        if not pool:
            continue
        mean, sd = model.predict(pool)
        ucb = mean + _search.REFINE_KAPPA * sd
        i = int(np.argmax(ucb))
        if ucb[i] > max(v for _, v in obs):
            keys.add(pool[i].key())
            picks.append(pool[i])
    return picks


def run(ctx: StudyContext, objective: _search.TrialFn, *, deadline: float | None = None) -> int:
    """Measure each level's surrogate pick and the ladder's unmeasured rungs; returns how many were queued. A run
    cut in this phase left its queued picks or rungs waiting: they are measured first (``_drain``), and what is
    queued is not queued again."""
    n = 0
    _drain(ctx, objective, deadline)
    done = records.level_phase(ctx.study)  # a resumed study does not start the phase over
    for r in range(done.rounds, LEVEL_ROUNDS):  # each round refits on the last one's measurements
        picks = level_picks(ctx)
        if picks:
            n += _measure(ctx, objective, picks, SEEDED_LEVEL, deadline)
        # a round without picks ends the rounds (the next would refit on the same measurements): recorded as over,
        # so that a run cut in the ladder does not pick again once the ladder is measured, as an uncut one does not
        done = records.LevelPhase(r + 1 if picks else LEVEL_ROUNDS)
        records.set_level_phase(ctx.study, done)
        if not picks:
            break
    if not done.ladder:
        n += _measure(ctx, objective, ladder_configs(ctx), SEEDED_LADDER, deadline)
        records.set_level_phase(ctx.study, records.LevelPhase(LEVEL_ROUNDS, ladder=True))
    return n


def _queued(ctx: StudyContext) -> set[str]:
    """The params (JSON) of the trials waiting in the queue: configs already queued, not to be queued again."""
    return {json.dumps(_optuna.params_of(t), sort_keys=True) for t in records.trials(ctx.study, (TrialState.WAITING,))}


def _waiting(ctx: StudyContext) -> int:
    """This phase's trials (a level's pick, a rung) waiting in the queue."""
    return _ours(records.trials(ctx.study, (TrialState.WAITING,)))


def _ours(waiting: list[FrozenTrial]) -> int:
    return sum(1 for t in waiting if TrialRecord(t).seeded in (SEEDED_LEVEL, SEEDED_LADDER))


def _measure(
    ctx: StudyContext, objective: _search.TrialFn, configs: list[TrialConfig], seeded: str, deadline: float | None
) -> int:
    queued = _queued(ctx)
    n = 0
    for cfg in configs:
        params = ctx.backend.params(cfg, ctx.space)
        if json.dumps(params, sort_keys=True) not in queued:
            records.enqueue_speculative(ctx.study, params, seeded=seeded)
            n += 1
    _drain(ctx, objective, deadline)
    return n


def _drain(ctx: StudyContext, objective: _search.TrialFn, deadline: float | None) -> None:
    """Run this phase's queued trials (and whatever the queue holds before them: it runs in order), and no
    sampler trial: until none of this phase's waits (one that resolves to a measured config ends as a duplicate
    and uses no budget, so a trial count alone would let the sampler add one), the cap or the deadline."""
    queue = records.trials(ctx.study, (TrialState.WAITING,))
    if not _ours(queue):
        return
    waiting = len(queue)  # the queue runs in order: anything before ours runs too
    target = records.counted_trials(ctx.study) + waiting
    cap = len(records.trials(ctx.study)) + 2 * waiting + 4
    _search._optimize(ctx, objective, target, cap, deadline, stop=lambda: _waiting(ctx) == 0)

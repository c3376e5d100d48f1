"""The search phase: recover what a killed run left, seed the baselines and the server's defaults, then trials from
TPE and, for the last share of the budget, from the Gaussian-process surrogate (``refine_next``), until the budget,
a cap on all trials or the deadline."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.records import TrialRecord
from autotune.space import Choices
from autotune.study import _optuna, methods, settle
from autotune.study.context import Event, StudyContext, idle, trial_limit_s
from autotune.study.methods import MIN_OWN_EVIDENCE
from autotune.study.outcomes import FAILURES
from autotune.study.storage import study_lock
from autotune.surrogate import Encoding, MethodSurrogate, Model, fit, fit_by_method, log_round_cost

#: the surrogate's part of the search (``refine_next``, the ladder): it takes over once this many configs were
#: measured, and proposes the highest posterior mean + ``REFINE_KAPPA`` sd
MIN_SURROGATE_POINTS = 6
REFINE_KAPPA = 2.0
#: a proposal of the sampler or of the design is not launched when the surrogate predicts it at least
#: ``SKIP_MARGIN`` slower than the best measured config and gives it less than ``SKIP_BELOW`` probability of
#: reaching it (``not_worth_a_start``). It still uses its place in the budget, as a config refused for predicted
#: out-of-memory does.
SKIP_BELOW = 0.01
SKIP_MARGIN = 0.10
#: the search stops before its budget once its answer is settled (``settled``, ``autotune.study.settle``): a
#: probability under ``SETTLE_PROBABILITY``, with differences below ``RESOLUTION`` counted as ties;
#: ``SETTLE_SAMPLES`` joint posterior draws. "The best is found" settles it only after ``IMPROVE_AFTER_PICKS`` of
#: the surrogate's own picks were measured: a model fitted to the design alone is confident where it has not looked
#: (scripts/bench_search.py: an optimum on the space's edge was missed in 3 of 20 seeds that stopped right after the
#: design). The resolution is 1%, half the 2% a recommendation is judged by: at 2% the stop and the thinning
#: together missed the 2% target in 3-4 of 20 seeds on two scenarios (docs/benchmarks.md, "The study's bill").
#: "The best is found" also when no unmeasured config is likely to change the answer (``Settled.p_change``: beat
#: the best measured by the resolution or clear the ``min_gain`` bar, whichever is higher), not only when none is
#: likely to beat the best measured (``p_improve``). A stop on the next trial's expected gain
#: (``Settled.expected_gain_bar``, flat at 0.1-0.3% or 0.03% per minute of a server start) was measured and not
#: shipped: fewer hits on the generated landscapes (docs/benchmarks.md, "The study's bill"; removed in #44).
SETTLE_PROBABILITY = 0.05
RESOLUTION = 0.01
SETTLE_SAMPLES = 512
IMPROVE_AFTER_PICKS = 3

TrialFn = Callable[[optuna.Trial], float]  # what Optuna optimizes: trial.TrialObjective


# ---------------------------------------------------------------------------------------------- budget


def remaining(ctx: StudyContext, n_trials: int) -> int:
    return max(0, n_trials - records.counted_trials(ctx.study))


def refine_count(ctx: StudyContext, n_trials: int) -> int:
    """How many of the last trials the surrogate picks (``budget.refine_trials``; auto: the last half). Measured
    (scripts/bench_search.py, 20 seeds): with the surrogate taking every trial after the design, llama-edge's
    optimum on the space's edge was recommended in 90% of seeds; with TPE between the design and the last half,
    100%, and the same on 50 generated landscapes (93% vs 94% of 150 runs within 2%, median time to 2% 0.017 vs
    0.018 of the full grid's)."""
    if ctx.grid is None:
        return 0
    r = ctx.space.budget.refine_trials
    return min(n_trials, n_trials // 2 if r is None else r)


# ---------------------------------------------------------------------------------------------- before the loop


def recover_interrupted(ctx: StudyContext) -> None:
    """Trials left RUNNING by a killed run (single-worker SQLite) are failed and their configs re-queued.
    (With a server database, Optuna's heartbeat fails and retries stale trials instead.)"""
    storage = _optuna.single_worker_sqlite(ctx.study)
    if storage is None:
        return
    for t in records.trials(ctx.study, (TrialState.RUNNING,)):
        _optuna.fail_interrupted(
            storage,
            t,
            {records.INTERRUPTED: True, records.FAIL_REASON: "the orchestrator stopped during this trial"},
        )
        if not TrialRecord(t).is_baseline:  # baselines are re-queued by seed()
            records.enqueue_speculative(ctx.study, t.params, seeded=TrialRecord(t).seeded, requeued_from=t.number)


def seed(ctx: StudyContext, n_trials: int | None = None) -> None:
    """Baselines first (one per CUDA-graph setting), then the server's own defaults, then a space-filling design
    (``design_configs``) when the space is a finite grid."""
    trials = records.trials(ctx.study)
    methods.record(ctx.study, ctx.space, ctx.backend)  # a method space's catalogue, for the report
    live = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    have_baseline = {
        _optuna.params_of(t).get(records.PARAM_CUDA_GRAPH)
        for t in trials
        if TrialRecord(t).is_baseline and t.state in live
    }
    for cg in ctx.space.search.cuda_graph:
        if cg not in have_baseline:
            records.enqueue_baseline(ctx.study, cg)
    queued = {json.dumps(_optuna.params_of(t), sort_keys=True) for t in trials}
    for cfg in seed_configs(ctx):
        params = ctx.backend.params(cfg, ctx.space)
        key = json.dumps(params, sort_keys=True)
        if key not in queued:
            queued.add(key)
            records.enqueue_speculative(ctx.study, params, seeded=records.SEEDED_DEFAULT)
    if n_trials is None or any(TrialRecord(t).seeded == records.SEEDED_DESIGN for t in trials):
        return  # the design is drawn once per study (a resumed study keeps its own)
    for cfg in design_configs(ctx, design_count(ctx, n_trials)):
        params = ctx.backend.params(cfg, ctx.space)
        key = json.dumps(params, sort_keys=True)
        if key not in queued:
            queued.add(key)
            records.enqueue_speculative(ctx.study, params, seeded=records.SEEDED_DESIGN)


def design_count(ctx: StudyContext, n_trials: int) -> int:
    """How many design points follow the server defaults (``design_total``)."""
    if ctx.grid is None:
        return 0
    return design_total(ctx.space, ctx.grid, seed_configs(ctx), n_trials)


def design_total(space: Any, grid: list[TrialConfig], seeds: list[TrialConfig], n_trials: int) -> int:
    """How many design points follow the server defaults ``seeds``: enough that the surrogate can take over
    (defaults and design together ``MIN_SURROGATE_POINTS`` + the number of numeric knobs), at most a quarter of the
    budget; in a space with ``search.methods``, at least what brings every method of the grid to
    ``MIN_OWN_EVIDENCE`` configs with its defaults (``method_shares``), at most half the budget."""
    if space.budget.design_trials is not None:
        return min(n_trials, space.budget.design_trials)
    dims = len(Encoding.from_configs(grid).knobs)
    target = MIN_SURROGATE_POINTS + dims
    count = max(0, min(n_trials // 4, target) - len(seeds))
    if space.search.methods:
        count = min(max(count, sum(method_shares(grid, seeds, count).values())), n_trials // 2)
    return count


def _method_of(c: TrialConfig) -> Any:
    return c.knob("method")


def method_shares(grid: list[TrialConfig], seeds: list[TrialConfig], count: int) -> dict[Any, int]:
    """Each method's share of a design of ``count`` points in a space with ``search.methods``: an equal share of
    ``count``, and at least what brings it to ``MIN_OWN_EVIDENCE`` configs with its server defaults; never more
    than its grid has beyond them."""
    methods: dict[Any, int] = {}
    for c in grid:
        methods[_method_of(c)] = methods.get(_method_of(c), 0) + 1
    if not methods:
        return {}
    even = math.ceil(count / len(methods))
    out = {}
    for m, size in methods.items():
        seeded = sum(1 for c in seeds if _method_of(c) == m)
        out[m] = max(0, min(size - seeded, max(even, MIN_OWN_EVIDENCE - seeded)))
    return out


def design_configs(ctx: StudyContext, count: int) -> list[TrialConfig]:
    """``count`` grid points spread over the valid region: a scrambled Sobol sequence in the numeric knobs'
    coordinates (``Encoding``: [0, 1], log2 for wide ranges), each point taken to the nearest valid config not yet
    chosen (the defaults count as chosen). The drafter x CUDA-graph groups take turns, and so do the values of a
    knob given as a list of choices (topk), so a thin slice of the valid region (topk 1 allows one tree size per
    depth) is measured too. Seeded by the study's ``--seed`` (else its name), so a study and its resumption draw
    the same design. In a space with ``search.methods`` each method gets its share (``method_shares``), drawn in
    its own coordinates, the methods taking turns."""
    grid = ctx.grid
    if not grid or count <= 0:
        return []
    if ctx.space.search.methods:
        seeds = seed_configs(ctx)
        shares = method_shares(grid, seeds, count)
        per = [
            _design_points(ctx, [c for c in grid if _method_of(c) == m], n, seeds, ctx.space.search.methods[m].knobs)
            for m, n in shares.items()
            if n
        ]
        out = [c for turn in itertools.zip_longest(*per) for c in turn if c is not None]
        return out[:count]
    return _design_points(ctx, grid, count, seed_configs(ctx), ctx.space.search.knobs)


def _design_points(
    ctx: StudyContext, grid: list[TrialConfig], count: int, seeds: list[TrialConfig], specs: Any
) -> list[TrialConfig]:
    """``design_configs`` over ``grid`` (one method's configs, or the whole grid) whose knobs' specs are
    ``specs``."""
    if not grid or count <= 0:
        return []
    enc = Encoding.from_configs(grid)
    choice_knobs = [k for k in enc.knobs if isinstance(specs.get(k), Choices)]
    strata: dict[Any, list[TrialConfig]] = {}
    for c in grid:
        strata.setdefault((enc.group(c), tuple(c.knob(k) for k in choice_knobs)), []).append(c)
    seed = records.design_seed(ctx.study)
    rng = np.random.default_rng(seed)
    groups = sorted({g for g, _ in strata}, key=repr)
    values = {k: sorted({c.knob(k) for c in grid}) for k in choice_knobs}
    for k in choice_knobs:
        rng.shuffle(values[k])
    free = [i for i, k in enumerate(enc.knobs) if k not in choice_knobs]
    points = sobol_points(max(1, len(free)), 1 << math.ceil(math.log2(max(2, 4 * count))), seed)
    taken = {c.key() for c in seeds}
    out: list[TrialConfig] = []
    for i, x in enumerate(points):
        if len(out) >= count:
            break
        stratum = (groups[i % len(groups)], tuple(values[k][(i // len(groups)) % len(values[k])] for k in choice_knobs))
        pool = [c for c in strata.get(stratum, []) if c.key() not in taken]
        if not pool:
            continue
        coords = np.asarray([[enc.coords(c)[j] for j in free] for c in pool], dtype=float).reshape(len(pool), -1)
        dist = np.linalg.norm(coords - x[: coords.shape[1]], axis=1) if coords.shape[1] else np.zeros(len(pool))
        c = pool[int(np.argmin(dist))]
        taken.add(c.key())
        out.append(c)
    return out


@functools.cache
def _direction_numbers() -> tuple[np.ndarray, np.ndarray] | None:
    """Joe and Kuo's direction numbers as scipy ships them (its polynomials, its initial numbers), read by path:
    importing ``scipy.stats`` for them costs more CPU than a study's bookkeeping; None in another layout."""
    import scipy

    path = Path(scipy.__file__).parent / "stats" / "_sobol_direction_numbers.npz"
    if not path.exists():
        return None
    with np.load(path) as f:
        return f["poly"], f["vinit"]


def sobol_points(d: int, n: int, seed: int) -> np.ndarray:
    """The first ``n`` points of a scrambled Sobol sequence in ``d`` dimensions, bit for bit those of
    ``scipy.stats.qmc.Sobol(d, scramble=True, seed=seed).random(n)``: Bratley and Fox's recurrence over
    ``_direction_numbers``, a random lower-triangular linear scramble and a random digital shift drawn from
    ``np.random.default_rng(seed)`` as scipy draws them, the points in Gray-code order, 30 bits."""
    numbers = _direction_numbers()
    if numbers is None:
        from scipy.stats import qmc

        return qmc.Sobol(d=d, scramble=True, seed=seed).random(n)
    poly, vinit = numbers[0][:d].tolist(), numbers[1][:d].tolist()
    bits = 30
    v = np.ones((d, bits), dtype=np.int64)  # direction numbers, dimension x bit; the first dimension all ones
    for k in range(1, d):
        m = poly[k].bit_length() - 1  # the primitive polynomial's degree; its inner coefficients are the taps
        taps = [i for i in range(m) if poly[k] >> (m - 1 - i) & 1]
        row = vinit[k][:m]
        for j in range(m, bits):
            new = row[j - m]
            for i in taps:
                new ^= row[j - i - 1] << (i + 1)
            row.append(new)
        v[k] = row
    v <<= np.arange(bits - 1, -1, -1)
    rng = np.random.default_rng(seed)
    lsb_first = 1 << np.arange(bits)
    shift = rng.integers(2, size=(d, bits), dtype=np.uint32) @ lsb_first
    scramble = np.tril(rng.integers(2, size=(d, bits, bits), dtype=np.uint32))
    scramble[:, np.arange(bits), np.arange(bits)] = 1
    v_bits = v[:, :, None] >> np.arange(bits - 1, -1, -1) & 1  # dimension x bit j x its binary digits, MSB first
    v = (np.einsum("kpi,kji->kjp", scramble, v_bits) % 2) @ lsb_first[::-1]
    gray = np.arange(n) ^ np.arange(n) >> 1
    points = np.broadcast_to(shift, (n, d)).copy()
    for j in range(min(bits, n.bit_length())):
        points ^= np.where(gray[:, None] >> j & 1, v[:, j], 0)
    return points / 2**bits


def seed_configs(ctx: StudyContext) -> list[TrialConfig]:
    """The server's default config of every drafter under every CUDA-graph setting of the space, graphs on
    first: each drafter x CUDA-graph combination is measured early, not left to the sampler's luck (on an H200
    TPE once ran 12 of 16 trials with graphs off and never tried the best region with them on)."""
    out: list[TrialConfig] = []
    settings = sorted({bool(b) for b in ctx.space.search.cuda_graph}, reverse=True)
    defaults = ctx.backend.defaults(ctx.space)
    for cg in settings:
        for cfg in defaults:
            try:
                out.append(ctx.backend.resolve(dataclasses.replace(cfg, cuda_graph=cg), ctx.space))
            except InfeasibleConfig:
                continue
    return out


# ---------------------------------------------------------------------------------------------- the loop


def search(ctx: StudyContext, objective: TrialFn, n_trials: int, *, timeout_s: float | None = None) -> None:
    """Run the search until ``n_trials`` trials used the budget (resuming what the study already has). Parallel
    workers of one study (GPU slots, other nodes) share the budget exactly: each trial claims its place under the
    study lock (``_optimize``), and the last worker waits for the others' running trials instead of stopping."""
    recover_interrupted(ctx)
    with study_lock(ctx.study):  # two workers never queue the baselines (or the design) twice
        seed(ctx, n_trials)
    if remaining(ctx, n_trials) == 0:
        ctx.emit(Event("note", data={"message": f"search budget of {n_trials} trials already used"}))
        return
    if _stopped(ctx, n_trials):
        return
    deadline = None if timeout_s is None else ctx.clock.now() + timeout_s
    # Duplicates (the sampler proposing a config already measured) cost no server start and do not use the
    # budget; a cap on all trials keeps a small, exhausted space from looping forever.
    cap = len(records.trials(ctx.study)) + 4 * remaining(ctx, n_trials) + 20
    refine = refine_count(ctx, n_trials)

    def stop() -> bool:
        with records.reading(ctx.study):  # the settled check reads one snapshot
            return _stopped(ctx, n_trials) or settled_now(ctx, n_trials)

    _optimize(ctx, objective, n_trials - refine, cap, deadline, stop=stop)  # the sampler's share
    while sum(records.used_budget(ctx.study)) < n_trials and len(records.trials(ctx.study)) < cap:
        if deadline is not None and ctx.clock.now() >= deadline:
            return
        if stop():
            _wait_for_running(ctx)
            return
        if any(t.state == TrialState.WAITING for t in records.trials(ctx.study)):
            # a queued config (the defaults, the design, one a cut run left) runs before the surrogate picks, and
            # a pick is made on the evidence just before it runs, never queued behind them to run on stale evidence
            _optimize(ctx, objective, _next_target(ctx, n_trials), cap, deadline, stop=stop)
            continue
        model = surrogate(ctx)
        if model is None:  # too few measured configs yet: one more from the sampler
            _optimize(ctx, objective, _next_target(ctx, n_trials), cap, deadline, stop=stop)
            continue
        config = refine_next(ctx, model)
        if config is None:
            break

        def enqueue(config: TrialConfig = config) -> None:
            queue_pick(ctx, config)

        _optimize(ctx, objective, _next_target(ctx, n_trials), cap, deadline, prepare=enqueue)
    # nothing left for the surrogate to try: the sampler goes on; then wait for the other workers' last trials
    _optimize(ctx, objective, n_trials, cap, deadline, wait=True, stop=stop)
    if _stopped(ctx, n_trials):
        _wait_for_running(ctx)


def queue_pick(ctx: StudyContext, config: TrialConfig) -> None:
    records.enqueue_speculative(ctx.study, ctx.backend.params(config, ctx.space), seeded=records.SEEDED_SURROGATE)


def _wait_for_running(ctx: StudyContext) -> None:
    """After a settled stop: the other workers' trials still running finish (or their workers are found lost)
    before this worker goes on to confirmation, as at the end of the budget; at most one trial's time limit."""
    since = ctx.clock.now()
    while records.used_budget(ctx.study)[1] > 0:
        if ctx.clock.now() - since > trial_limit_s(ctx):
            ctx.emit(Event("note", data={"message": "stopped waiting for other workers' trials"}))
            return
        idle(ctx)


# ---------------------------------------------------------------------------------------------- a settled answer


def _stopped(ctx: StudyContext, n_trials: int) -> bool:
    """The search of this budget already stopped settled (this worker, another, or the run being resumed)."""
    state = records.search_settled(ctx.study)
    return state is not None and state.n_trials == n_trials


def settled_now(ctx: StudyContext, n_trials: int) -> bool:
    """Whether the answer is settled now (``settle``): checked between trials once the seeded configs (baselines,
    server defaults, the design) are measured and the surrogate has its points; when it is, the stop is recorded
    (``records.search_settled``), said in the live view, and every worker of the study stops before its next
    trial."""
    state = settled(ctx)
    if state is None or state.reason is None:
        return False
    stopped = dataclasses.replace(state, trials=records.counted_trials(ctx.study), n_trials=n_trials)
    records.set_search_settled(ctx.study, stopped)
    ctx.emit(Event("note", data={"message": stopped.text}))
    return True


def settled(ctx: StudyContext) -> records.Settled | None:
    """``settle.settle`` over the study's measurements, or None while the question is not asked: the space's
    ``budget.stop_when_settled`` is off, the space is not a finite grid, a config is still queued, the surrogate
    lacks points, or (``search.methods``) a method with unmeasured configs has fewer than ``MIN_OWN_EVIDENCE``
    measured configs of its own."""
    grid = ctx.grid
    if not ctx.space.budget.stop_when_settled or grid is None:
        return None
    trials = records.trials(ctx.study)
    if any(t.state == TrialState.WAITING for t in trials):  # the baselines, defaults and design come first
        return None
    model = surrogate(ctx)
    if model is None:
        return None
    # the answer is about configs the study could recommend: one judged lossy is measured (its speed stays in the
    # surrogate) but is not "the best measured" (on an H200 the fastest configs measured, up to 551 tok/s, were
    # all lossy, 70 tok/s above the best lossless one: docs/gpu-runs/2026-12-03-h200-gate)
    measured = recommendable(ctx, trials)
    if not measured:
        return None
    pool = _pool(ctx, trials)
    if isinstance(model, MethodSurrogate) and any(model.own(c) < MIN_OWN_EVIDENCE for c in pool):
        return None  # the stop asks every available method: one with unmeasured configs has its own evidence first
    fastest = fastest_baseline(ctx)
    return settle.settle(
        model,
        measured,
        pool,
        baseline_log=log_value(fastest) if fastest is not None else None,
        baseline_sd=model.noise_floor,
        resolution=RESOLUTION,
        min_gain=ctx.space.verdict.min_gain,
        threshold=SETTLE_PROBABILITY,
        samples=SETTLE_SAMPLES,
        seed=records.design_seed(ctx.study) + len(trials),
        # with load levels "the best is found" is the objective's answer only: each level's winner is a question
        # its surrogate does not see (scripts/bench_load.py: stopping on it missed a level's winner in 2 more
        # seeds of 20 and saved no GPU time); "nothing clears the bar" still stops the search
        improve_settles=_surrogate_picks(trials) >= IMPROVE_AFTER_PICKS and not ctx.space.benchmark.loaded,
    )


def recommendable(ctx: StudyContext, trials: list[Any] | None = None) -> list[TrialConfig]:
    """The measured speculative configs (effective, one per key) that the study could recommend: every observed
    config (``observations``) but those a trial judged lossy (``TrialRecord.lossy``)."""
    trials = records.trials(ctx.study) if trials is None else trials
    lossy = {
        r.effective_config().key()
        for r in (TrialRecord(t) for t in trials)
        if r.lossy and r.effective and not r.is_baseline
    }
    return [c for c in {c.key(): c for c, _ in observations(ctx)}.values() if c.key() not in lossy]


def _surrogate_picks(trials: list[Any]) -> int:
    """How many of the surrogate's own picks (``refine_next``) were measured."""
    return sum(
        1
        for t in trials
        if TrialRecord(t).seeded == records.SEEDED_SURROGATE and t.state in (TrialState.COMPLETE, TrialState.PRUNED)
    )


def _pool(ctx: StudyContext, trials: list[Any]) -> list[TrialConfig]:
    """The grid's configs not tried yet that could still be launched (not a drafter found not engaged, not
    predicted out of memory)."""
    tried = {TrialRecord(t).config_key for t in trials if TrialRecord(t).config_key}
    per_drafter = ctx.backend.not_engaged_is_per_drafter
    size_knob = ctx.backend.size_knob
    # only a trial that failed or was cut short can rule a config out: asked of the grid's every config, the
    # rules read these few (reading every trial per config was ~0.7 CPU-s of a 40-trial study)
    stopped = [t for t in trials if t.state in (TrialState.FAIL, TrialState.PRUNED) and TrialRecord(t).fail_kind]
    return [
        c
        for c, key in zip(ctx.grid or [], ctx.grid_keys, strict=True)
        if key not in tried
        and not (per_drafter and records.disengaged(ctx.study, c, stopped))
        and records.predicted_oom(ctx.study, c, size_knob, stopped) is None
    ]


def _next_target(ctx: StudyContext, n_trials: int) -> int:
    return min(n_trials, sum(records.used_budget(ctx.study)) + 1)


def _optimize(
    ctx: StudyContext,
    objective: TrialFn,
    target: int,
    cap: int,
    deadline: float | None,
    *,
    wait: bool = False,
    prepare: Callable[[], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Run trials, one at a time, until ``target`` trials used the budget (or the cap or the deadline).

    Each trial starts under the study lock: the worker counts what every worker used or claimed
    (``records.used_budget``), ``prepare()`` queues its config if any (once), Optuna creates the trial, and the
    trial claims its place (user attr ``claimed``) before the lock is released, so that parallel workers never
    take the same last place. When the places left are all claimed by running trials of other workers, ``wait``
    says whether to wait for them (one of them may end as a duplicate, or its worker may be lost and its trial
    queued again) or to return. ``stop()``, asked before each trial: the answer is settled, no more trials (asked
    under the lock, on the read of the trials the count is made on: one storage read a trial, not two)."""
    waited_since: float | None = None
    while True:
        with contextlib.ExitStack() as held:
            held.enter_context(study_lock(ctx.study))
            with records.reading(ctx.study):  # one read of the trials for the cap, the settled check and the count
                if len(records.trials(ctx.study)) >= cap:
                    return
                if deadline is not None and ctx.clock.now() >= deadline:
                    return
                if stop is not None and stop():
                    return
                done, running = records.used_budget(ctx.study)
            if done >= target:
                return
            if done + running >= target:
                held.close()
                if not wait:
                    return
                waited_since = ctx.clock.now() if waited_since is None else waited_since
                if ctx.clock.now() - waited_since > trial_limit_s(ctx):
                    ctx.emit(Event("note", data={"message": "stopped waiting for other workers' trials"}))
                    return
                idle(ctx)
                continue
            waited_since = None
            if prepare is not None:
                prepare()
                prepare = None

            current: list[optuna.Trial] = []

            def claimed(trial: optuna.Trial, current: list[optuna.Trial] = current) -> float:
                current.append(trial)
                records.TrialWriter(trial).claimed()
                held.close()  # the place is taken: other workers may start theirs
                return objective(trial)

            try:
                ctx.study.optimize(claimed, n_trials=1, catch=FAILURES, gc_after_trial=False, show_progress_bar=False)
            except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as e:
                # another worker failed this trial while it ran (its heartbeats were late: a stalled worker, a
                # database outage) and queued it again; this worker's server was stopped and it goes on
                if not current or not _optuna.frozen(current[0]).state.is_finished():
                    raise
                n = current[0].number
                ctx.emit(Event("note", n, {"message": f"trial {n} was failed by another worker meanwhile ({e})"}))


# ---------------------------------------------------------------------------------------------- the surrogate


def observations(ctx: StudyContext) -> list[tuple[TrialConfig, float]]:
    """(effective config, log tok/s) of every measured speculative start of the search (``measured_starts``)."""
    return [(c, v) for c, v, _ in measured_starts(ctx)]


def measured_starts(ctx: StudyContext) -> list[tuple[TrialConfig, float, float | None]]:
    """(effective config, log tok/s, log seconds per verification round or None) of every measured speculative
    start of the search. A pruned trial's few prompts are scaled by its baseline (its paired speedup x the
    baseline's tok/s over all prompts), so that prompts of different difficulty do not bias it, and its acceptance
    by the completed starts' on the same prompts (``surrogate.log_round_cost``). No round's cost with load levels
    (a round at a batch of many costs what that batch costs), with objective weights (the objective is then not
    the prompt set's tokens over its seconds)."""
    out: list[tuple[TrialConfig, float, float | None]] = []
    base_value: dict[Any, float] = {}
    # the factors hold where the objective is the prompt set's tokens over its seconds
    factored = not ctx.space.benchmark.loaded and not ctx.space.objective.weights
    done = records.trials(ctx.study, (TrialState.COMPLETE, TrialState.PRUNED))
    complete = [
        TrialRecord(t).prompt_results()
        for t in done
        if factored and t.state == TrialState.COMPLETE and records.is_measured_speculative(t)
    ]
    for t in done:
        r = TrialRecord(t)
        if not records.is_measured_speculative(t) or not r.effective:
            continue
        cfg = r.effective_config()
        value = float(t.value) if t.state == TrialState.COMPLETE and t.value and t.value > 0 else None
        if value is None and r.speedup and r.speedup > 0:
            cg = bool(cfg.cuda_graph)
            if cg not in base_value:
                b = records.find_baseline(ctx.study, cg)
                base_value[cg] = float(b.value) if b is not None and b.value else 0.0
            value = r.speedup * base_value[cg] if base_value[cg] > 0 else None
        if value is not None:
            log_v = math.log(value)
            cost = log_round_cost(r.prompt_results(), log_v, complete) if factored else None
            out.append((cfg, log_v, cost))
    return out


def surrogate(ctx: StudyContext, judged: TrialConfig | None = None) -> Model | None:
    """The surrogate of log tok/s (``autotune.surrogate.fit``: factored into acceptance and a round's cost where
    every start reports its acceptance; in a space with ``search.methods`` one per method, ``fit_by_method``), or
    None with fewer than ``MIN_SURROGATE_POINTS`` observations or no grid. ``judged``: a config the caller asks
    about from inside its own running trial (the launch gate), not counted among the configs being measured: counted
    at the model's own mean it would make the model certain of it (#46: an n-gram config truly 0.991 of the best
    was refused at predicted 0.895, sd 2.0%, with no measurement near it)."""
    grid = ctx.grid
    if grid is None:
        return None
    obs = measured_starts(ctx)
    if len({c.key() for c, _, _ in obs}) < MIN_SURROGATE_POINTS:
        return None
    floor = max(ctx.space.pruning.start_noise / math.sqrt(2), 0.005)
    seen = {c.key() for c, _, _ in obs}
    if judged is not None:
        seen.add(judged.key())
    pending = [c for c in running_configs(ctx) if c.key() not in seen]
    measured = tuple((c.key(), v, y) for c, v, y in obs)
    fitted_on = (measured, tuple(c.key() for c in pending), floor)
    fits = {k: m for k, m in ctx.surrogate_fit.items() if k[0] == measured}  # what no new observation outdated
    if fitted_on in fits:  # the settle check's fit, reused
        return fits[fitted_on]
    model: Model
    if ctx.space.search.methods:  # one model per method, none judged on another's data
        adaptive = {m for m in ctx.space.search.methods if ctx.backend.methods[m].adaptive}
        model = fit_by_method(
            grid,
            obs,
            key_of=_method_of,
            noise_floor=floor,
            min_own=MIN_OWN_EVIDENCE,
            pending=pending,
            unfactored=adaptive,
        )
    else:
        encoding = Encoding.from_configs(grid + [c for c, _, _ in obs])
        alone = (measured, (), floor)
        if pending and alone not in fits:  # the launch gate's fit counts its own running trial: one fit fewer
            fits[alone] = fit(encoding, obs, noise_floor=floor)
        model = fit(encoding, obs, noise_floor=floor, pending=pending, alone=fits.get(alone))
    fits[fitted_on] = model
    ctx.surrogate_fit = fits
    return model


def not_worth_a_start(ctx: StudyContext, config: TrialConfig, seeded: str | None) -> records.Skip | None:
    """Whether a proposal of the sampler (TPE) or of the design is not worth a server start: the surrogate gives it
    less than ``SKIP_BELOW`` probability of reaching the best measured config (the measured config
    with the highest posterior mean among those not judged lossy, or the fastest baseline when that is faster).
    Then it is not launched (the trial ends PRUNED without a measurement; ``trial.TrialObjective``) and what the
    surrogate said is returned for its record; None: launch it.

    Asked only where the answer is the objective's best config (not with load levels: a level's winner can be a
    config the objective never favours), once the surrogate has its points, and never for the baselines, the
    server defaults, the surrogate's own picks or a requeued config; in a space with ``search.methods`` never for
    the design, and only by the config's method's own model once that has ``MIN_OWN_EVIDENCE`` measured configs.
    On kimi (the field report's space) a third of the sampler's trials in a seed were graphs-off configs at 0.4x
    the graphs-on baseline, each a ten-minute start (scripts/bench_search.py)."""
    if config.is_baseline or seeded not in (None, records.SEEDED_DESIGN):
        return None
    if ctx.space.benchmark.loaded or ctx.grid is None:
        return None
    if ctx.space.search.methods and seeded == records.SEEDED_DESIGN:
        return None  # every method's share of the design is measured before the surrogate steers
    # In a method space the judged config is not counted among the running ones. Outside one it still is (its sd
    # there is the noise's, and the gate a "predicted at least SKIP_MARGIN slower" rule): not counting it there cost
    # kimi 4.7 -> 5.6 h and kimi-k2drafter 3.9 -> 5.6 h of median GPU time at the same hits (bench_search.py, 10
    # seeds), so the single-method gate stays as measured
    model = surrogate(ctx, judged=config if ctx.space.search.methods else None)
    if model is None:
        return None
    if isinstance(model, MethodSurrogate) and model.own(config) < MIN_OWN_EVIDENCE:
        return None  # its method's own evidence is too thin to keep it from a start
    measured = recommendable(ctx)  # a lossy config's speed is no bar to clear
    try:
        if isinstance(model, MethodSurrogate):  # each of its method's models, each at its held-out error
            opinions = model.opinions(config)
        else:
            (mu,), (sd,) = model.predict([config])
            opinions = [(float(mu), float(sd))]
    except (KeyError, ValueError):  # a config outside the grid's encoding: no opinion
        return None
    bars: list[tuple[float, Any, str]] = []  # (log tok/s, its trial, how the reason names it)
    if measured:
        means, _ = model.predict(measured)
        i = int(np.argmax(means))
        best = records.find_duplicate(ctx.study, measured[i].key(), -1)
        bars.append((float(means[i]), best, f"trial {best.number}'s" if best else "the best measured config's"))
    fastest = fastest_baseline(ctx)
    if fastest is not None:
        bars.append((log_value(fastest), fastest, f"the baseline's (trial {fastest.number})"))
    if not bars:
        return None
    ref, against, what = max(bars, key=lambda b: b[0])  # the measured config on a tie, as before

    def reach(opinion: tuple[float, float]) -> float:
        return 0.5 * math.erfc((ref - opinion[0]) / (max(opinion[1], 1e-9) * math.sqrt(2)))

    mu, sd = max(opinions, key=reach)  # the most hopeful opinion: a start is refused only when every one refuses it
    p = reach((mu, sd))
    if p >= SKIP_BELOW or max(m for m, _ in opinions) > ref + math.log1p(-SKIP_MARGIN):
        return None
    return records.Skip(
        p=p,
        against=None if against is None else against.number,
        tok_per_s=math.exp(ref),
        predicted=math.exp(float(mu)),
        sd=float(sd),
        reason=(
            f"the surrogate gives it P = {p:.4f} of reaching {what} {math.exp(ref):.1f} tok/s (predicted "
            f"{math.exp(float(mu)):.1f} tok/s, sd {float(sd):.1%}: at least {SKIP_MARGIN:.0%} slower and P under "
            f"{SKIP_BELOW:g}: no server start)"
        ),
    )


def fastest_baseline(ctx: StudyContext) -> FrozenTrial | None:
    """The measured baseline trial with the highest tok/s over the space's CUDA-graph settings, or None."""
    base = [records.find_baseline(ctx.study, cg) for cg in sorted({bool(b) for b in ctx.space.search.cuda_graph})]
    return max((b for b in base if b is not None and b.value), key=lambda b: b.value or 0.0, default=None)


def log_value(t: FrozenTrial) -> float:
    if not t.value:
        raise ValueError(f"trial {t.number} has no measured tok/s")
    return math.log(t.value)


def running_configs(ctx: StudyContext) -> list[TrialConfig]:
    """The effective speculative configs other workers are measuring right now (none with one worker: the
    surrogate is consulted between trials). The surrogate counts them as measured at its own posterior mean
    ("kriging believer"), so that parallel picks spread out instead of crowding one peak."""
    out: list[TrialConfig] = []
    for t in records.trials(ctx.study, (TrialState.RUNNING,)):
        r = TrialRecord(t)
        if not r.is_baseline and not r.is_duplicate and r.effective:
            cfg = r.effective_config()
            if not cfg.is_baseline:
                out.append(cfg)
    return out


def refine_next(ctx: StudyContext, model: Model | None = None) -> TrialConfig | None:
    """The unmeasured config with the highest upper confidence bound (posterior mean + ``REFINE_KAPPA`` sd):
    near the top but not yet measured, which is where a sharp optimum on the space's edge hides (expected
    improvement, tried first, stayed next to lucky measurements: scripts/bench_search.py). None when there is
    no surrogate or nothing left to try."""
    model = model or surrogate(ctx)
    grid = ctx.grid
    if model is None or grid is None:
        return None
    trials = records.trials(ctx.study)  # one read: the checks below run for every grid point
    pool = _pool(ctx, trials)
    if not pool:
        return None
    queued = {
        json.dumps(_optuna.params_of(t), sort_keys=True)
        for t in trials
        if t.state in (TrialState.WAITING, TrialState.RUNNING)
    }
    mean, sd = model.predict(pool)
    for i in np.argsort(-(mean + REFINE_KAPPA * sd), kind="stable"):
        c = pool[int(i)]
        if json.dumps(ctx.backend.params(c, ctx.space), sort_keys=True) not in queued:
            return c
    return None

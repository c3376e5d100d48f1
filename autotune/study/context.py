"""What every job of a study shares: the space, the backend, the seam to the world (runner and clock), the study,
the listener, and what is derived from them once (the grid, the lossless check's tolerance); the lossless check's
records: a trial's answers against its baseline's, a new baseline's against the other baselines' (the server's own
numerics, ``lossless_floor``), and confirmation's fresh baselines against the search's.

Progress events (``Event``): what the study tells its listener (the live view, logs, benchmark timers). Waiting for
other workers of a shared study: how long one trial can take (``trial_limit_s``), and one bounded look at the study
(``idle``)."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless, records
from autotune.backends.base import Backend
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.evidence import Evidence
from autotune.objective import Objective
from autotune.pruner import BaselinePruner
from autotune.seam import Clock, MonotonicClock, Runner, VirtualClock
from autotune.space import Space
from autotune.study.storage import GRACE_PERIOD_FACTOR, HEARTBEAT_INTERVAL_S, make_pruner


@dataclass
class Event:
    """Progress for live views and logs; the loop never depends on who listens.

    Kinds: ``trial-start`` (``config``: its label), ``launched`` (``startup_s``), ``prompt`` (``index``, ``of``,
    ``tok_per_s``, ``accept_length``), ``trial-end`` (``state``, ``reason``, ``tok_per_s``, ``speedup``, ``budget``:
    it used a place in the budget, ``duplicate``, ``not_launched``: the launch gate kept it from a start,
    ``seeded``; once per trial, the last thing it does), ``confirm-start``, ``confirm-measure``, ``verdict``,
    ``note`` (``message``)."""

    kind: str
    trial: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[Event], None]


def quiet(_: Event) -> None:
    return None


@dataclass
class StudyContext:
    space: Space
    backend: Backend
    runner: Runner
    study: optuna.Study
    clock: Clock = field(default_factory=MonotonicClock)
    emit: Listener = quiet
    evidence: Evidence | None = None  # where each trial's log, prompts and note go for the dashboard
    pruner: BaselinePruner = field(init=False)
    #: the surrogates fitted (``search.surrogate``) by what they were fitted on: one fit per observation set
    surrogate_fit: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)
    #: finished baselines' reference answers, parsed once (a finished trial never changes; parsing a baseline's
    #: token log-probabilities for every trial's lossless check was 0.39 CPU-s of a 40-trial study)
    _references: dict[int, list[Any]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.pruner = make_pruner(self.space)

    @property
    def objective(self) -> Objective:
        """The study's objective (the pruner's, built from the space)."""
        return self.pruner.objective

    @functools.cached_property
    def grid(self) -> list[TrialConfig] | None:
        """Every feasible speculative config (``Backend.grid``), enumerated once; None when not enumerable."""
        try:
            return self.backend.grid(self.space)
        except InfeasibleConfig:
            return None

    @functools.cached_property
    def grid_keys(self) -> list[str]:
        """``grid``'s configs' keys, in its order (the search asks them of every config between trials)."""
        return [c.key() for c in self.grid or []]

    @functools.cached_property
    def tie_tolerance(self) -> tuple[float, str]:
        """The near-tie tolerance of the lossless check (nats) and where it comes from: the space's
        ``verdict.tie_tolerance``, else the target's data type (``lossless.default_tolerance``)."""
        if self.space.verdict.tie_tolerance is not None:
            return float(self.space.verdict.tie_tolerance), "verdict.tie_tolerance"
        dtype = lossless.model_dtype(self.space.server.model_path, self.space.server.extra_args)
        return lossless.default_tolerance(dtype), f"default for {dtype}" if dtype else "default (data type unknown)"

    def lossless_tolerance(self) -> float:
        """The tolerance in force: the configured one, raised to the floor (the largest margin at which this
        server's baselines diverged from each other: there, divergence is this server's numerics)."""
        floor = [f.divergence for f in records.lossless_floor(self.study) if f.divergence is not None]
        return max(self.tie_tolerance[0], lossless.floor(floor))

    def compare_outputs(self, texts: list[str], baseline: FrozenTrial, tolerance: float) -> dict[str, Any]:
        """``texts`` (one answer per prompt) against ``baseline``'s answers, judged at its reference answers."""
        base = records.TrialRecord(baseline)
        refs = self._references.get(baseline.number)
        if refs is None:
            refs = base.references()
            if baseline.state.is_finished():
                self._references[baseline.number] = refs
        return lossless.check_outputs(
            texts,
            base.outputs,
            refs,
            tolerance=tolerance,
            min_prefix=self.space.verdict.lossless_min_prefix,
        )

    def lossless_record(self, texts: list[str], baseline: FrozenTrial) -> dict[str, Any]:
        """The lossless record of ``texts`` (one answer per prompt) against ``baseline``'s answers and references."""
        record = self.compare_outputs(texts, baseline, self.lossless_tolerance())
        record["tolerance_source"] = self.tie_tolerance[1]
        return record

    def baseline_floor(self, number: int, config: TrialConfig, texts: list[str]) -> None:
        """Compare a new baseline's answers with every other baseline's (another CUDA-graph setting: other kernels
        and batch shapes; a fresh start in confirmation): a divergence there is this server's own numerics. Each
        classified divergence joins the study's ``lossless_floor``; a confident one raises the tolerance in force
        (``lossless_tolerance``) and is reported."""
        floor = records.lossless_floor(self.study)
        for other in records.trials(self.study, (TrialState.COMPLETE,)):
            r = records.TrialRecord(other)
            if other.number == number or not r.is_baseline or r.is_duplicate or not r.outputs:
                continue
            rec = self.compare_outputs(texts, other, self.tie_tolerance[0])
            for d in rec["divergences"]:
                floor.append(
                    records.FloorEntry(number, config.cuda_graph, lossless.Divergence.from_dict(d), other.number)
                )
        floor.append(records.FloorEntry(number, config.cuda_graph))
        records.set_lossless_floor(self.study, floor)

    def confirmation_floor(self, config: TrialConfig, texts: list[str]) -> None:
        """A fresh baseline start of confirmation against the search's baseline of the same setting: the floor."""
        base = records.find_baseline(self.study, config.cuda_graph)
        if base is None or not records.TrialRecord(base).outputs:
            return
        rec = self.compare_outputs(texts, base, self.tie_tolerance[0])
        if rec["divergences"]:
            floor = records.lossless_floor(self.study)
            for d in rec["divergences"]:
                floor.append(
                    records.FloorEntry("confirmation", config.cuda_graph, lossless.Divergence.from_dict(d), base.number)
                )
            records.set_lossless_floor(self.study, floor)


#: seconds (on the study's clock) between two looks at the study while waiting for other workers
POLL_S = 2.0
#: wall seconds a worker on a ``VirtualClock`` (``--in-process``) pauses between two looks
IDLE_WALL_S = 0.05


def trial_limit_s(ctx: StudyContext) -> float:
    """The longest one trial can take (server start, warm-up, every prompt and reference answer with every
    retry), plus three heartbeat grace periods: how long a worker waits for another worker's trial."""
    server, bench = ctx.space.server, ctx.space.benchmark
    requests = bench.warmup_requests + 2 * len(bench.prompts)
    return (
        server.startup_timeout_s
        + requests * server.request_timeout_s * (bench.retries + 1)
        + (3 * GRACE_PERIOD_FACTOR * HEARTBEAT_INTERVAL_S)
    )


def idle(ctx: StudyContext) -> None:
    """One wait for other workers: fail trials of lost workers (stale heartbeats; their configs are queued again),
    then sleep ``POLL_S``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(ctx.study)
    ctx.clock.sleep(POLL_S)
    if type(ctx.clock) is VirtualClock:  # does not wait: a worker of an in-process study would spin on the database
        time.sleep(IDLE_WALL_S)

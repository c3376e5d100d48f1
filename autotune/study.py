"""The tuning loop: baselines first, then an Optuna search with baseline-relative pruning, then confirmation.

This module talks to the world only through a ``Runner`` (which starts servers and measures prompts) and a
``Clock``; the same orchestration runs against real servers, the simulator as a process, or the simulator's
model in-process on a virtual clock.

Outcome vocabulary (Optuna's): a measured config is COMPLETE (value = tok/s over the prompt set); a config
that clearly lost to the baseline, or that the server would reject, or that ran out of memory is PRUNED (the
last two are also marked infeasible with a constraint, so the sampler learns to avoid them); a server that
crashed, hung, or whose drafter was not engaged is FAIL with the reason and the log tail.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless
from autotune.backends.base import Backend
from autotune.clock import Clock, MonotonicClock
from autotune.config import PromptResult, ReferenceOutput, TrialConfig, summarize
from autotune.errors import (
    BenchmarkError,
    DrafterNotEngaged,
    InfeasibleConfig,
    LaunchError,
    ServerOOM,
    UserError,
)
from autotune.pruner import BaselinePruner, find_baseline, is_baseline_trial
from autotune.runner import Runner
from autotune.space import Space, VerdictSpec
from autotune.stats import Interval, log_ratios, speedup_interval, upper_bound, verdict
from autotune.surrogate import Encoding, Surrogate

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
SIZE_KNOBS = ("num_draft_tokens", "draft_n_max", "num_speculative_tokens")
MAX_CONSECUTIVE_LAUNCH_FAILURES = 3
MIN_SURROGATE_POINTS = 6
REFINE_KAPPA = 2.0
CANDIDATE_KAPPA = 2.0
WORKER = f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Event:
    """Progress for live views and logs; the loop never depends on who listens."""

    kind: str  # trial-start, launched, prompt, trial-end, confirm-start, confirm-measure, verdict, note
    trial: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[Event], None]


def _quiet(_: Event) -> None:
    return None


def study_name_for(space: Space, simulated: bool) -> str:
    """Simulated studies never share a name (and so never mix figures) with real ones."""
    return f"{space.name}-sim" if simulated else space.name


def default_storage(space: Space, simulated: bool, studies_dir: str = "studies") -> str:
    return space.storage or f"sqlite:///{studies_dir}/{study_name_for(space, simulated)}.db"


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """RDB storage; heartbeats (stale RUNNING trials failed and retried once) for server databases."""
    if url.startswith("sqlite"):
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 30}})
        _sqlite_pragmas(storage)
        return storage
    import sqlalchemy.exc

    # Workers started together race to create the schema on a fresh database: the loser retries (bounded).
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=60,
                grace_period=180,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
            )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _sqlite_pragmas(storage: optuna.storages.RDBStorage) -> None:
    """WAL + synchronous=NORMAL: a commit no longer waits for an fsync (dozens of writes per trial), and a crash
    still loses at most the last transaction, never the database."""
    from sqlalchemy import event

    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(storage.engine, "connect", _on_connect)
    storage.engine.dispose()


def make_pruner(space: Space) -> BaselinePruner:
    p = space.pruning
    return BaselinePruner(p.confidence, p.min_prompts, p.enabled, p.start_noise)


def make_sampler(space: Space, seed: int | None) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=max(3, min(8, space.budget.n_trials // 4)),
        )


def space_digest(space: Space) -> str:
    """What must not change under a running study: the prompt set and its generation settings."""
    b = space.benchmark
    blob = json.dumps(
        {
            "prompts": [[p.id, p.text] for p in b.prompts],
            "max_tokens": b.max_tokens,
            "temperature": b.temperature,
            "backend": space.server.backend,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def open_study(
    space: Space,
    storage: str | optuna.storages.BaseStorage,
    study_name: str,
    *,
    seed: int | None = None,
    simulated: bool = False,
    create: bool = True,
    label: dict[str, Any] | None = None,
    sampler: optuna.samplers.BaseSampler | None = None,
) -> optuna.Study:
    """Create or load the study; refuse to resume one measured with a different prompt set."""
    st = make_storage(storage) if isinstance(storage, str) else storage
    pruner = make_pruner(space)
    sampler = sampler or make_sampler(space, seed)
    if not create:
        try:
            return optuna.load_study(study_name=study_name, storage=st, sampler=sampler, pruner=pruner)
        except KeyError:
            raise UserError(
                f"no study named {study_name!r} in {storage if isinstance(storage, str) else 'storage'}"
                f": run `autotune study` first"
            ) from None
    study = optuna.create_study(
        study_name=study_name, storage=st, sampler=sampler, pruner=pruner, direction="maximize", load_if_exists=True
    )
    digest = space_digest(space)
    attrs = study.user_attrs
    if "space_digest" not in attrs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["tok_per_s"])
        study.set_user_attr("space_digest", digest)
        study.set_user_attr("space_name", space.name)
        study.set_user_attr("backend", space.server.backend)
        study.set_user_attr("simulated", label if simulated else None)
        study.set_user_attr("prompt_ids", [p.id for p in space.benchmark.prompts])
        study.set_user_attr("units", "simulated hardware tok/s" if simulated else "tok/s")
    elif attrs["space_digest"] != digest:
        raise UserError(
            f"study {study_name!r} was measured with a different prompt set, max_tokens, temperature or backend; "
            "its figures cannot be compared with new ones. Use a new `name:` in the space file or another --storage."
        )
    return study


# ---------------------------------------------------------------------------------------------- helpers


def _size(config: TrialConfig) -> int | None:
    for k in SIZE_KNOBS:
        v = config.knob(k)
        if v is not None:
            return int(v)
    return None


def _trials(study: optuna.Study, states=None) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=states)


def _find_duplicate(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    for t in _trials(study, (TrialState.COMPLETE, TrialState.PRUNED)):
        if (
            t.number != number
            and t.user_attrs.get("config_key") == key
            and "duplicate_of" not in t.user_attrs
            and t.user_attrs.get("measured")
        ):
            return t
    return None


RETRIED_FAILURES = ("exited", "startup-timeout", "launch-failed", "server-died", "benchmark-failed")


def _failed_twice(study: optuna.Study, key: str) -> list[FrozenTrial]:
    """Two launched trials of this server config that failed (crash, hang, benchmark failure), else []."""
    failed = [
        t
        for t in _trials(study, (TrialState.FAIL,))
        if t.user_attrs.get("config_key") == key
        and t.user_attrs.get("fail_kind") in RETRIED_FAILURES
        and not t.user_attrs.get("interrupted")
        and not t.user_attrs.get("not_launched")
    ]
    return failed[:2] if len(failed) >= 2 else []


def _disengaged(
    study: optuna.Study, config: TrialConfig, trials: list[FrozenTrial] | None = None
) -> FrozenTrial | None:
    for t in _trials(study, (TrialState.FAIL,)) if trials is None else trials:
        if (
            t.state == TrialState.FAIL
            and t.user_attrs.get("fail_kind") == DrafterNotEngaged.kind
            and t.params.get("drafter") == config.drafter
        ):
            return t
    return None


def _predicted_oom(
    study: optuna.Study, config: TrialConfig, trials: list[FrozenTrial] | None = None
) -> FrozenTrial | None:
    size = _size(config)
    if size is None:
        return None
    for t in _trials(study, (TrialState.PRUNED,)) if trials is None else trials:
        if t.state != TrialState.PRUNED or t.user_attrs.get("fail_kind") != ServerOOM.kind:
            continue
        eff = TrialConfig.from_dict(t.user_attrs.get("effective", {}))
        other = _size(eff)
        if (
            eff.drafter == config.drafter
            and eff.cuda_graph == config.cuda_graph
            and other is not None
            and size >= other
        ):
            return t
    return None


def _consecutive_launch_failures(study: optuna.Study) -> int:
    """Servers that failed to start in a row since the last measured one. Once a speculative config has run, a
    failing one is that config's problem (the study goes on): then 0."""
    trials = _trials(study, COUNTED)
    if any(t.user_attrs.get("measured") and not is_baseline_trial(t) for t in trials):
        return 0
    n = 0
    for t in sorted(trials, key=lambda t: t.number, reverse=True):
        if t.user_attrs.get("not_launched"):
            continue
        if t.user_attrs.get("fail_kind") in ("exited", "startup-timeout", "launch-failed"):
            n += 1
        elif t.user_attrs.get("measured"):
            break
    return n


def _mean_log(rounds: list[dict[str, Any]], key: str) -> float:
    xs = [math.log(r["candidates"][key]) for r in rounds if r["candidates"].get(key)]
    return sum(xs) / len(xs) if xs else -math.inf


def race_survivors(rounds: list[dict[str, Any]], keys: list[str], spec: VerdictSpec) -> list[str]:
    """The candidates (trial numbers as strings) still racing after ``rounds`` of confirmation.

    A candidate leaves the race once the one-sided ``spec.race_confidence`` upper bound of its mean log
    tok/s ratio to the current leader, over the rounds both were measured in, is below 0: it is clearly
    slower. The ratio is taken within a round (same fresh baseline, same conditions), so drift cancels. Dropped
    candidates stay dropped; nobody is dropped before ``spec.repeats`` rounds."""
    active = list(keys)
    for i in range(spec.repeats, len(rounds) + 1):
        done = rounds[:i]
        if len(active) <= 1:
            break
        leader = max(active, key=lambda k, done=done: _mean_log(done, k))
        keep = [leader]
        for k in active:
            if k == leader:
                continue
            diffs = [
                math.log(r["candidates"][k] / r["candidates"][leader])
                for r in done
                if r["candidates"].get(k) and r["candidates"].get(leader)
            ]
            if len(diffs) < 2 or upper_bound(diffs, spec.race_confidence, 0.0) >= 1.0:
                keep.append(k)
        active = [k for k in active if k in keep]
    return active


# ---------------------------------------------------------------------------------------------- the search


class Orchestrator:
    """Runs the search phase and the confirmation phase of one study."""

    def __init__(
        self,
        space: Space,
        backend: Backend,
        runner: Runner,
        study: optuna.Study,
        *,
        clock: Clock | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.space = space
        self.backend = backend
        self.runner = runner
        self.study = study
        self.clock = clock or MonotonicClock()
        self.emit = listener or _quiet
        self.pruner = make_pruner(space)

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
        floor = lossless.floor(self.study.user_attrs.get("lossless_floor", []))
        return max(self.tie_tolerance[0], floor)

    # -- budget -------------------------------------------------------------------------------------
    def counted_trials(self, running: bool = False) -> int:
        """Trials that used the budget: measured, failed or infeasible; not duplicates nor interrupted ones."""
        states = COUNTED + ((TrialState.RUNNING,) if running else ())
        return sum(
            1
            for t in _trials(self.study, states)
            if not t.user_attrs.get("interrupted") and "duplicate_of" not in t.user_attrs
        )

    def remaining(self, n_trials: int) -> int:
        return max(0, n_trials - self.counted_trials())

    def _recover_interrupted(self) -> None:
        """Trials left RUNNING by a killed run (single-worker SQLite) are failed and their configs re-queued.
        (With a server database, Optuna's heartbeat fails and retries stale trials instead.)"""
        storage = getattr(self.study._storage, "_backend", self.study._storage)
        if not isinstance(storage, optuna.storages.RDBStorage) or not str(storage.engine.url).startswith("sqlite"):
            return
        for t in _trials(self.study, (TrialState.RUNNING,)):
            storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            storage.set_trial_user_attr(t._trial_id, "fail_reason", "the orchestrator stopped during this trial")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            if not is_baseline_trial(t):  # baselines are re-queued by _seed
                self.study.enqueue_trial(t.params, user_attrs={"role": "speculative", "requeued_from": t.number})

    def _seed(self) -> None:
        """Baselines first (one per CUDA-graph setting), then the server's own defaults."""
        trials = _trials(self.study)
        live = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
        have_baseline = {t.params.get("cuda_graph") for t in trials if is_baseline_trial(t) and t.state in live}
        for cg in self.space.search.cuda_graph:
            if cg not in have_baseline:
                self.study.enqueue_trial({"cuda_graph": cg}, user_attrs={"role": "baseline"})
        queued = {json.dumps(t.params, sort_keys=True) for t in trials}
        to_params = getattr(self.backend, "params", None)
        for cfg in self.seed_configs():
            params = to_params(cfg, self.space) if to_params else cfg.to_dict()
            key = json.dumps(params, sort_keys=True)
            if key not in queued:
                queued.add(key)
                self.study.enqueue_trial(params, user_attrs={"role": "speculative", "seeded": "server default"})

    def seed_configs(self) -> list[TrialConfig]:
        """The server's default config of every drafter under every CUDA-graph setting of the space, graphs on
        first: each drafter x CUDA-graph combination is measured early, not left to the sampler's luck (on an H200
        TPE once ran 12 of 16 trials with graphs off and never tried the best region with them on)."""
        out: list[TrialConfig] = []
        settings = sorted({bool(b) for b in self.space.search.cuda_graph}, reverse=True)
        defaults = self.backend.defaults(self.space)
        for cg in settings:
            for cfg in defaults:
                try:
                    out.append(self.backend.resolve(TrialConfig(cfg.drafter, cg, cfg.knobs), self.space))
                except InfeasibleConfig:
                    continue
        return out

    def refine_count(self, n_trials: int) -> int:
        """How many of the last trials the surrogate picks (``budget.refine_trials``; auto: half, the share that
        met the targets on every benchmark landscape where a quarter and three quarters each missed one)."""
        if self.grid is None:
            return 0
        r = self.space.budget.refine_trials
        return min(n_trials, n_trials // 2 if r is None else r)

    @functools.cached_property
    def grid(self) -> list[TrialConfig] | None:
        """Every feasible speculative config (``Backend.grid``), enumerated once; None when not enumerable."""
        try:
            return self.backend.grid(self.space)
        except InfeasibleConfig:
            return None

    def search(self, n_trials: int, *, timeout_s: float | None = None) -> None:
        self._recover_interrupted()
        self._seed()
        if self.remaining(n_trials) == 0:
            self.emit(Event("note", data={"message": f"search budget of {n_trials} trials already used"}))
            return
        deadline = None if timeout_s is None else self.clock.now() + timeout_s
        # Duplicates (the sampler proposing a config already measured) cost no server start and do not use the
        # budget; a cap on all trials keeps a small, exhausted space from looping forever.
        cap = len(_trials(self.study)) + 4 * self.remaining(n_trials) + 20
        refine = self.refine_count(n_trials)
        self._optimize(n_trials - refine, cap, deadline)  # the sampler's share
        while self.remaining(n_trials) > 0 and len(_trials(self.study)) < cap:
            if deadline is not None and self.clock.now() >= deadline:
                return
            model = self.surrogate()
            if model is None:  # too few measured configs yet: one more from the sampler
                self._optimize(self.counted_trials() + 1, cap, deadline)
                continue
            config = self.refine_next(model)
            if config is None:
                break
            params = self.backend.params(config, self.space)  # type: ignore[attr-defined]
            self.study.enqueue_trial(params, user_attrs={"role": "speculative", "seeded": "surrogate"})
            self._optimize(self.counted_trials() + 1, cap, deadline)
        self._optimize(n_trials, cap, deadline)  # nothing left for the surrogate to try: the sampler goes on

    def _optimize(self, target: int, cap: int, deadline: float | None) -> None:
        """Run trials until ``target`` trials used the budget (or the cap or the deadline)."""

        def budget_callback(study: optuna.Study, _t: FrozenTrial) -> None:
            if self.counted_trials(running=True) >= target or len(_trials(study)) >= cap:
                study.stop()
            if deadline is not None and self.clock.now() >= deadline:
                study.stop()

        while self.remaining(target) > 0 and len(_trials(self.study)) < cap:
            if deadline is not None and self.clock.now() >= deadline:
                break
            self.study.optimize(
                self.objective,
                n_trials=self.remaining(target),
                catch=(LaunchError, BenchmarkError, DrafterNotEngaged),
                callbacks=[budget_callback],
                gc_after_trial=False,
                show_progress_bar=False,
            )

    # -- the surrogate ------------------------------------------------------------------------------
    def observations(self) -> list[tuple[TrialConfig, float]]:
        """(effective config, log tok/s) of every measured speculative start of the search. A pruned trial's few
        prompts are scaled by its baseline (its paired speedup x the baseline's tok/s over all prompts), so that
        prompts of different difficulty do not bias it."""
        out: list[tuple[TrialConfig, float]] = []
        base_value: dict[Any, float] = {}
        for t in _trials(self.study, (TrialState.COMPLETE, TrialState.PRUNED)):
            if is_baseline_trial(t) or "duplicate_of" in t.user_attrs or not t.user_attrs.get("measured"):
                continue
            eff = t.user_attrs.get("effective")
            if not eff:
                continue
            cfg = TrialConfig.from_dict(eff)
            if t.state == TrialState.COMPLETE and t.value and t.value > 0:
                out.append((cfg, math.log(t.value)))
                continue
            speedup = t.user_attrs.get("speedup")
            if speedup and speedup > 0:
                cg = bool(cfg.cuda_graph)
                if cg not in base_value:
                    b = find_baseline(self.study, cg)
                    base_value[cg] = float(b.value) if b is not None and b.value else 0.0
                if base_value[cg] > 0:
                    out.append((cfg, math.log(speedup * base_value[cg])))
        return out

    def surrogate(self) -> Surrogate | None:
        """The GP over log tok/s, or None with fewer than ``MIN_SURROGATE_POINTS`` observations or no grid."""
        grid = self.grid
        if grid is None:
            return None
        obs = self.observations()
        if len({c.key() for c, _ in obs}) < MIN_SURROGATE_POINTS:
            return None
        floor = max(self.space.pruning.start_noise / math.sqrt(2), 0.005)
        return Surrogate(Encoding.from_configs(grid + [c for c, _ in obs]), obs, noise_floor=floor)

    def refine_next(self, model: Surrogate | None = None) -> TrialConfig | None:
        """The unmeasured config with the highest upper confidence bound (posterior mean + ``REFINE_KAPPA`` sd):
        near the top but not yet measured, which is where a sharp optimum on the space's edge hides (expected
        improvement, tried first, stayed next to lucky measurements: scripts/bench_search.py). None when there is
        no surrogate or nothing left to try."""
        model = model or self.surrogate()
        grid = self.grid
        if model is None or grid is None:
            return None
        trials = _trials(self.study)  # one read: the checks below run for every grid point
        tried = {t.user_attrs.get("config_key") for t in trials if t.user_attrs.get("config_key")}
        per_drafter = getattr(self.backend, "not_engaged_is_per_drafter", True)
        pool = [
            c
            for c in grid
            if c.key() not in tried
            and not (per_drafter and _disengaged(self.study, c, trials))
            and _predicted_oom(self.study, c, trials) is None
        ]
        if not pool:
            return None
        queued = {
            json.dumps(t.params, sort_keys=True) for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)
        }
        mean, sd = model.predict(pool)
        for i in np.argsort(-(mean + REFINE_KAPPA * sd), kind="stable"):
            c = pool[int(i)]
            if json.dumps(self.backend.params(c, self.space), sort_keys=True) not in queued:  # type: ignore[attr-defined]
                return c
        return None

    # -- one trial ----------------------------------------------------------------------------------
    def objective(self, trial: optuna.Trial) -> float:
        try:
            return self._objective(trial)
        except KeyboardInterrupt:
            # the server was stopped by the session's close(); the trial does not use the budget and its config is
            # measured again when the study resumes
            trial.set_user_attr("interrupted", True)
            if not trial.user_attrs.get("role") == "baseline":
                self.study.enqueue_trial(
                    dict(trial.params), user_attrs={"role": "speculative", "requeued_from": trial.number}
                )
            raise

    def _objective(self, trial: optuna.Trial) -> float:
        space = self.space
        if trial.user_attrs.get("role") == "baseline":
            config = TrialConfig.baseline(bool(trial.suggest_categorical("cuda_graph", list(space.search.cuda_graph))))
        else:
            config = self.backend.suggest(trial, space)
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("role", "baseline" if config.is_baseline else "speculative")
        trial.set_user_attr("worker", WORKER)
        self.emit(Event("trial-start", trial.number, {"config": config.label()}))
        try:
            eff = self.backend.resolve(config, space)
        except InfeasibleConfig as e:
            self._infeasible(trial, str(e))
        trial.set_user_attr("effective", eff.to_dict())
        key = eff.key()
        trial.set_user_attr("config_key", key)

        dup = _find_duplicate(self.study, key, trial.number)
        if dup is not None:
            return self._reuse(trial, dup)
        crashed = _failed_twice(self.study, key)
        if crashed:
            # a config whose server failed twice is not launched a third time (one retry covers transient faults)
            msg = (
                f"the same server config failed in trials {crashed[0].number} and {crashed[1].number}; "
                "not launched again"
            )
            trial.set_user_attr("fail_kind", crashed[-1].user_attrs.get("fail_kind"))
            trial.set_user_attr("fail_reason", msg)
            trial.set_user_attr("not_launched", True)
            self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": msg}))
            raise LaunchError(msg)
        if not eff.is_baseline and getattr(self.backend, "not_engaged_is_per_drafter", True):
            bad = _disengaged(self.study, eff)
            if bad is not None:
                trial.set_user_attr("fail_kind", DrafterNotEngaged.kind)
                msg = (
                    f"drafter {eff.drafter!r} was not engaged in trial {bad.number} "
                    f"({bad.user_attrs.get('fail_reason', '')}); not launched again"
                )
                trial.set_user_attr("fail_reason", msg)
                self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": msg}))
                raise DrafterNotEngaged(msg)
            oom = _predicted_oom(self.study, eff)
            if oom is not None:
                oom_size = _size(TrialConfig.from_dict(oom.user_attrs["effective"]))
                self._infeasible(
                    trial,
                    f"trial {oom.number} ran out of memory at size {oom_size}; size {_size(eff)} is at least as large",
                    kind=ServerOOM.kind,
                )
        baseline = None
        if not eff.is_baseline:
            baseline = find_baseline(self.study, eff.cuda_graph)
        return self._measure(trial, eff, baseline)

    def _infeasible(self, trial: optuna.Trial, reason: str, kind: str = "infeasible") -> None:
        trial.set_user_attr("fail_kind", kind)
        trial.set_user_attr("infeasible", reason)
        trial.set_user_attr("feasible", False)
        trial.set_constraint("feasible", 1.0)
        self.emit(Event("trial-end", trial.number, {"state": "PRUNED", "reason": reason}))
        raise optuna.TrialPruned(reason)

    def _reuse(self, trial: optuna.Trial, dup: FrozenTrial) -> float:
        trial.set_user_attr("duplicate_of", dup.number)
        for k in ("speedup", "accept_length", "prompts", "baseline_trial", "lossless", "startup_s"):
            if k in dup.user_attrs:
                trial.set_user_attr(k, dup.user_attrs[k])
        for step, v in sorted(dup.intermediate_values.items()):
            trial.report(v, step)
        self.emit(
            Event(
                "trial-end",
                trial.number,
                {
                    "state": dup.state.name,
                    "reason": f"same server config as trial {dup.number}",
                    "tok_per_s": dup.value,
                },
            )
        )
        if dup.state == TrialState.PRUNED:
            if dup.user_attrs.get("feasible") is False:
                trial.set_constraint("feasible", 1.0)
            raise optuna.TrialPruned(f"same server config as trial {dup.number}, which was pruned")
        return float(dup.value)

    def _measure(self, trial: optuna.Trial, config: TrialConfig, baseline: FrozenTrial | None) -> float:
        space = self.space
        prompts = space.benchmark.prompts
        if baseline is not None:
            trial.set_user_attr("baseline_trial", baseline.number)
        try:
            session = self.runner.launch(config)
        except ServerOOM as e:
            trial.set_user_attr("log_tail", e.log_tail[-4000:])
            trial.set_user_attr("log_path", e.log_path)
            self._infeasible(trial, f"out of memory at startup: {e}", kind=ServerOOM.kind)
        except LaunchError as e:
            trial.set_user_attr("fail_kind", e.kind)
            trial.set_user_attr("fail_reason", str(e))
            trial.set_user_attr("log_tail", e.log_tail[-4000:])
            trial.set_user_attr("log_path", e.log_path)
            self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": str(e)}))
            if config.is_baseline:
                raise UserError(
                    f"the baseline server ({config.label()}) did not start: {e}\n"
                    f"last lines of its log ({e.log_path}):\n{e.log_tail[-1500:]}"
                ) from e
            if _consecutive_launch_failures(self.study) + 1 >= MAX_CONSECUTIVE_LAUNCH_FAILURES:
                raise UserError(
                    f"{MAX_CONSECUTIVE_LAUNCH_FAILURES} servers in a row failed to start; the last: {e}\n"
                    f"log: {e.log_path}"
                ) from e
            raise
        results: list[PromptResult] = []
        try:
            info = session.info
            trial.set_user_attr("argv", list(info.argv))
            trial.set_user_attr("env", dict(info.env))
            trial.set_user_attr("server_effective", info.effective)
            check = getattr(self.backend, "check_effective", None)
            if check is not None and info.effective:
                eff_read = info.effective
                if "num_steps" not in eff_read and "cuda_graph" not in eff_read:  # raw server info
                    eff_read = self.backend.read_effective(eff_read)
                mismatch = check(config, eff_read)
                if mismatch:
                    # the server runs something else than what was asked: never record it under the wrong config
                    msg = "the server resolved a different config than launched: " + "; ".join(mismatch)
                    trial.set_user_attr("fail_kind", "config-mismatch")
                    trial.set_user_attr("fail_reason", msg)
                    self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": msg}))
                    raise BenchmarkError(msg)
            trial.set_user_attr("startup_s", info.startup_s)
            trial.set_user_attr("log_path", info.log_path)
            trial.set_user_attr("measured", True)
            self.emit(Event("launched", trial.number, {"startup_s": info.startup_s}))
            session.warmup()
            for i in range(len(prompts)):
                r = session.run_prompt(i)
                results.append(r)
                trial.report(r.tok_per_s, i)
                trial.set_user_attr("prompts", [x.to_dict() for x in results])
                self.emit(
                    Event(
                        "prompt",
                        trial.number,
                        {"index": i, "of": len(prompts), "tok_per_s": r.tok_per_s, "accept_length": r.accept_length},
                    )
                )
                if (
                    i == 0
                    and not config.is_baseline
                    and r.accept_length is not None
                    and r.accept_length <= space.pruning.zero_accept_max
                ):
                    hint = getattr(
                        self.backend,
                        "not_engaged_hint",
                        "check that the drafter was trained for this target and the speculative settings",
                    )
                    msg = (
                        f"acceptance length {r.accept_length:.2f} after the first prompt: the drafter is not "
                        f"engaged; {hint}"
                    )
                    trial.set_user_attr("fail_kind", DrafterNotEngaged.kind)
                    trial.set_user_attr("fail_reason", msg)
                    self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": msg}))
                    raise DrafterNotEngaged(msg)
                if baseline is not None and i < len(prompts) - 1 and trial.should_prune():
                    d = self.pruner.decide(self.study, self.study._storage.get_trial(trial._trial_id))
                    reason = d.reason if d else "pruned"
                    trial.set_user_attr("prune_reason", reason)
                    trial.set_user_attr("speedup_upper", d.upper_bound if d else None)
                    self._record_speedup(trial, results, baseline)
                    self.emit(Event("trial-end", trial.number, {"state": "PRUNED", "reason": reason}))
                    raise optuna.TrialPruned(reason)
            if config.is_baseline and space.benchmark.temperature == 0:
                refs = self._references(session, len(prompts))
                trial.set_user_attr("reference", [r.to_dict() if r is not None else None for r in refs])
        except BenchmarkError as e:
            trial.set_user_attr("fail_kind", e.kind)
            trial.set_user_attr("fail_reason", str(e))
            tail = getattr(e, "log_tail", "")
            if tail:
                trial.set_user_attr("log_tail", tail[-4000:])
            self.emit(Event("trial-end", trial.number, {"state": "FAIL", "reason": str(e)}))
            raise
        finally:
            session.close()
        summary = summarize(results)
        trial.set_user_attr("accept_length", summary["accept_length"])
        trial.set_user_attr("feasible", True)
        if config.is_baseline:
            trial.set_user_attr("outputs", [r.text for r in results])
            if space.benchmark.temperature == 0:
                self._baseline_floor(trial.number, config, [r.text for r in results])
        else:
            self._record_speedup(trial, results, baseline)
            if baseline is not None and space.benchmark.temperature == 0:
                check = self.lossless_record([r.text for r in results], baseline)
                trial.set_user_attr("lossless", check)
                if not check["ok"]:
                    self.emit(Event("note", trial.number, {"message": "lossy: " + lossless.summary_line(check)}))
        self.emit(
            Event(
                "trial-end",
                trial.number,
                {
                    "state": "COMPLETE",
                    "tok_per_s": summary["tok_per_s"],
                    "speedup": self._speedup_of(results, baseline),
                },
            )
        )
        return summary["tok_per_s"]

    def _record_speedup(self, trial: optuna.Trial, results: list[PromptResult], baseline: FrozenTrial | None) -> None:
        s = self._speedup_of(results, baseline)
        if s is not None:
            trial.set_user_attr("speedup", s)

    @staticmethod
    def _speedup_of(results: list[PromptResult], baseline: FrozenTrial | None) -> float | None:
        """Aggregate tok/s over the measured prompts divided by the baseline's over the same prompts."""
        if baseline is None or not results:
            return None
        base_prompts = baseline.user_attrs.get("prompts", [])
        n = len(results)
        base_tokens = sum(p["completion_tokens"] for p in base_prompts[:n])
        base_seconds = sum(p["seconds"] for p in base_prompts[:n])
        tokens = sum(r.completion_tokens for r in results)
        seconds = sum(r.seconds for r in results)
        if base_seconds > 0 and seconds > 0 and base_tokens > 0:
            return (tokens / seconds) / (base_tokens / base_seconds)
        return None

    # -- the lossless check -------------------------------------------------------------------------
    def _references(self, session: Any, n: int) -> list[ReferenceOutput | None]:
        """The baseline's reference answers (top tokens per position), one non-timed request per prompt; a
        server without log-probabilities gives None for each (then the check falls back to the matching prefix)."""
        reference = getattr(session, "reference", None)
        if reference is None:
            return [None] * n
        out: list[ReferenceOutput | None] = []
        for i in range(n):
            try:
                r = reference(i, lossless.REFERENCE_TOP_N)
            except BenchmarkError as e:  # the measurement stands; the check falls back to the matching prefix
                self.emit(Event("note", data={"message": f"no reference answer for prompt {i}: {e}"}))
                r = None
            out.append(r)
            if r is None:  # the server gives none: do not ask again for every prompt
                return out + [None] * (n - i - 1)
        return out

    def lossless_record(self, texts: list[str], baseline: FrozenTrial) -> dict[str, Any]:
        """The lossless record of ``texts`` (one answer per prompt) against ``baseline``'s answers and references."""
        refs = [ReferenceOutput.from_dict(r) if r else None for r in baseline.user_attrs.get("reference", [])]
        record = lossless.check_outputs(
            texts,
            baseline.user_attrs.get("outputs", []),
            refs,
            tolerance=self.lossless_tolerance(),
            min_prefix=self.space.verdict.lossless_min_prefix,
        )
        record["tolerance_source"] = self.tie_tolerance[1]
        return record

    def _baseline_floor(self, number: int, config: TrialConfig, texts: list[str]) -> None:
        """Compare a new baseline's answers with every other baseline's (another CUDA-graph setting: other kernels
        and batch shapes; a fresh start in confirmation): a divergence there is this server's own numerics. Each
        classified divergence joins the study's ``lossless_floor``; a confident one raises the tolerance in force
        (``lossless_tolerance``) and is reported."""
        floor = list(self.study.user_attrs.get("lossless_floor", []))
        for other in _trials(self.study, (TrialState.COMPLETE,)):
            if other.number == number or not is_baseline_trial(other) or "duplicate_of" in other.user_attrs:
                continue
            if not other.user_attrs.get("outputs"):
                continue
            rec = lossless.check_outputs(
                texts,
                other.user_attrs["outputs"],
                [ReferenceOutput.from_dict(r) if r else None for r in other.user_attrs.get("reference", [])],
                tolerance=self.tie_tolerance[0],
                min_prefix=self.space.verdict.lossless_min_prefix,
            )
            for d in rec["divergences"]:
                floor.append({**d, "baseline": number, "against": other.number, "cuda_graph": config.cuda_graph})
        floor.append({"baseline": number, "checked": True, "cuda_graph": config.cuda_graph})
        self.study.set_user_attr("lossless_floor", floor)

    # -- confirmation -------------------------------------------------------------------------------
    def candidates(self) -> list[FrozenTrial]:
        """The configs worth confirming (lossless, not clearly losing to their baseline): the best
        ``verdict.confirm_top`` by the surrogate's posterior mean (by measured tok/s without a surrogate), plus
        the fastest single measurement when the surrogate ranked it lower (a sharp peak on the space's edge is
        what a smooth model underrates)."""
        space = self.space
        complete = [
            t
            for t in _trials(self.study, (TrialState.COMPLETE,))
            if not is_baseline_trial(t) and "duplicate_of" not in t.user_attrs and t.user_attrs.get("measured")
        ]
        measured = {t.number: math.log(t.value) if t.value and t.value > 0 else -math.inf for t in complete}
        model = self.surrogate() if complete else None
        score = dict(measured)
        if model is not None:
            # optimistic ranking (posterior mean + CANDIDATE_KAPPA sd): a config whose neighbours are also fast
            # beats a lucky start, and a config on the space's edge, which a smooth model underrates, still gets
            # its chance in the race (scripts/bench_search.py measured both)
            mean, sd = model.predict([TrialConfig.from_dict(t.user_attrs["effective"]) for t in complete])
            score = {t.number: float(m + CANDIDATE_KAPPA * v) for t, m, v in zip(complete, mean, sd, strict=True)}

        baselines = {cg: find_baseline(self.study, cg) for cg in {t.params.get("cuda_graph") for t in complete}}

        def eligible(t: FrozenTrial) -> bool:
            if not t.user_attrs.get("lossless", {}).get("ok", True):
                return False
            baseline = baselines[t.params.get("cuda_graph")]
            if baseline is None:
                return False
            tv = [t.intermediate_values[s] for s in sorted(t.intermediate_values)]
            bv = [baseline.intermediate_values.get(s) for s in sorted(t.intermediate_values)]
            return upper_bound(log_ratios(tv, bv), space.verdict.confidence, space.pruning.start_noise) >= 1.0

        seen: set[str] = set()
        out: list[FrozenTrial] = []
        for t in sorted(complete, key=lambda t: score[t.number], reverse=True):
            if len(out) >= space.verdict.confirm_top:
                break
            key = t.user_attrs.get("config_key")
            if key not in seen and eligible(t):
                seen.add(key)
                out.append(t)
        if model is not None and out:
            fastest = next(
                (t for t in sorted(complete, key=lambda t: measured[t.number], reverse=True) if eligible(t)), None
            )
            if fastest is not None and fastest.user_attrs.get("config_key") not in seen:
                out.append(fastest)
        return out

    def exclusions(self) -> list[dict[str, Any]]:
        return find_exclusions(self.study)

    def fastest_baseline_setting(self) -> bool | None:
        """The CUDA-graph setting of the fastest baseline of the search: what a user would deploy without
        speculation, and so what the headline speedup is measured against."""
        best: tuple[float, bool] | None = None
        for cg in sorted({bool(b) for b in self.space.search.cuda_graph}, reverse=True):
            b = find_baseline(self.study, cg)
            if b is not None and b.value and (best is None or b.value > best[0]):
                best = (float(b.value), cg)
        return None if best is None else best[1]

    def confirm(self) -> dict[str, Any]:
        """Re-measure the candidates in rounds, each round after a fresh baseline of the same CUDA-graph setting
        (so drift cancels in the pair) and of the fastest baseline's setting (the deployable comparison):
        ``verdict.repeats`` rounds of every candidate, then more rounds, up to ``verdict.max_repeats``, of those
        still racing (see ``race_survivors``) while two or more are left. The verdict comes from the interval of
        the best survivor against the fastest baseline; it names what it rests on (``basis``) and every excluded
        config (``exclusions``), and is never "the baseline wins" while a config it could not weigh is left."""
        space = self.space
        cands = self.candidates()
        excluded = self.exclusions()
        if cands and (space.verdict.confirm_top == 0 or space.verdict.repeats < 2):
            # configs worth confirming exist but the space asks for no (usable) confirmation: nothing is proven
            state = {
                "keys": [],
                "rounds": [],
                "results": [],
                "best": None,
                "done": True,
                "verdict": "inconclusive",
                "basis": "not-confirmed",
                "rests_on": "not confirmed (verdict.confirm_top 0 or verdict.repeats < 2)",
                "note": "not confirmed (verdict.confirm_top 0 or verdict.repeats < 2)",
                "exclusions": excluded,
            }
            self.study.set_user_attr("confirmation", state)
            return state
        keys = [t.user_attrs["config_key"] for t in cands]
        previous = self.study.user_attrs.get("confirmation")
        if previous and previous.get("keys") == keys and previous.get("done") and "rests_on" in previous:
            return previous
        state: dict[str, Any] = (
            previous if previous and previous.get("keys") == keys else {"keys": keys, "rounds": [], "done": False}
        )
        if "deploy_cuda_graph" not in state:
            state["deploy_cuda_graph"] = self.fastest_baseline_setting()
        deploy_cg = state["deploy_cuda_graph"]
        self.emit(
            Event("confirm-start", data={"candidates": [t.number for t in cands], "repeats": space.verdict.repeats})
        )
        graph_settings = sorted({t.params.get("cuda_graph") for t in cands}, key=str)
        max_rounds = space.verdict.max_rounds
        while cands:
            active = race_survivors(state["rounds"], [str(t.number) for t in cands], space.verdict)
            n = len(state["rounds"])
            if n >= max_rounds or (n >= space.verdict.repeats and len(active) <= 1):
                break
            rnd: dict[str, Any] = {"baseline": {}, "candidates": {}}
            for cg in graph_settings:
                racing = [t for t in cands if t.params.get("cuda_graph") == cg and str(t.number) in active]
                if not racing:
                    continue
                rnd["baseline"][str(cg)] = self._measure_once(TrialConfig.baseline(bool(cg)))
                for t in racing:
                    cfg = TrialConfig.from_dict(t.user_attrs["effective"])
                    rnd["candidates"][str(t.number)] = self._measure_once(cfg)
            if deploy_cg is not None and str(deploy_cg) not in rnd["baseline"]:
                # the candidates racing run under the other setting: the deployable baseline is measured too
                rnd["baseline"][str(deploy_cg)] = self._measure_once(TrialConfig.baseline(bool(deploy_cg)))
            state["rounds"].append(rnd)
            self.study.set_user_attr("confirmation", state)
        results = []
        active = race_survivors(state["rounds"], [str(t.number) for t in cands], space.verdict)
        for t in cands:
            cg = str(t.params.get("cuda_graph"))
            rounds = [r for r in state["rounds"] if r["candidates"].get(str(t.number))]
            pairs = [(r["candidates"][str(t.number)], r["baseline"].get(cg)) for r in rounds]
            logs = [math.log(c / b) for c, b in pairs if c and b]
            interval = speedup_interval(logs, space.verdict.confidence) if len(logs) >= 2 else None
            dep = [(r["candidates"][str(t.number)], r["baseline"].get(str(deploy_cg))) for r in rounds]
            dep_logs = [math.log(c / b) for c, b in dep if c and b]
            dep_interval = speedup_interval(dep_logs, space.verdict.confidence) if len(dep_logs) >= 2 else None
            results.append(
                {
                    "trial": t.number,
                    "config": t.user_attrs["effective"],
                    "tok_per_s": [c for c, _ in pairs],
                    "baseline_tok_per_s": [b for _, b in pairs],
                    "speedup_ci": interval.to_dict() if interval else None,
                    "deploy_baseline_tok_per_s": [b for _, b in dep],
                    "deploy_speedup_ci": dep_interval.to_dict() if dep_interval else None,
                    "dropped": str(t.number) not in active,
                }
            )
        state["results"] = results
        state["exclusions"] = excluded
        # the pick: the best point estimate against the fastest baseline among the candidates still racing (the
        # others were clearly slower than the leader of their rounds)
        best = max(
            (r for r in results if _headline(r) and not r["dropped"]),
            key=lambda r: _headline(r)["point"],  # type: ignore[index]
            default=None,
        )
        if best is None:
            state["verdict"] = verdict(None, space.verdict.min_gain)
            state["best"] = None
        else:
            h = _headline(best)
            iv = Interval(**{k: h[k] for k in ("point", "low", "high", "n", "confidence")})  # type: ignore[index]
            state["verdict"] = verdict(iv, space.verdict.min_gain)
            state["best"] = best["trial"]
        state["basis"] = (
            "confirmed" if any(_headline(r) for r in results) else ("not-confirmed" if results else "search")
        )
        state["rests_on"] = _basis(results, excluded, deploy_cg)
        if excluded and state["verdict"] != "speculation-wins":
            state["verdict"] = "inconclusive"
        state["done"] = True
        self.study.set_user_attr("confirmation", state)
        self.emit(
            Event(
                "verdict",
                data={
                    "verdict": state["verdict"],
                    "best": state["best"],
                    "basis": state["rests_on"],
                    "excluded": excluded,
                },
            )
        )
        return state

    def _measure_once(self, config: TrialConfig) -> float:
        session = self.runner.launch(config)
        try:
            session.warmup()
            results = [session.run_prompt(i) for i in range(len(self.space.benchmark.prompts))]
        finally:
            session.close()
        tps = summarize(results)["tok_per_s"]
        if config.is_baseline and self.space.benchmark.temperature == 0:
            self._confirm_floor(config, [r.text for r in results])
        self.emit(Event("confirm-measure", data={"config": config.label(), "tok_per_s": tps}))
        return tps

    def _confirm_floor(self, config: TrialConfig, texts: list[str]) -> None:
        """A fresh baseline start of confirmation against the search's baseline of the same setting: the floor."""
        base = find_baseline(self.study, config.cuda_graph)
        if base is None or not base.user_attrs.get("outputs"):
            return
        rec = lossless.check_outputs(
            texts,
            base.user_attrs["outputs"],
            [ReferenceOutput.from_dict(r) if r else None for r in base.user_attrs.get("reference", [])],
            tolerance=self.tie_tolerance[0],
            min_prefix=self.space.verdict.lossless_min_prefix,
        )
        if rec["divergences"]:
            floor = list(self.study.user_attrs.get("lossless_floor", []))
            for d in rec["divergences"]:
                floor.append({**d, "baseline": "confirmation", "against": base.number, "cuda_graph": config.cuda_graph})
            self.study.set_user_attr("lossless_floor", floor)


def find_exclusions(study: optuna.Study) -> list[dict[str, Any]]:
    """Speculative configs the verdict cannot weigh, each with its reason: answers that diverge from the
    baseline's where the baseline was confident (lossy), drafters that were not engaged, server configs that
    failed and were never measured. A verdict with exclusions says so, and "the baseline wins" becomes
    inconclusive: an excluded config might have won."""
    trials = sorted(_trials(study), key=lambda t: t.number)
    measured = {
        t.user_attrs.get("config_key")
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and t.user_attrs.get("measured")
    }
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for t in trials:
        ua = t.user_attrs
        if is_baseline_trial(t) or "duplicate_of" in ua or ua.get("interrupted"):
            continue
        cfg = ua.get("effective") or ua.get("config")
        if t.state == TrialState.COMPLETE and not (ua.get("lossless") or {}).get("ok", True):
            out.append(
                {
                    "trial": t.number,
                    "kind": "lossy",
                    "config": cfg,
                    "speedup": ua.get("speedup"),
                    "reason": "output differs from the baseline's where the baseline was confident: "
                    + lossless.summary_line(ua["lossless"]),
                }
            )
        elif t.state == TrialState.FAIL and ua.get("fail_kind") == DrafterNotEngaged.kind:
            key = f"drafter:{t.params.get('drafter')}"
            if key not in seen:
                seen.add(key)
                out.append({"trial": t.number, "kind": "not-engaged", "config": cfg, "reason": ua.get("fail_reason")})
        elif (
            t.state == TrialState.FAIL
            and ua.get("fail_kind") in (*RETRIED_FAILURES, "config-mismatch")
            and ua.get("config_key") not in measured
        ):
            key = f"config:{ua.get('config_key')}"
            if key not in seen:
                seen.add(key)
                out.append(
                    {
                        "trial": t.number,
                        "kind": "failed",
                        "config": cfg,
                        "reason": f"{ua.get('fail_kind')}: {ua.get('fail_reason')}",
                    }
                )
    return out


def _headline(result: dict[str, Any]) -> dict[str, Any] | None:
    """A confirmed candidate's interval against the fastest baseline (the same-setting one when that is missing)."""
    return result.get("deploy_speedup_ci") or result.get("speedup_ci")


def _basis(results: list[dict[str, Any]], excluded: list[dict[str, Any]], deploy_cg: bool | None) -> str:
    """What a verdict rests on, in words."""
    graphs = {True: "graphs on", False: "graphs off"}.get(deploy_cg, "") if deploy_cg is not None else ""
    confirmed = [r for r in results if _headline(r)]
    if confirmed:
        rounds = sorted({_headline(r)["n"] for r in confirmed})  # type: ignore[index]
        n = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
        text = f"confirmed: {len(confirmed)} candidate(s), {n} rounds each against fresh baselines" + (
            f"; speedups against the fastest baseline ({graphs})" if graphs else ""
        )
    elif results:
        text = "not confirmed: no candidate got two complete rounds"
    elif excluded:
        text = (
            "search only: no speculative config left to confirm (each was excluded or clearly slower than its baseline)"
        )
    else:
        text = "search only: no speculative config was worth confirming (each clearly slower than its baseline)"
    if excluded:
        kinds: dict[str, int] = {}
        for e in excluded:
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        text += "; excluded: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return text


def run(
    space: Space,
    backend: Backend,
    runner: Runner,
    study: optuna.Study,
    *,
    n_trials: int | None = None,
    clock: Clock | None = None,
    listener: Listener | None = None,
    confirm: bool = True,
) -> dict[str, Any]:
    """Search, then confirm. Returns the confirmation state (verdict inside)."""
    orch = Orchestrator(space, backend, runner, study, clock=clock, listener=listener)
    orch.search(n_trials if n_trials is not None else space.budget.n_trials, timeout_s=space.budget.timeout_s)
    if not confirm:
        return {}
    return orch.confirm()


__all__ = [
    "Event",
    "Orchestrator",
    "default_storage",
    "find_exclusions",
    "make_storage",
    "open_study",
    "run",
    "study_name_for",
]

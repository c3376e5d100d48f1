"""The study's only access to Optuna's private members, each with why no public API does the job.

- ``latest(trial)``: the pruner's decision (its reason and upper bound, recorded in the trial) needs the running
  trial as a ``FrozenTrial`` with the values it reported so far; ``optuna.Trial`` has no public accessor for it
  (``Trial.should_prune`` hands the pruner its private copy, ``Trial._get_latest_trial()``, which is what this
  returns: this process's own record of the trial, no storage read; one read a prompt was 0.25 CPU-s of a
  40-trial study).
- ``frozen(trial)``: the running trial as the storage has it now (another worker may have failed it meanwhile).
- ``rdb_storage(study)``: the study lock (``storage.study_lock``) takes a PostgreSQL advisory lock on the
  study's database engine, which only the ``RDBStorage`` holds.
- ``params_of(trial)``: a queued (WAITING) trial, or one just taken from the queue, has no params yet: what it
  will run is the private system attr ``fixed_params`` that ``Study.enqueue_trial`` writes; parallel workers
  seeding or picking configs must see it.
- ``single_worker_sqlite(study)`` and ``fail_interrupted(...)``: a trial left RUNNING by a killed run must be failed
  with user attrs saying so. Optuna writes a trial's user attrs only through the ``Trial`` its objective holds, so
  this goes to the storage: ``study._storage`` (an RDB storage is wrapped in the private ``_CachedStorage``, whose
  ``_backend`` is the ``RDBStorage``; no public accessor returns the storage a study was opened with) and the
  storage's trial id, ``FrozenTrial._trial_id``.
- ``live_attrs(trial)``: a running trial's user attrs, read without the deep copy ``optuna.Trial.user_attrs`` makes
  on every access (a trial's attrs hold its reference answers' token log-probabilities: a deep copy per read was
  0.45 CPU-s of a 40-trial study); the dict is Optuna's own, so it is read, never written.
- ``storage(study)``: the storage a study was opened with (``study._storage``), whose identity keys the study lock
  of one process (``storage.study_lock``).
- ``CACHED_STORAGE_CALLS``: the private ``RDBStorage`` methods Optuna's cache in front of every RDB storage calls,
  which ``storage.RetryingRDBStorage`` retries on connection errors besides the public ones.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

CACHED_STORAGE_CALLS = (
    "_create_new_trial",
    "_set_trial_param",
    "_get_best_trial_id",
    "_get_trials",
    "_get_stale_trial_ids",
)


def storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage ``study`` was opened with (an RDB storage: under Optuna's private cache wrapper)."""
    return study._storage


def live_attrs(trial: optuna.Trial) -> dict[str, Any]:
    """The running trial's user attrs as Optuna holds them (read-only: not a copy)."""
    attrs: dict[str, Any] = trial._cached_frozen_trial.user_attrs
    return attrs


def latest(trial: optuna.Trial) -> FrozenTrial:
    """The running trial's record as this process wrote it (params, user attrs, intermediate values; shared with
    Optuna's own copy: read-only), as ``Trial.should_prune`` hands it to the pruner."""
    return trial._get_latest_trial()


def frozen(trial: optuna.Trial) -> FrozenTrial:
    """The running trial's current record in the storage (its state included)."""
    return trial.study._storage.get_trial(trial._trial_id)


def params_of(trial: FrozenTrial) -> dict[str, Any]:
    """The params a trial has or, queued, will run with."""
    return dict(trial.params) or dict(trial.system_attrs.get("fixed_params") or {})


def rdb_storage(study: optuna.Study) -> optuna.storages.RDBStorage | None:
    """The study's ``RDBStorage`` (under Optuna's private cache wrapper), or None for other storages."""
    storage = getattr(study._storage, "_backend", study._storage)
    return storage if isinstance(storage, optuna.storages.RDBStorage) else None


def single_worker_sqlite(study: optuna.Study) -> optuna.storages.RDBStorage | None:
    """The study's ``RDBStorage`` when it is SQLite (one worker: a RUNNING trial there is one a killed run left),
    else None (a server database has heartbeats, and other workers' trials run)."""
    storage = getattr(study._storage, "_backend", study._storage)
    if not isinstance(storage, optuna.storages.RDBStorage) or not str(storage.engine.url).startswith("sqlite"):
        return None
    return storage


def fail_interrupted(storage: optuna.storages.RDBStorage, trial: FrozenTrial, attrs: dict[str, Any]) -> None:
    """Write ``attrs`` into a RUNNING trial of another run, then mark it FAIL."""
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial._trial_id, key, value)
    storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)

"""Where a study lives: its name, its storage (SQLite for one worker, a server database with heartbeats for
several), and opening it with the sampler and pruner every worker must build alike."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from typing import Any

import optuna

from autotune import records
from autotune.errors import UserError
from autotune.pruner import BaselinePruner
from autotune.space import Space


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
    levels = space.benchmark.concurrency
    return BaselinePruner(
        p.confidence,
        p.min_prompts,
        p.enabled,
        p.start_noise,
        levels=levels,
        weights=space.objective.weights_for(levels),
        n_prompts=len(space.benchmark.prompts),
    )


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
    fields: dict[str, Any] = {
        "prompts": [[p.id, p.text] for p in b.prompts],
        "max_tokens": b.max_tokens,
        "temperature": b.temperature,
        "backend": space.server.backend,
    }
    if b.concurrency != (1,):  # the load levels and their weights define the objective (absent: as before)
        fields["concurrency"] = list(b.concurrency)
        fields["weights"] = {str(c): w for c, w in space.objective.weights_for(b.concurrency).items()}
    blob = json.dumps(fields, sort_keys=True)
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
    recorded = records.space_digest(study)
    if recorded is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["tok_per_s"])
        records.label_study(
            study,
            digest=digest,
            space_name=space.name,
            backend=space.server.backend,
            simulated=simulated,
            label=label,
            prompt_ids=[p.id for p in space.benchmark.prompts],
        )
    elif recorded != digest:
        raise UserError(
            f"study {study_name!r} was measured with a different prompt set, max_tokens, temperature or backend; "
            "its figures cannot be compared with new ones. Use a new `name:` in the space file or another --storage."
        )
    return study

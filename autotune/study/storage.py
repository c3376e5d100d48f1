"""Where a study lives: its name, its storage (SQLite for one worker, a server database with heartbeats for
several), and opening it with the sampler and pruner every worker must build alike.

One study, one orchestrator: the run lock that keeps a second `autotune study` off a study that is running.

Taken before the study is opened or created, held until the run ends, released by the operating system or the
database server when the process dies (no stale locks to clean up):

- SQLite (and any storage that is a file): an exclusive ``flock`` on ``DB.NAME.lock`` beside the database file,
  with the holder's pid, host and start time written in it for the message;
- PostgreSQL: a session advisory lock on a connection of its own, its ``application_name`` naming the holder;
- in-memory storages: nothing to share, no lock.

Workers (``autotune worker``) join a running study on purpose and take only the per-trial study lock
(``storage.study_lock``); this lock is for the one process that seeds, searches and confirms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune import records
from autotune.errors import UserError
from autotune.objective import Objective
from autotune.pruner import BaselinePruner
from autotune.space import Space
from autotune.study import _optuna
from autotune.study.methods import MIN_OWN_EVIDENCE

__all__ = ["holder_text", "run_lock", "running", "sqlite_path"]


def study_name_for(space: Space, simulated: bool) -> str:
    """Simulated studies never share a name (and so never mix figures) with real ones."""
    return f"{space.name}-sim" if simulated else space.name


def default_storage(space: Space, simulated: bool, studies_dir: str = "studies") -> str:
    return space.storage or f"sqlite:///{studies_dir}/{study_name_for(space, simulated)}.db"


#: heartbeat of a running trial (seconds) and how long one may be missed before the trial is failed and retried
HEARTBEAT_INTERVAL_S = 60
GRACE_PERIOD_FACTOR = 3
#: storage errors (connection refused or dropped, database restarted) are retried for this long, backing off
STORAGE_RETRY_S = 120.0


def make_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.BaseStorage:
    """RDB storage; for server databases heartbeats (a trial whose worker stops beating for ``GRACE_PERIOD_FACTOR``
    heartbeats is failed and retried once, ``RetryLostTrial``) and retries of connection errors
    (``RetryingRDBStorage``)."""
    if url.startswith("sqlite"):
        # a database file this call creates has the schema of the Optuna creating it: its compatibility check
        # (alembic loading its migration scripts a second time) is skipped
        db = sqlite_path(url)
        fresh = db is not None and not db.exists()
        storage = _schema_race(
            lambda: optuna.storages.RDBStorage(
                url, engine_kwargs={"connect_args": {"timeout": 30}}, skip_compatibility_check=fresh
            )
        )
        _sqlite_pragmas(storage)
        return storage
    interval = int(heartbeat_s or HEARTBEAT_INTERVAL_S)
    if interval < 1:
        raise UserError(f"the heartbeat interval must be at least 1 s but got {interval}")
    return _schema_race(
        lambda: _retrying(
            lambda: _quietly(
                RetryingRDBStorage,
                url,
                engine_kwargs={"pool_pre_ping": True},
                heartbeat_interval=interval,
                grace_period=GRACE_PERIOD_FACTOR * interval,
                heartbeat_stale_trial_callback=RetryLostTrial(max_retry=1),
            ),
            what=f"connecting to {_redact_url(url)}",
        )
    )


#: tries of opening a storage whose schema another process is creating at the same moment
SCHEMA_RACE_TRIES = 5


def _schema_race(make: Any, *, sleep: Any = time.sleep) -> Any:
    """``make()`` (an ``RDBStorage``), tried again when it lost the race to create the schema of a fresh database:
    processes started together (``autotune study`` and a worker, a report, the dashboard, or a test watching the
    file) each create Optuna's tables and stamp its alembic revision, and the loser gets "UNIQUE constraint failed:
    alembic_version" or "table ... already exists". Bounded: ``SCHEMA_RACE_TRIES`` tries, 0.5 s more each time."""
    import sqlalchemy.exc

    for attempt in range(SCHEMA_RACE_TRIES):
        try:
            return make()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            if attempt == SCHEMA_RACE_TRIES - 1 or not _schema_conflict(e):
                raise
            sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _schema_conflict(e: BaseException) -> bool:
    """Whether ``e`` is another process's schema creation getting there first (not a bad URL or a locked file for
    good: those are reported as they are)."""
    import sqlalchemy.exc

    if isinstance(e, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)):
        return True
    text = str(e).lower()
    return "already exists" in text or "database is locked" in text


# ---------------------------------------------------------------------------------------------- faults


def _quietly(make: Any, *args: Any, **kwargs: Any) -> Any:
    """``make(...)`` without Optuna's experimental-feature warnings (heartbeats are what workers rely on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make(*args, **kwargs)


def _redact_url(url: str) -> str:
    """The URL without its password."""
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _connection_error(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it) is a lost or refused database connection, not a bad request."""
    import sqlalchemy.exc

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, sqlalchemy.exc.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        if isinstance(e, sqlalchemy.exc.DisconnectionError):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def _retrying(call: Any, *, what: str, limit_s: float | None = None, sleep: Any = time.sleep) -> Any:
    """``call()``, retried with exponential backoff (0.25 s doubling to 8 s) while it fails with a connection
    error, for at most ``limit_s`` (``STORAGE_RETRY_S``); then the last error."""
    limit_s = STORAGE_RETRY_S if limit_s is None else limit_s
    deadline = time.monotonic() + limit_s
    delay = 0.25
    while True:
        try:
            return call()
        except Exception as e:
            if not _connection_error(e) or time.monotonic() + delay > deadline:
                raise
            _log.warning("storage: %s failed (%s); retrying in %.2f s", what, type(e).__name__, delay)
            sleep(delay)
            delay = min(2 * delay, 8.0)


_log = logging.getLogger("autotune.study")

#: the storage calls retried on connection errors: every public method of ``RDBStorage`` (each is one transaction;
#: a write whose commit went through but whose answer was lost is repeated: harmless for attrs, values and
#: heartbeats) and the stale-trial query, not the schema tools
_NOT_RETRIED = {
    "upgrade", "get_current_version", "get_head_version", "get_all_versions", "remove_session",
    "get_heartbeat_interval", "get_heartbeat_stale_trial_callback", "get_failed_trial_callback",
}  # fmt: skip
_RETRIED = (
    tuple(
        sorted(
            n
            for n, v in vars(optuna.storages.RDBStorage).items()
            if callable(v) and not n.startswith("_") and n not in _NOT_RETRIED
        )
    )
    + _optuna.CACHED_STORAGE_CALLS
)


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """An ``RDBStorage`` whose calls survive a restarted database or a dropped connection: each call in
    ``_RETRIED`` is retried with backoff (``_retrying``) instead of failing the worker. Dead pooled connections
    are replaced (``pool_pre_ping``)."""


_nesting = threading.local()


def _wrap(name: str) -> None:
    base = getattr(optuna.storages.RDBStorage, name)

    def method(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        if getattr(_nesting, "depth", 0):  # a retried call inside another one: the outer one retries
            return base(self, *args, **kwargs)

        def call() -> Any:
            _nesting.depth = 1
            try:
                return base(self, *args, **kwargs)
            finally:
                _nesting.depth = 0

        return _retrying(call, what=name)

    method.__name__ = name
    method.__doc__ = base.__doc__
    setattr(RetryingRDBStorage, name, method)


for _name in _RETRIED:
    _wrap(_name)


class RetryLostTrial:
    """Optuna's heartbeat-stale callback: the trial of a lost worker (SIGKILL, node down) was failed by Optuna
    (it does not use the budget: ``records.is_lost``); its config is queued again once (``max_retry``), with
    the enqueued attrs only (role, seeded) and ``requeued_from``, not what the lost attempt had recorded.
    (``optuna.storages.RetryHeartbeatStaleTrialCallback`` copies every user attr of the lost attempt.)"""

    def __init__(self, max_retry: int = 1) -> None:
        if max_retry < 0:
            raise ValueError(f"max_retry must be at least 0 but got {max_retry}")
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        if len(history) > self.max_retry:
            return
        system_attrs = {**trial.system_attrs, "failed_trial": history[0], "retry_history": history}
        records.enqueue_retry(study, trial, system_attrs)


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


# ---------------------------------------------------------------------------------------------- the study lock

_local_locks: dict[str, threading.RLock] = {}
_local_guard = threading.Lock()


@contextlib.contextmanager
def study_lock(study: optuna.Study, *, limit_s: float = 600.0) -> Iterator[None]:
    """Mutual exclusion among every worker of ``study``: seeding and claiming a place in the budget happen under
    it, so two workers never queue the same baselines or take the last trial twice. On PostgreSQL a session
    advisory lock keyed by the study (released by the server if the worker dies); elsewhere (SQLite: one
    worker; in-memory: threads of one process) a lock of this process. Waits at most ``limit_s``."""
    rdb = _optuna.rdb_storage(study)
    if rdb is not None and rdb.engine.dialect.name == "postgresql":
        with _pg_advisory_lock(rdb, study.study_name, limit_s):
            yield
        return
    with _local_guard:
        lock = _local_locks.setdefault(f"{id(_optuna.storage(study))}:{study.study_name}", threading.RLock())
    if not lock.acquire(timeout=limit_s):
        raise TimeoutError(f"the lock of study {study.study_name!r} was not free within {limit_s:g} s")
    try:
        yield
    finally:
        lock.release()


#: a lock holder that went silent (its node lost mid-lock) loses the lock after this long (PostgreSQL ends its
#: idle transaction); holding it takes well under a second
LOCK_IDLE_LIMIT_S = 120


@contextlib.contextmanager
def _pg_advisory_lock(rdb: optuna.storages.RDBStorage, name: str, limit_s: float) -> Iterator[None]:
    """A transaction-level advisory lock on a connection of its own: released when the transaction ends (our
    commit, the worker's death closing the connection, or ``LOCK_IDLE_LIMIT_S`` of silence)."""
    import sqlalchemy

    key = int.from_bytes(hashlib.sha256(f"autotune:{name}".encode()).digest()[:8], "big", signed=True)

    def connect_and_lock() -> Any:
        conn = rdb.engine.connect()
        try:
            conn.execute(sqlalchemy.text(f"SET LOCAL lock_timeout = '{int(limit_s * 1000)}ms'"))
            conn.execute(sqlalchemy.text(f"SET LOCAL idle_in_transaction_session_timeout = '{LOCK_IDLE_LIMIT_S}s'"))
            conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        except BaseException:
            conn.close()
            raise
        return conn

    conn = _retrying(connect_and_lock, what="taking the study lock")
    try:
        yield
    finally:
        try:
            conn.commit()  # ends the transaction: the lock and the SET LOCAL settings go with it
        except Exception as e:  # the server ended the session (and the lock with it)
            _log.warning("storage: releasing the study lock failed (%s); dropping its connection", type(e).__name__)
            conn.invalidate()
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------- sampler, pruner


def make_pruner(space: Space) -> BaselinePruner:
    p = space.pruning
    return BaselinePruner(
        p.confidence,
        p.min_prompts,
        p.enabled,
        p.start_noise,
        leader=p.leader,
        leader_margin=p.leader_margin,
        objective=Objective.of(space),
        leader_after=MIN_OWN_EVIDENCE if space.search.methods else 0,
    )


def sampler_settings(space: Space) -> dict[str, Any]:
    """The TPE sampler's arguments (besides the seed): every worker of a study must build the same sampler."""
    return {
        "multivariate": True,
        "group": True,
        "constant_liar": True,  # parallel workers: a RUNNING trial counts as a bad result, so others go elsewhere
        "n_startup_trials": max(3, min(8, space.budget.n_trials // 4)),
    }


def make_sampler(space: Space, seed: int | None) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, **sampler_settings(space))


def worker_spec(space: Space) -> records.WorkerSpec:
    """What every worker of a study must share, besides the prompt set (``space_digest``): the searched space,
    the drafters' forced algorithms, pruning, the surrogate's share, the sampler and pruner, the warm-up passes.
    Paths, ports, hosts and the environment may differ between nodes."""

    def knobs(specs: Any) -> dict[str, Any]:
        return {k: {"type": type(v).__name__, **dataclasses.asdict(v)} for k, v in specs.items()}

    searched = space.searched_drafters()
    search: dict[str, Any] = {
        "drafters": list(searched),
        "cuda_graph": list(space.search.cuda_graph),
        "knobs": knobs(space.search.knobs),
    }
    spec: dict[str, object] = {
        "space_digest": space_digest(space),
        "search": search,
        "drafters": {d.name: {"algorithm": d.algorithm} for d in space.drafters if d.name in searched},
        "pruning": dataclasses.asdict(space.pruning),
        "budget": {"refine_trials": space.budget.refine_trials},
        "sampler": {"type": "TPESampler", **sampler_settings(space)},
        "pruner": {"type": "BaselinePruner"},
    }
    from autotune.measure import warmup_rule

    if space.search.methods:  # each method's drafters and knobs (absent: a space without methods, as before)
        search["methods"] = {
            name: {"drafters": list(m.drafters), "knobs": knobs(m.knobs)} for name, m in space.search.methods.items()
        }
    rule = warmup_rule(space)
    if not rule.none:  # every start must warm up alike (absent: none, as before warm-up passes)
        spec["warmup_passes"] = rule.passes
    stored: records.WorkerSpec = json.loads(json.dumps(spec))  # tuples -> lists, as stored
    return stored


_KNOB_TYPES = ("IntRange", "FloatRange", "Choices")


def _is_knob(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in _KNOB_TYPES


def _spec_text(value: Any) -> str:
    """A ``worker_spec`` value as a message shows it: a knob's domain as the space file says it (``1-8``,
    ``1-64 step 2 (log)``, ``[1, 2, 4]``), anything else as JSON."""
    if not _is_knob(value):
        return json.dumps(value)
    if value["type"] == "Choices":
        return json.dumps(value.get("values"))
    text = f"{value.get('low')}-{value.get('high')}"
    if value.get("step", 1) != 1:
        text += f" step {value['step']}"
    return text + (" (log)" if value.get("log") else "")


def spec_differences(recorded: Mapping[str, object], mine: Mapping[str, object], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two ``worker_spec`` dicts, each with both values (a knob's domain
    as one value: ``search.knobs.num_steps: the study has 1-8, this space file has 1-4``)."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(mine)):
        a, b = recorded.get(key), mine.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict) and not (_is_knob(a) or _is_knob(b)):
            out += spec_differences(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: the study has {_spec_text(a)}, this space file has {_spec_text(b)}")
    return out


#: the parts of ``worker_spec`` that are the searched space: a study is resumed only over the space it searched
SEARCHED_SPACE = ("search", "drafters")


def _comparable(
    recorded: Mapping[str, object], mine: Mapping[str, object], keys: tuple[str, ...] | None = None
) -> dict[str, object]:
    """``mine`` as ``recorded`` can be compared with it: only ``keys`` (all: None), and without the methods where the
    study recorded none (a study recorded before ``worker_spec`` named them)."""
    out = {k: v for k, v in mine.items() if keys is None or k in keys}
    search, my_search = recorded.get("search"), out.get("search")
    if isinstance(search, dict) and "methods" not in search and isinstance(my_search, dict):
        out["search"] = {k: v for k, v in my_search.items() if k != "methods"}
    return out


def check_resume(study: optuna.Study, space: Space, storage: str | None = None) -> None:
    """A study is resumed only over the space it searched (``SEARCHED_SPACE`` of ``worker_spec``, compared as
    ``check_worker`` compares a worker's): else a ``UserError`` naming each change and the ways on. Other settings
    (budget, pruning) may change between runs; a study recorded before the spec has nothing to compare."""
    recorded = records.worker_spec(study)
    if recorded is None:
        return
    searched = {k: v for k, v in recorded.items() if k in SEARCHED_SPACE}
    diffs = spec_differences(searched, _comparable(searched, worker_spec(space), SEARCHED_SPACE))
    if not diffs:
        return
    name = study.study_name
    more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
    raise UserError(
        f"study {name!r} searched another space than this space file describes: "
        + "; ".join(diffs[:5])
        + more
        + ". Resuming it would mix the two (its trials and its recommendation may lie outside the new space). "
        "To search the new space, give the space file a new `name:` (a new study); to start this study over, delete "
        f"it (`optuna delete-study --study-name {name} --storage {_redact_url(storage) if storage else 'URL'}`); to "
        "resume it, restore the old values."
    )


def check_worker(study: optuna.Study, space: Space, space_path: str) -> None:
    """A worker joining ``study`` must search the same space the same way: else a ``UserError`` naming the
    differences (a study recorded before workers were checked takes this worker's spec)."""
    recorded = records.worker_spec(study)
    mine = worker_spec(space)
    if recorded is None:
        records.set_worker_spec(study, mine)
        return
    diffs = spec_differences(recorded, _comparable(recorded, mine))
    if diffs:
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise UserError(
            f"{space_path}: this worker's space differs from study {study.study_name!r}'s: "
            + "; ".join(diffs[:3])
            + more
            + ". Give every worker the same space file (paths, ports and env may differ)."
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
    own = [
        [p.id, p.max_tokens, p.temperature, p.top_p, p.messages, p.thinking]
        for p in b.prompts
        if (p.max_tokens, p.temperature, p.top_p, p.messages, p.thinking) != (None, None, None, None, None)
    ]
    if own:  # logged requests' own settings and turns (absent: as before)
        fields["requests"] = own
    fields.update(Objective.of(space).identity())  # load levels or category weights with their weights
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def simulation_label(space: Space) -> dict[str, Any]:
    """What a simulated study (or ``bench --simulate``) is labelled with: the space's ``simulate`` section's
    scenario and time scale."""
    sim = space.simulate
    return {"scenario": sim.scenario if sim else None, "time_scale": sim.time_scale if sim else None}


def open_study(
    space: Space,
    storage: str | optuna.storages.BaseStorage,
    study_name: str,
    *,
    seed: int | None = None,
    simulated: bool = False,
    create: bool = True,
    sampler: optuna.samplers.BaseSampler | None = None,
    heartbeat_s: int | None = None,
) -> optuna.Study:
    """Create or load the study; refuse to resume one measured with a different prompt set. A simulated study is
    labelled so (``simulation_label``)."""
    label = simulation_label(space) if simulated else None
    st = make_storage(storage, heartbeat_s=heartbeat_s) if isinstance(storage, str) else storage
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
            seed=seed,
        )
        if sampler is None or isinstance(sampler, optuna.samplers.TPESampler):
            records.set_worker_spec(study, worker_spec(space))
        if space.benchmark.traffic is not None:
            records.set_traffic(study, space.benchmark.traffic)
    elif recorded != digest:
        raise UserError(
            f"study {study_name!r} was measured with a different prompt set, max_tokens, temperature or backend; "
            "its figures cannot be compared with new ones. Use a new `name:` in the space file or another --storage."
        )
    else:
        check_resume(study, space, storage if isinstance(storage, str) else None)
    refs = {d.name: d.reference_acceptance for d in space.drafters if d.reference_acceptance is not None}
    if refs or records.drafter_references(study):
        records.set_drafter_references(study, refs)  # the space's current values (a report-only guard)
    return study


def holder_text(pid: Any, host: Any, since: Any) -> str:
    return f"pid {pid} on {host}" + (f" since {since}" if since else "")


def _busy(study_name: str, holder: str, where: str) -> UserError:
    return UserError(
        f"study {study_name!r} is being run by another autotune ({holder}; lock {where}): one study, one "
        "orchestrator. Wait for it to finish or stop it (Ctrl-C; it resumes with the same command), or add "
        "parallel workers with `autotune worker` on a server database"
    )


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL; None for other URLs and in-memory SQLite."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def _lock_path(db: Path, study_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study_name)
    return db.parent / f"{db.name}.{safe}.lock"


def _file_holder_text(fd: int) -> str:
    """The holder written in a lock file (pid, host, since), as ``holder_text`` words it."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    return holder_text(info.get("pid", "?"), info.get("host", "?"), info.get("since"))


@contextlib.contextmanager
def _file_lock(db: Path, study_name: str) -> Iterator[None]:
    path = _lock_path(db, study_name)
    created = [d for d in (db.parent, *db.parent.parents) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(study_name, _file_holder_text(fd), str(path)) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield
        finally:
            if new_file and not db.exists():  # nothing was written (e.g. exit 2 before the study): leave nothing
                path.unlink(missing_ok=True)
                for d in created:
                    with contextlib.suppress(OSError):  # only while empty
                        d.rmdir()
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _pg_key(study_name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"autotune-run:{study_name}".encode()).digest()[:8], "big", signed=True)


def _pg_holder(conn: Any, key: int) -> str:
    """Who holds the advisory lock ``key`` (its session's application name, address and start)."""
    import sqlalchemy

    u = key & 0xFFFFFFFFFFFFFFFF  # the lock's two 32-bit halves, as pg_locks shows them (classid, objid)
    row = conn.execute(
        sqlalchemy.text(
            "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.objsubid = 1 AND l.classid::bigint = :hi AND l.objid::bigint = :lo"
        ),
        {"hi": u >> 32, "lo": u & 0xFFFFFFFF},
    ).first()
    if row is None:
        return "another session"
    return f"{row[0] or 'a session'} ({row[1] or 'local'}, since {row[2]:%Y-%m-%d %H:%M:%S})"


@contextlib.contextmanager
def _pg_connection(url: str, name: str) -> Iterator[Any]:
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        url, poolclass=sqlalchemy.pool.NullPool, connect_args={"application_name": name[:63], "connect_timeout": 30}
    )
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@contextlib.contextmanager
def _pg_lock(url: str, study_name: str) -> Iterator[None]:
    import sqlalchemy

    key = _pg_key(study_name)
    with _pg_connection(url, f"autotune study pid {os.getpid()} on {socket.gethostname()}") as conn:
        got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        conn.commit()
        if not got:
            raise _busy(study_name, _pg_holder(conn, key), "a PostgreSQL advisory lock")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # the session may be gone; its end released the lock
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()


@contextlib.contextmanager
def run_lock(storage: Any, study_name: str) -> Iterator[None]:
    """Hold the run lock of ``study_name`` in ``storage`` (a URL; storage objects and in-memory URLs need none).
    Raises UserError (exit 2) naming the holder when another run has it."""
    if not isinstance(storage, str):
        yield
        return
    db = sqlite_path(storage)
    if db is not None:
        with _file_lock(db, study_name):
            yield
        return
    if storage.startswith(("postgresql", "postgres")):
        with _pg_lock(storage, study_name):
            yield
        return
    yield


def running(storage: Any, study_name: str) -> str | None:
    """Who runs ``study_name`` now (``pid P on HOST since T``, or the PostgreSQL session), from its run lock, or
    None when no `autotune study` / `autotune confirm` holds it (a finished, interrupted or killed run; workers of
    a shared study take no run lock). Creates nothing: a lock file that does not exist was never taken. The probe
    holds the lock for an instant when it is free (a run starting in that instant is refused, as by any holder)."""
    if not isinstance(storage, str):
        return None
    db = sqlite_path(storage)
    if db is not None:
        try:
            fd = os.open(_lock_path(db, study_name), os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _file_holder_text(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)
    if storage.startswith(("postgresql", "postgres")):
        import sqlalchemy

        key = _pg_key(study_name)
        with _pg_connection(storage, f"autotune report pid {os.getpid()} on {socket.gethostname()}") as conn:
            got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            if got:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()
            return None if got else _pg_holder(conn, key)
    return None

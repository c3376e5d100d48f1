"""Parallel workers of one study: the slot supervisor of ``autotune study --gpus A --gpus B`` and what a worker
checks before it joins (``autotune worker``).

``run_slots`` starts one ``autotune worker`` process per GPU slot (argv list, its own session, output to
``studies/NAME/logs/slot-i/worker.log``), reports the study's progress, and waits for them; SIGTERM / Ctrl-C is
passed on to exactly those processes (bounded waits, then SIGKILL). ``wait_for_trials`` waits (bounded) until no
trial of any worker runs, failing lost workers' trials, before the confirmation runs once.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import records
from autotune.errors import UserError
from autotune.slots import Slot

#: wall seconds a worker gets to stop its server after SIGTERM, before SIGKILL
STOP_TIMEOUT_S = 120.0
#: wall seconds between two looks at the workers and the study
POLL_S = 1.0


def require_server_database(url: str, what: str) -> None:
    """Parallel workers need a database that serves several processes (PostgreSQL; MySQL works too)."""
    if url.startswith("sqlite"):
        raise UserError(
            f"{what} needs a server database shared by the workers, but the storage is SQLite ({url}): SQLite has "
            "no row locks (two workers could take the same queued trial) and no heartbeat across processes. Use "
            "--storage postgresql+psycopg://USER@HOST/DB (scripts/start_postgres.sh starts one locally)"
        )


def worker_argv(args: Any, slot: Slot, seed: int | None, storage: str) -> list[str]:
    """The ``autotune worker`` command of one slot (flags of the ``autotune study`` that started it)."""
    argv = [sys.executable, "-m", "autotune", "worker", str(args.space), "--storage", storage]
    argv += ["--studies-dir", str(args.studies_dir), "--gpus", slot.spec, "--slot", str(slot.index), "--json"]
    if seed is not None:
        argv += ["--seed", str(seed + slot.index)]
    if args.simulate:
        argv.append("--simulate")
    if args.in_process:
        argv.append("--in-process")
    if args.heartbeat_s is not None:
        argv += ["--heartbeat-s", str(args.heartbeat_s)]
    return argv


@dataclass
class WorkerProcess:
    slot: Slot
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# autotune: {self.argv!r}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def poll(self) -> int | None:
        assert self.popen is not None
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)

    def wait(self, timeout_s: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_workers(workers: list[WorkerProcess], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to each worker we started (each stops its own server), a bounded wait, SIGKILL to survivors."""
    for w in workers:
        w.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for w in workers:
        if w.popen is not None and w.wait(max(0.0, deadline - time.monotonic())) is None:
            w.signal(signal.SIGKILL)
            w.wait(10.0)


def run_slots(
    slots: list[Slot],
    argv_of: Callable[[Slot], list[str]],
    log_dir: Path,
    study: optuna.Study,
    n_trials: int,
    *,
    progress: Callable[[str], None] | None = None,
) -> list[tuple[WorkerProcess, int]]:
    """Start one worker per slot, wait for all of them, return each with its exit code."""
    workers = [WorkerProcess(sl, argv_of(sl), log_dir / sl.name / "worker.log") for sl in slots]
    try:
        for w in workers:
            w.start()
            if progress:
                assert w.popen is not None
                gpus = w.slot.cuda_visible_devices
                progress(f"slot {w.slot.index} (GPUs {gpus}): worker pid {w.popen.pid}, log {w.log_path}")
        last = -1
        while any(w.poll() is None for w in workers):
            time.sleep(POLL_S)
            done, running = records.used_budget(study)
            if progress and done != last:
                last = done
                progress(f"{done}/{n_trials} trials done, {running} running")
    except BaseException:
        stop_workers(workers)
        raise
    return [(w, int(w.poll() or 0)) for w in workers]


def wait_for_trials(study: optuna.Study, limit_s: float, clock_sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until no trial of any worker runs (failing lost workers' trials on the way), at most ``limit_s``;
    returns how many still run."""
    deadline = time.monotonic() + limit_s
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        running = len(records.trials(study, (TrialState.RUNNING,)))
        if running == 0 or time.monotonic() >= deadline:
            return running
        clock_sleep(POLL_S)

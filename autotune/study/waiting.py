"""Waiting for other workers of a shared study: how long one trial can take, and one bounded look at the study."""

from __future__ import annotations

import time
import warnings

import optuna

from autotune.clock import VirtualClock
from autotune.study.context import StudyContext
from autotune.study.storage import GRACE_PERIOD_FACTOR, HEARTBEAT_INTERVAL_S

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

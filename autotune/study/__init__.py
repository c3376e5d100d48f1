"""The tuning loop: baselines first, then an Optuna search with baseline-relative pruning, then confirmation.

It talks to the world only through a ``Runner`` (which starts servers and measures prompts) and a ``Clock``; the same
orchestration runs against real servers, the simulator as a process, or the simulator's model in-process on a
virtual clock.

Outcome vocabulary (Optuna's): a measured config is COMPLETE (value = tok/s over the prompt set); a config that
clearly lost to the baseline, or that the server would reject, or that ran out of memory is PRUNED (the last two are
also marked infeasible with a constraint, so the sampler learns to avoid them); a server that crashed, hung, or whose
drafter was not engaged is FAIL with the reason and the log tail. ``trial.Objective`` settles every outcome.

Modules, one job each:

- ``storage``: study names, the storage (SQLite pragmas, heartbeats), sampler and pruner, ``open_study``
- ``search``: recovery of a killed run, seeding, the TPE + surrogate loop, the budget
- ``trial``: one trial (``Objective``), from the suggestion to its outcome, and the configs refused before launch
- ``confirm``: candidates, confirmation rounds, exclusions, the verdict
- ``race``: the confirmation's math (pure)
- ``context``: what the jobs share, progress events, waiting for other workers
- ``outcomes``: what a trial's steps raise
- ``orchestrator``: ``Orchestrator``, the facade over all of it, and ``run``
- ``_optuna``: the only access to Optuna's private members
"""

from autotune.records import COUNTED, RETRIED_FAILURES, find_exclusions
from autotune.study.confirm import CANDIDATE_KAPPA
from autotune.study.context import Event, Listener, StudyContext
from autotune.study.orchestrator import Orchestrator, run
from autotune.study.race import race_survivors
from autotune.study.search import MIN_SURROGATE_POINTS, REFINE_KAPPA
from autotune.study.storage import (
    default_storage,
    make_pruner,
    make_sampler,
    make_storage,
    open_study,
    space_digest,
    study_name_for,
)
from autotune.study.trial import MAX_CONSECUTIVE_LAUNCH_FAILURES, WORKER, Objective

__all__ = [
    "CANDIDATE_KAPPA",
    "COUNTED",
    "Event",
    "Listener",
    "MAX_CONSECUTIVE_LAUNCH_FAILURES",
    "MIN_SURROGATE_POINTS",
    "Objective",
    "Orchestrator",
    "REFINE_KAPPA",
    "RETRIED_FAILURES",
    "StudyContext",
    "WORKER",
    "default_storage",
    "find_exclusions",
    "make_pruner",
    "make_sampler",
    "make_storage",
    "open_study",
    "race_survivors",
    "run",
    "space_digest",
    "study_name_for",
]

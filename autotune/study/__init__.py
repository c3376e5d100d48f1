"""The tuning loop: baselines first, then an Optuna search with baseline-relative pruning, then confirmation.

It talks to the world only through a ``Runner`` (which starts servers and measures prompts) and a ``Clock``; the same
orchestration runs against real servers, the simulator as a process, or the simulator's model in-process on a
virtual clock.

Outcome vocabulary (Optuna's): a measured config is COMPLETE (value = tok/s over the prompt set); a config that
clearly lost to the baseline, or that the server would reject, or that ran out of memory is PRUNED (the last two are
also marked infeasible with a constraint, so the sampler learns to avoid them); a server that crashed, hung, or whose
drafter was not engaged is FAIL with the reason and the log tail. ``trial.TrialObjective`` settles every outcome.

Modules, one job each:

- ``storage``: study names, the storage (SQLite pragmas, heartbeats), sampler and pruner, ``open_study``
- ``search``: recovery of a killed run, seeding, the TPE + surrogate loop, the budget
- ``trial``: one trial (``TrialObjective``), from the suggestion to its outcome, and the configs refused before launch
- ``confirm``: candidates, confirmation rounds, exclusions, the verdict
- ``race``: the confirmation's math (pure)
- ``context``: what the jobs share, progress events, waiting for other workers
- ``outcomes``: what a trial's steps raise
- ``orchestrator``: ``Orchestrator``, the facade over all of it, and ``run``
- ``_optuna``: the only access to Optuna's private members
"""

from autotune.study.context import Event
from autotune.study.orchestrator import Orchestrator, run
from autotune.study.race import race_survivors
from autotune.study.search import MIN_SURROGATE_POINTS
from autotune.study.storage import default_storage, make_pruner, make_sampler, open_study, study_name_for

__all__ = [
    "Event",
    "MIN_SURROGATE_POINTS",
    "Orchestrator",
    "default_storage",
    "make_pruner",
    "make_sampler",
    "open_study",
    "race_survivors",
    "run",
    "study_name_for",
]

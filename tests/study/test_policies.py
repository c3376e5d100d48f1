"""The policies the ``Orchestrator`` takes: defaults are the shipped constants, variants reach the jobs."""

from __future__ import annotations

import pytest

from autotune.study import (
    CANDIDATE_KAPPA,
    DEFAULT_POLICIES,
    MAX_CONSECUTIVE_LAUNCH_FAILURES,
    MIN_SURROGATE_POINTS,
    REFINE_KAPPA,
    CandidatePolicy,
    Policies,
    RefinePolicy,
    StopPolicy,
)
from autotune.study.confirm import LEVEL_CANDIDATES


def test_the_defaults_are_the_shipped_constants():
    p = Policies()
    assert p == DEFAULT_POLICIES
    assert (p.candidates.kappa, p.candidates.per_level) == (CANDIDATE_KAPPA, LEVEL_CANDIDATES) == (2.0, 2)
    assert (p.refine.kappa, p.refine.min_points) == (REFINE_KAPPA, MIN_SURROGATE_POINTS) == (2.0, 6)
    assert p.stop.max_launch_failures == MAX_CONSECUTIVE_LAUNCH_FAILURES == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CandidatePolicy(per_level=-1), "per_level must be at least 0 but got -1"),
        (lambda: RefinePolicy(min_points=0), "min_points must be at least 1 but got 0"),
        (lambda: StopPolicy(max_launch_failures=0), "max_launch_failures must be at least 1 but got 0"),
    ],
)
def test_a_policy_says_what_it_expected(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_orchestrator_hands_its_policies_to_the_jobs():
    import optuna

    from autotune.backends.sglang import SGLangBackend
    from autotune.errors import UserError
    from autotune.study import Orchestrator, open_study

    from .conftest import ScriptedRunner, make_space

    space = make_space(n_trials=10)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    runner = ScriptedRunner(speed={}, crash={"good", "bad"})
    orch = Orchestrator(
        space, SGLangBackend(), runner, study, policies=Policies(stop=StopPolicy(max_launch_failures=2))
    )
    assert orch.policies.stop.max_launch_failures == 2
    with pytest.raises(UserError, match="2 servers in a row failed to start"):
        orch.search(10)
    assert sum(not c.is_baseline for c in runner.launches) == 2

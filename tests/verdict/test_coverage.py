"""Confirmation's intervals are Student-t intervals of the paired log ratios of its rounds, their spread pooled with
the start-noise prior: the formula on fixed samples, and a confirmed study's interval rebuilt from its own rounds.

That these 95% intervals contain the simulator's true speedup in at least 18 of 20 seeded studies is measured by
scripts/bench_statistics.py (``interval_coverage``, docs/benchmarks.md).
"""

from __future__ import annotations

import math

import optuna
import pytest
from scipy import stats as st

from autotune.backends.sglang import SGLangBackend
from autotune.stats import Spread, log_ratios, speedup_interval, start_prior
from autotune.study import Orchestrator, open_study, race

from ..study.conftest import ScriptedRunner, make_space

LOGS = [0.10, 0.14, 0.07, 0.12]


def test_the_interval_is_the_t_interval_of_the_mean_log_ratio():
    m = sum(LOGS) / 4
    sd = math.sqrt(sum((x - m) ** 2 for x in LOGS) / 3)
    half = st.t.ppf(0.975, 3) * sd / 2
    iv = speedup_interval(LOGS, 0.95)
    assert (iv.point, iv.low, iv.high, iv.n, iv.df) == pytest.approx(
        (math.exp(m), math.exp(m - half), math.exp(m + half), 4, None)
    )
    assert iv.sd == pytest.approx(sd)
    with pytest.raises(ValueError, match="at least 2 paired samples"):
        speedup_interval(LOGS[:1])


def test_the_prior_pools_the_spread_as_pseudo_observations():
    """A prior of sd 0.035 worth 3 rounds: the pooled variance (3 * 0.035^2 + the rounds' sum of squares) / (3 + 3)
    with 6 degrees of freedom; rounds that agree more closely than the prior get a wider interval than alone."""
    m = sum(LOGS) / 4
    ss = sum((x - m) ** 2 for x in LOGS)
    sd = math.sqrt((3 * 0.035**2 + ss) / 6)
    half = st.t.ppf(0.975, 6) * sd / 2
    iv = speedup_interval(LOGS, 0.95, start_prior(0.035))
    assert (iv.low, iv.high, iv.df) == pytest.approx((math.exp(m - half), math.exp(m + half), 6))
    calm = [0.10, 0.101, 0.099]
    assert speedup_interval(calm, 0.95, start_prior()).low < speedup_interval(calm, 0.95).low
    assert speedup_interval(LOGS, 0.95, Spread(sd=0.035, df=0)) == speedup_interval(LOGS, 0.95)


def test_a_confirmed_interval_is_rebuilt_from_its_own_rounds():
    """A study of a scripted server whose every config is 1.3x the baseline, 3% noise between starts: each
    candidate's interval is the t-interval of the paired log ratios of the rounds it was measured in (against the
    round's fresh baseline) at the look's confidence, pooled with the space's start noise raised to what the rounds
    show (``race.measured_prior``); here both contain the true 1.3x."""
    space = make_space(n_trials=6, drafters=("good",), confirm_top=2)
    study = open_study(space, optuna.storages.InMemoryStorage(), "cov", seed=1)
    runner = ScriptedRunner(speed={"good": lambda c: 1.3}, noise=0.03, seed=1)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(6)
    state = orch.confirm()
    prior = race.measured_prior(state.rounds, start_prior(space.pruning.start_noise))
    assert state.results is not None and len(state.results) == 2 and prior is not None
    assert state.confidence == pytest.approx(1 - 0.05 / 2)  # the two candidates racing share the error
    for r in state.results:
        pairs = [(x.candidates[r.trial], x.baseline[True]) for x in state.rounds if r.trial in x.candidates]
        logs = log_ratios([c for c, _ in pairs], [b for _, b in pairs])
        assert len(logs) >= space.verdict.repeats
        ci = r.speedup_ci
        assert ci is not None
        assert ci.to_dict() == pytest.approx(speedup_interval(logs, state.confidence, prior).to_dict())
        assert ci.low <= 1.3 <= ci.high

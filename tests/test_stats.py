"""autotune.stats: pooled spread, the prune bound with and without it, the prune decision."""

from __future__ import annotations

import math

import pytest
from scipy import stats as st

from autotune.stats import (
    PRIOR_SPREAD,
    START_PRIOR_DF,
    Spread,
    mean_interval,
    pooled_spread,
    ratio_of_means_interval,
    rounds_to_settle,
    speedup_interval,
    upper_bound,
)
from autotune.verdict import prune_decision


def test_pooled_spread_is_the_within_group_sd_with_the_prior_as_pseudo_observations() -> None:
    g1, g2 = [0.1, 0.3], [0.0, 0.1, 0.2]  # within sums of squares: 0.02 and 0.02, df 1 and 2
    no_prior = pooled_spread([g1, g2], prior=None)
    assert no_prior is not None
    assert no_prior.df == 3
    assert no_prior.sd == pytest.approx(math.sqrt(0.04 / 3))
    with_prior = pooled_spread([g1, g2], prior=Spread(sd=0.5, df=2))
    assert with_prior is not None
    assert with_prior.df == 5
    assert with_prior.sd == pytest.approx(math.sqrt((2 * 0.25 + 0.04) / 5))


def test_pooled_spread_ignores_groups_of_one_and_needs_something() -> None:
    assert pooled_spread([[0.3], []], prior=None) is None
    only_prior = pooled_spread([[0.3]], prior=PRIOR_SPREAD)
    assert only_prior == PRIOR_SPREAD


def test_the_pool_tightens_a_two_prompt_bound() -> None:
    logs = [math.log(0.55), math.log(0.75)]  # a 0.64x config after two prompts that differ
    alone = upper_bound(logs, 0.95, 0.035)
    pooled = upper_bound(logs, 0.95, 0.035, Spread(sd=0.1, df=20))
    assert alone > 1.0  # t(0.95, 1) = 6.3: the trial's own two prompts cannot prune it
    assert pooled < 0.9
    # the formula: the trial's own squares join the pool, the pool's df carry the t quantile
    m = sum(logs) / 2
    own = abs(logs[0] - logs[1]) / math.sqrt(2)
    sd = max(math.sqrt((20 * 0.01 + own**2) / 21), own)
    expected = math.exp(m + st.t.ppf(0.95, 21) * math.sqrt(sd * sd / 2 + 0.035**2))
    assert pooled == pytest.approx(expected)


def test_a_trial_whose_prompts_differ_more_than_the_pool_is_judged_by_its_own_spread() -> None:
    logs = [math.log(0.5), math.log(0.95)]  # far apart
    own_sd = abs(logs[0] - logs[1]) / math.sqrt(2)
    ub = upper_bound(logs, 0.95, 0.0, Spread(sd=0.01, df=50))
    m = sum(logs) / 2
    assert ub == pytest.approx(math.exp(m + st.t.ppf(0.95, 51) * own_sd / math.sqrt(2)))


def test_prune_decision_names_its_rule_and_reference() -> None:
    d = prune_decision(
        [50.0, 52.0, 51.0],
        [100.0, 101.0, 99.0],
        confidence=0.95,
        min_prompts=2,
        spread=Spread(0.05, 10),
        rule="leader",
        against=7,
    )
    assert d.prune and d.rule == "leader" and d.against == 7
    assert "leader (trial 7)" in d.reason
    keep = prune_decision([100.0, 101.0], [100.0, 99.0], confidence=0.95, min_prompts=2, spread=Spread(0.05, 10))
    assert not keep.prune and keep.rule == "baseline" and keep.upper_bound > 1


def test_spread_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="sd"):
        Spread(sd=-1, df=2)
    with pytest.raises(ValueError, match="df"):
        Spread(sd=0.1, df=-1)


def _logs(point: float, sd: float, n: int) -> list[float]:
    """``n`` log ratios with mean log(point) and sample sd exactly ``sd``."""
    raw = [i - (n - 1) / 2 for i in range(n)]
    m = sum(raw) / n
    s = math.sqrt(sum((x - m) ** 2 for x in raw) / (n - 1))
    return [math.log(point) + sd * (x - m) / s for x in raw]


@pytest.mark.parametrize("point", [1.004, 0.99, 1.05, 0.97])
def test_rounds_to_settle_is_where_the_interval_first_leaves_the_bar(point):
    # the same interval the verdict and `autotune reverify` compute: n rounds whose spread equals the prior's
    sd, bar = 0.035, 1.02
    n = rounds_to_settle(sd, point, bar, 0.95)
    assert n is not None and n >= 2
    prior = Spread(sd=sd, df=START_PRIOR_DF)
    at_n = speedup_interval(_logs(point, sd, n), 0.95, prior)
    assert not at_n.low <= bar <= at_n.high, "after the rounds it names, the interval is still on the bar"
    if n > 2:
        before = speedup_interval(_logs(point, sd, n - 1), 0.95, prior)
        assert before.low <= bar <= before.high, "one round fewer would already have settled it"


def test_rounds_to_settle_grows_as_the_point_nears_the_bar_and_gives_up_on_it():
    far, near, nearer = (rounds_to_settle(0.035, p, 1.02, 0.95) for p in (0.95, 1.0, 1.01))
    assert far is not None and near is not None and nearer is not None
    assert far < near < nearer
    assert rounds_to_settle(0.035, 1.02, 1.02, 0.95) is None  # on the bar: never
    assert rounds_to_settle(0.035, 1.019, 1.02, 0.95) is None  # 0.1% off: more than the most rounds
    assert rounds_to_settle(0.035, 1.019, 1.02, 0.95, most=10_000) is not None
    # a noisier server needs more rounds for the same gap
    assert rounds_to_settle(0.05, 1.0, 1.02, 0.95) > near


def test_rounds_to_settle_refuses_nonsense():
    for args in [(-0.1, 1.0, 1.02, 0.95), (0.03, 0.0, 1.02, 0.95), (0.03, 1.0, 1.02, 1.5)]:
        with pytest.raises(ValueError):
            rounds_to_settle(*args)


def test_mean_interval_is_the_t_interval_of_the_arithmetic_mean():
    xs = [2.0, 3.5, 0.0, 4.0, 2.5]
    ci = mean_interval(xs, 0.9)
    want = st.t.interval(0.9, len(xs) - 1, loc=st.tmean(xs), scale=st.sem(xs))
    assert (ci.low, ci.high) == pytest.approx(want) and ci.point == pytest.approx(2.4) and ci.n == 5
    with pytest.raises(ValueError, match="at least 2 values"):
        mean_interval([1.0])


def test_ratio_of_means_interval_covers_the_true_ratio_about_as_often_as_it_says():
    """Seeded: 400 pairs of samples (24 each, means 3.0 and 2.5: ratio 1.2); the 95% interval holds 1.2 in about
    95% of them (the delta method on the log ratio with Welch's degrees of freedom)."""
    import random

    rng = random.Random(3)
    held = 0
    for _ in range(400):
        a = [rng.gauss(3.0, 0.8) for _ in range(24)]
        b = [rng.gauss(2.5, 0.6) for _ in range(24)]
        ci = ratio_of_means_interval(a, b)
        assert ci.point == pytest.approx((sum(a) / 24) / (sum(b) / 24)) and ci.low < ci.point < ci.high
        held += ci.low <= 1.2 <= ci.high
    assert 0.92 <= held / 400 <= 0.98
    with pytest.raises(ValueError, match="both means positive"):
        ratio_of_means_interval([0.0, 0.0], [1.0, 2.0])

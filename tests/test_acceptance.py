"""Per-position acceptance (autotune.acceptance): the counts, their pooling, and the profile that predicts the
accepted length at every smaller depth from one measurement at depth K."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.acceptance import AcceptPositions, acceptance_profile, from_histogram, pool, summary


def _chain_rounds(p_accept: list[float], k: int, n: int, seed: int) -> np.ndarray:
    """``n`` rounds of a chain drafter at depth ``k``: position i's token is accepted with probability p_accept[i]
    given the ones before it were (the drafter proposes position i from the tokens before it, whatever k is).
    Returns the accepted draft tokens of each round."""
    rng = np.random.default_rng(seed)
    u = rng.random((n, len(p_accept)))
    ok = u < np.array(p_accept)
    first_miss = np.where(ok.all(axis=1), len(p_accept), ok.argmin(axis=1))
    return np.minimum(first_miss, k)


def _counts(accepted: np.ndarray, k: int) -> AcceptPositions:
    """The per-position counter as vLLM keeps it: position i counts the drafts with more than i accepted."""
    return AcceptPositions(int(accepted.size), tuple(int((accepted > i).sum()) for i in range(k)))


def test_one_measurement_at_depth_k_predicts_every_smaller_depth():
    p = [0.8, 0.7, 0.6, 0.5, 0.4]
    at_k = _counts(_chain_rounds(p, 5, 200_000, seed=1), 5)
    profile = acceptance_profile(at_k.rates)
    assert len(profile) == 5
    for k in range(1, 6):  # measured separately at depth k, other draws
        measured = _chain_rounds(p, k, 200_000, seed=10 + k).mean()
        assert profile[k - 1] == pytest.approx(measured, abs=0.01), k
    # and the closed form: sum over i <= k of prod_{j<=i} p_j
    exact = np.cumsum(np.cumprod(p))
    assert profile == pytest.approx(exact, abs=0.01)


def test_profile_is_the_running_sum():
    assert acceptance_profile([0.9, 0.5, 0.25]) == pytest.approx((0.9, 1.4, 1.65))
    assert acceptance_profile([]) == ()


@pytest.mark.parametrize(
    ("rates", "match"),
    [([0.5, 0.7], "position 2 .* exceeds the one at position 1"), ([1.2], "position 1 is 1.2"), ([-0.1], "-0.1")],
)
def test_profile_refuses_rates_that_are_not_prefix_probabilities(rates, match):
    with pytest.raises(ValueError, match=match):
        acceptance_profile(rates)


def test_from_histogram_is_the_per_position_counter():
    accepted = _chain_rounds([0.8, 0.6, 0.5], 3, 5000, seed=3)
    hist = np.bincount(accepted).tolist()  # SGLang's spec_correct_drafts_histogram of those rounds
    assert from_histogram(hist) == _counts(accepted, 3)
    assert from_histogram([]) is None
    assert from_histogram([0, 0]) is None
    assert from_histogram([3, "x"]) is None


def test_pool_sums_counts_and_pads_shorter_ones():
    a = AcceptPositions(10, (8, 5, 2))
    b = AcceptPositions(30, (20, 9))  # nothing ever accepted at position 3: the histogram stops short
    got = pool([a, None, b, AcceptPositions(0, ())])
    assert got == AcceptPositions(40, (28, 14, 2))
    assert got.rates == pytest.approx((0.7, 0.35, 0.05))
    assert pool([None]) is None


def test_record_round_trip_and_summary():
    a = AcceptPositions(4, (3, 1))
    assert AcceptPositions.from_dict(a.to_dict()) == a
    assert AcceptPositions.from_dict(None) is None
    assert AcceptPositions.from_dict({"drafts": 4, "accepted": [1.5]}) is None
    s = summary(a)
    assert s == {"drafts": 4, "rates": [0.75, 0.25], "profile": [0.75, 1.0]}
    assert summary(AcceptPositions(4, (1, 3)))["profile"] is None  # not prefix counts: rates only
    assert summary(None) is None

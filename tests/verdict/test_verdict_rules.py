"""The one verdict function and the one clearly-loses rule (``autotune.verdict``): pure tables."""

from __future__ import annotations

import json
import math

import pytest

from autotune.stats import Interval, upper_bound
from autotune.verdict import (
    Verdict,
    clearly_loses,
    loses_on,
    point_verdict,
    prune_decision,
    search_verdict,
    verdict,
    with_unweighed,
)

S, B, N = Verdict.SPECULATION_WINS, Verdict.BASELINE_WINS, Verdict.INCONCLUSIVE
G = Verdict.NO_WORTHWHILE_GAIN


def _iv(low: float, high: float) -> Interval:
    return Interval(point=(low + high) / 2, low=low, high=high, n=3, confidence=0.95)


def test_the_verdict_is_a_string_stored_and_printed_as_its_value() -> None:
    assert [v.value for v in Verdict] == ["speculation-wins", "baseline-wins", "no-worthwhile-gain", "inconclusive"]
    assert json.dumps({"v": S}) == '{"v": "speculation-wins"}'
    assert f"{B}" == str(B) == "baseline-wins" and N == "inconclusive"


@pytest.mark.parametrize(
    ("interval", "min_gain", "unweighed", "expected"),
    [
        (None, 0.02, False, B),  # nothing left to confirm
        (None, 0.02, True, N),  # ... but a config could not be weighed
        (_iv(1.03, 1.10), 0.02, False, S),
        (_iv(1.03, 1.10), 0.02, True, S),  # a proven winner stays one
        (_iv(1.02, 1.10), 0.02, False, N),  # the low end must clear 1 + min_gain strictly
        (_iv(1.01, 1.10), 0.0, False, S),
        (_iv(0.90, 0.99), 0.02, False, B),
        (_iv(0.90, 0.99), 0.02, True, N),
        (_iv(0.90, 1.00), 0.02, False, G),  # not below 1 strictly, but below the bar: no worthwhile gain
        (_iv(0.95, 1.05), 0.02, False, N),
        # the field report's case: a tie whose interval lies under the bar, whatever it gains is not worth it
        (_iv(0.98, 1.03), 0.05, False, G),
        (_iv(0.98, 1.03), 0.05, True, N),  # ... unless a config could not be weighed
        (_iv(0.98, 1.05), 0.05, False, N),  # the high end must be strictly below 1 + min_gain
        (_iv(0.98, 1.03), 0.02, False, N),  # straddles a 2% bar: cannot tell
        (_iv(0.90, 1.00), 0.0, False, N),  # no bar: only below 1 decides
    ],
)
def test_verdict_table(interval: Interval | None, min_gain: float, unweighed: bool, expected: Verdict) -> None:
    assert verdict(interval, min_gain, unweighed=unweighed) is expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [(S, S), (B, N), (G, N), (N, N), ("baseline-wins", N), ("no-worthwhile-gain", N), ("inconclusive", N)],
)
def test_with_unweighed(given: str, expected: Verdict) -> None:
    assert with_unweighed(given) is expected


def test_which_verdicts_deploy_the_baseline() -> None:
    assert [v for v in Verdict if v.deploys_baseline] == [B, G]


@pytest.mark.parametrize(
    ("upper", "bar", "loses"),
    [
        (0.99, 1.0, True),
        (1.0, 1.0, False),
        (1.01, 1.0, False),
        (0.94, 0.95, True),
        (0.95, 0.95, False),
        (math.inf, 1.0, False),
    ],
)
def test_clearly_loses_is_strictly_below_the_bar(upper: float, bar: float, loses: bool) -> None:
    assert clearly_loses(upper, bar) is loses


@pytest.mark.parametrize(
    ("logs", "confidence", "noise"),
    [
        ([math.log(0.8)] * 2 + [math.log(0.82)], 0.95, 0.035),
        ([math.log(0.97), math.log(0.99), math.log(0.98)], 0.95, 0.035),
        ([math.log(0.97), math.log(0.99), math.log(0.98)], 0.95, 0.0),
        ([math.log(1.1), math.log(1.2)], 0.99, 0.035),
        ([math.log(0.5)], 0.95, 0.035),  # one pair: no bound, never loses
    ],
)
def test_loses_on_applies_the_rule_to_the_upper_bound(logs: list[float], confidence: float, noise: float) -> None:
    ub = upper_bound(logs, confidence, noise)
    assert loses_on(logs, confidence=confidence, start_noise=noise) is (ub < 1.0)


def test_the_prune_decision_is_the_rule_after_enough_prompts() -> None:
    slow, base = [80.0, 82.0, 81.0], [100.0, 100.0, 100.0]
    d = prune_decision(slow, base, confidence=0.95, min_prompts=2)
    assert d.prune and clearly_loses(d.upper_bound)
    assert not prune_decision(slow, base, confidence=0.95, min_prompts=4).prune  # too few prompts yet
    even = prune_decision([100.0, 99.0, 101.0], base, confidence=0.95, min_prompts=2)
    assert not even.prune and not clearly_loses(even.upper_bound)


@pytest.mark.parametrize(
    ("lost", "excluded", "expected", "rests_on"),
    [
        ([], 0, B, "search (no speculative trial survived pruning)"),
        ([True, True], 0, B, "search (every speculative trial lost to its baseline)"),
        ([True, False], 0, N, "search only (not confirmed)"),
        ([True, None], 0, N, "search only (not confirmed)"),  # no baseline to compare with
        ([], 2, N, "search only (not confirmed); 2 config(s) excluded"),
        ([True, True], 1, N, "search only (not confirmed); 1 config(s) excluded"),
    ],
)
def test_search_verdict_table(lost: list[bool | None], excluded: int, expected: Verdict, rests_on: str) -> None:
    assert search_verdict(lost, excluded) == (expected, rests_on)


def test_search_verdict_reads_lazily_up_to_the_first_trial_that_did_not_lose() -> None:
    read = []

    def lost():
        for x in (True, False, True):
            read.append(x)
            yield x

    assert search_verdict(lost(), 0)[0] is N
    assert read == [True, False]


@pytest.mark.parametrize(
    ("speedup", "slo_broken", "expected"),
    [(1.2, False, S), (1.2, True, B), (1.0, False, B), (0.9, False, B), (None, False, B)],
)
def test_point_verdict_of_one_search_level(speedup: float | None, slo_broken: bool, expected: Verdict) -> None:
    assert point_verdict(speedup, slo_broken) is expected

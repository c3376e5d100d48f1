"""Where a start's noise comes from (``autotune.noise.split``) and how many passes of the prompts a start should
measure (``passes_for``, ``shrink``), on synthetic starts whose noise is known."""

from __future__ import annotations

import math
import random

import pytest

from autotune.noise import MAX_PASSES, NoiseSplit, passes_for, shrink, split, start_variance

#: five prompts of different speeds (their own tok/s: what the split must take out)
PROMPTS = (80.0, 120.0, 95.0, 140.0, 60.0)


def _starts(rng, n, start_sd, request_sd, passes=1, interaction=0.0, level=1.0):
    """``n`` starts of one config: a start factor, a start x prompt factor (same on every pass of that start), and
    each request's own factor."""
    out = []
    for _ in range(n):
        f = math.exp(rng.gauss(0, start_sd))
        inter = [math.exp(rng.gauss(0, interaction)) for _ in PROMPTS]
        out.append(
            [
                [level * p * f * g * math.exp(rng.gauss(0, request_sd)) for p, g in zip(PROMPTS, inter, strict=True)]
                for _ in range(passes)
            ]
        )
    return out


def test_the_split_recovers_the_noise_between_starts_and_per_request():
    rng = random.Random(3)
    configs = [_starts(rng, 40, 0.03, 0.01, level=lv) for lv in (1.0, 1.4, 0.8)]
    s = split(configs)
    assert s is not None and not s.repeat
    assert s.prompts == 5 and s.start_df == 3 * 39 and s.request_df == 3 * 39 * 4
    assert s.start_sd == pytest.approx(0.03, rel=0.2)
    assert s.request_sd == pytest.approx(0.01, rel=0.15)
    # the other way round: requests noisy, starts quiet
    s = split([_starts(rng, 40, 0.005, 0.08, level=lv) for lv in (1.0, 2.0)])
    assert s.request_sd == pytest.approx(0.08, rel=0.15)
    assert s.start_sd < 0.02


def test_repeated_passes_measure_the_request_noise_without_the_start_by_prompt_interaction():
    """A start x prompt term (a prompt slower on this server, on every pass) is not averaged by more passes: from
    one pass it reads as request noise (an upper bound); passes on one server separate it."""
    rng = random.Random(5)
    one = split([_starts(rng, 30, 0.02, 0.01, passes=1, interaction=0.04)])
    two = split([_starts(rng, 30, 0.02, 0.01, passes=2, interaction=0.04)])
    assert one is not None and two is not None
    assert not one.repeat and one.request_sd == pytest.approx(math.hypot(0.04, 0.01), rel=0.2)
    assert two.repeat and two.request_sd == pytest.approx(0.01, rel=0.2)


def test_no_split_without_two_starts_of_one_config_over_the_same_prompts():
    rng = random.Random(1)
    assert split([]) is None
    assert split([_starts(rng, 1, 0.02, 0.01), _starts(rng, 1, 0.02, 0.01)]) is None
    short = [[[100.0, 101.0]], [[99.0]]]  # the second start measured other prompts: not comparable
    assert split([short]) is None
    assert split([[[[100.0, 0.0, 90.0]], [[99.0, 98.0, 91.0]]]]) is None  # a zero tok/s is no measurement


def _split(start_sd, request_sd, df=30, prompts=5):
    return NoiseSplit(start_sd, df, request_sd, df * 4, prompts, True)


def test_one_pass_where_starts_carry_the_noise_and_more_where_slow_starts_meet_noisy_requests():
    # the field report's case at temperature 0: 2.5% between starts, 0.5% a request, ten-minute starts
    calibrated = passes_for(_split(0.025, 0.005), start_s=600, pass_s=60)
    assert calibrated.passes == 1 and "one pass per start is cheapest" in calibrated.text
    # sampling at a temperature on the same node: a request 10%, starts 1% apart
    sampled = passes_for(_split(0.01, 0.10), start_s=600, pass_s=60)
    assert sampled.passes == MAX_PASSES and sampled.optimum > MAX_PASSES
    # a small model on an H200 at temperature 0: starts in 2.5 s against 4 s of prompts, requests repeat closely
    assert passes_for(_split(0.01, 0.005), start_s=2.5, pass_s=4).passes == 1
    # noisy requests on that model: a start is cheap, but one pass of five prompts is 4.5% noise against 1%
    assert passes_for(_split(0.01, 0.10), start_s=2.5, pass_s=4).passes == 4
    # the optimum is the two-stage sample size sqrt(r^2 / P / s^2 * C / c)
    p = passes_for(_split(0.02, 0.05), start_s=400, pass_s=25, most=10)
    assert p.optimum == pytest.approx(0.05 / math.sqrt(5) / 0.02 * math.sqrt(400 / 25))
    assert p.passes == round(p.optimum)


def test_a_few_starts_that_agree_by_luck_do_not_buy_passes_against_the_prior():
    lucky = NoiseSplit(0.0, 2, 0.02, 8, 5, False)  # two pairs of starts that happened to agree
    assert passes_for(lucky, start_s=600, pass_s=60).passes == MAX_PASSES  # the measurement alone
    with_prior = passes_for(lucky, start_s=600, pass_s=60, prior=(0.035 / math.sqrt(2), 3.0))
    assert with_prior.passes == 1 and "with the prior" in with_prior.text
    # too few degrees of freedom between starts: the passes now are kept
    assert passes_for(NoiseSplit(0.01, 1, 0.1, 4, 5, False), 600, 60, now=2).passes == 2
    assert passes_for(None, 600, 60).passes == 1
    with pytest.raises(ValueError):
        passes_for(lucky, 600, 60, most=0)


def test_more_passes_shrink_a_rounds_variance_by_the_request_share_only():
    s = _split(0.02, 0.10)
    v1, v4 = start_variance(s, 1), start_variance(s, 4)
    assert v1 == pytest.approx(0.02**2 + 0.10**2 / 5)
    assert v4 == pytest.approx(0.02**2 + 0.10**2 / 20)
    assert shrink(s, 4, [1, 1, 1]) == pytest.approx(v4 / v1)
    assert shrink(s, 1, [1, 1]) == 1.0
    assert shrink(_split(0.03, 0.0), 4, [1, 1]) == pytest.approx(1.0)  # no request noise: passes buy nothing
    assert shrink(None, 4, [1]) == 1.0 and shrink(s, 4, []) == 1.0

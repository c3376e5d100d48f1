"""The surrogate (pure): encoding, fit, and what it is for: picking a near-optimal config from noisy single starts
better than the best single measurement does."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autotune.config import TrialConfig
from autotune.surrogate import Encoding, Surrogate


def cfg(steps: int, topk: int, n: int, drafter: str = "d", cuda_graph: bool = True) -> TrialConfig:
    return TrialConfig.make(drafter, cuda_graph, num_steps=steps, topk=topk, num_draft_tokens=n)


GRID = [cfg(s, k, n) for s in range(1, 9) for k in (1, 2, 4, 8) for n in range(2, 65, 2) if n >= s + 1]


def true_log_speed(c: TrialConfig) -> float:
    """A smooth landscape with a broad top, like the simulator's: best near steps 6, topk 4, N 32."""
    s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
    return 0.8 - 0.02 * (s - 6) ** 2 - 0.05 * (math.log2(k) - 2) ** 2 - 0.04 * (math.log2(n) - 5) ** 2


def test_encoding_scales_knobs_and_groups_by_drafter_and_graphs():
    enc = Encoding.from_configs(GRID + [cfg(3, 2, 8, drafter="other", cuda_graph=False)])
    assert enc.knobs == ("num_draft_tokens", "num_steps", "topk")
    assert enc.logs == (True, True, True)  # each spans a factor of 4 or more
    assert enc.coords(cfg(1, 1, 2)) == [0.0, 0.0, 0.0]
    assert enc.coords(cfg(8, 8, 64)) == [1.0, 1.0, 1.0]
    assert enc.coords(cfg(1, 1, 8))[0] == pytest.approx(2 / 5)  # log2(8) between log2(2) and log2(64)
    assert enc.group(cfg(3, 2, 8)) != enc.group(cfg(3, 2, 8, drafter="other"))
    assert enc.group(cfg(3, 2, 8)) != enc.group(cfg(3, 2, 8, cuda_graph=False))
    assert enc.group(cfg(3, 2, 8)) == enc.group(cfg(5, 4, 16))
    narrow = Encoding.from_configs([cfg(2, 1, 3), cfg(3, 1, 4)])  # topk has one value: no coordinate
    assert narrow.knobs == ("num_draft_tokens", "num_steps") and narrow.logs == (False, False)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one observation"):
        Surrogate(Encoding.from_configs(GRID), [])
    with pytest.raises(ValueError, match="noise_floor"):
        Surrogate(Encoding.from_configs(GRID), [(GRID[0], 1.0)], noise_floor=0.0)


def test_fit_respects_the_noise_floor_and_averages_repeats():
    enc = Encoding.from_configs(GRID)
    a, b = cfg(4, 2, 16), cfg(6, 4, 32)
    obs = [(a, 0.50), (a, 0.56), (b, 0.70), (b, 0.74), (cfg(2, 1, 3), 0.2), (cfg(8, 8, 64), 0.3)]
    model = Surrogate(enc, obs, noise_floor=0.03)
    _lengths, _signal, noise, _rho = model.params
    assert noise >= 0.03
    mean, sd = model.predict([a, b])
    assert 0.45 < mean[0] < 0.61 and 0.65 < mean[1] < 0.79  # near each config's own average
    assert mean[1] > mean[0]
    assert (sd > 0).all()


def test_posterior_mean_picks_better_than_the_best_single_noisy_start():
    """30 configs measured once with 2.5% start noise: the config with the highest posterior mean is, over 30
    seeds, closer to the optimum than the config with the highest single measurement (the winner's curse)."""
    enc = Encoding.from_configs(GRID)
    truth = np.array([true_log_speed(c) for c in GRID])
    best = truth.max()
    raw_regret, model_regret = [], []
    for seed in range(30):
        rng = random.Random(seed)
        idx = rng.sample(range(len(GRID)), 30)
        obs = [(GRID[i], truth[i] + rng.gauss(0, 0.025)) for i in idx]
        model = Surrogate(enc, obs, noise_floor=0.025)
        mean, _ = model.predict([GRID[i] for i in idx])
        raw_pick = idx[int(np.argmax([y for _, y in obs]))]
        model_pick = idx[int(np.argmax(mean))]
        raw_regret.append(best - truth[raw_pick])
        model_regret.append(best - truth[model_pick])
    assert np.mean(model_regret) < np.mean(raw_regret)
    assert sum(m <= r for m, r in zip(model_regret, raw_regret, strict=True)) >= 20


def test_unmeasured_group_reverts_to_the_prior_with_more_uncertainty():
    enc = Encoding.from_configs(GRID + [cfg(4, 2, 16, drafter="other")])
    obs = [(c, true_log_speed(c)) for c in GRID[::25]]
    model = Surrogate(enc, obs, noise_floor=0.02)
    mean, sd = model.predict([cfg(6, 4, 32), cfg(6, 4, 32, drafter="other")])
    assert sd[1] > sd[0]


def test_two_unmeasured_groups_are_two_groups_in_the_joint_draws():
    """Draws at one point of two groups nobody measured are correlated as two groups (by ``rho``), not as one
    (which would make the maximum over them look like a single config's and understate what they could hold)."""
    rng = random.Random(4)
    obs = [(c, true_log_speed(c) + rng.gauss(0, 0.02)) for c in GRID[::20]]
    obs += [
        (cfg(c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens"), drafter="weak"), v - 0.9)
        for c, v in obs[::2]
    ]
    enc = Encoding.from_configs(GRID + [cfg(6, 4, 32, drafter=d) for d in ("x", "y")])
    model = Surrogate(enc, obs, noise_floor=0.02)
    draws = model.sample([cfg(6, 4, 32, drafter="x"), cfg(6, 4, 32, drafter="y")], 4000, np.random.default_rng(0))
    corr = float(np.corrcoef(draws[:, 0], draws[:, 1])[0, 1])
    # as one group (the same point twice) they would move together exactly; here what the measured groups leave
    # unexplained of each is its own
    assert corr < 0.9, corr
    same = model.sample([cfg(6, 4, 32, drafter="x"), cfg(6, 4, 31, drafter="x")], 4000, np.random.default_rng(0))
    assert float(np.corrcoef(same[:, 0], same[:, 1])[0, 1]) > 0.95

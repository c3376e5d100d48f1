"""The surrogate (pure): encoding, fit, and what it is for: picking a near-optimal config from noisy single starts
better than the best single measurement does (on a fixed case here; over many seeds: scripts/bench_statistics.py)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from autotune.config import PromptResult, TrialConfig
from autotune.surrogate import Encoding, FactoredSurrogate, Surrogate, fit, log_round_cost, tokens_per_round


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
    assert enc.coords(cfg(1, 1, 2)) == (0.0, 0.0, 0.0)
    assert enc.coords(cfg(8, 8, 64)) == (1.0, 1.0, 1.0)
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


def test_the_posterior_mean_discounts_a_lucky_single_start():
    """30 configs measured once with 2.5% start noise (this seed's draws): the highest single measurement is a start
    7% above its config's truth, far from the optimum; the posterior mean there is pulled down toward its
    neighbours and the highest posterior mean is a config much nearer the optimum (the winner's curse avoided).
    Over 30 seeds: scripts/bench_statistics.py (``posterior_mean_pick``)."""
    enc = Encoding.from_configs(GRID)
    truth = np.array([true_log_speed(c) for c in GRID])
    rng = random.Random(1)
    idx = rng.sample(range(len(GRID)), 30)
    obs = [(GRID[i], truth[i] + rng.gauss(0, 0.025)) for i in idx]
    mean, _ = Surrogate(enc, obs, noise_floor=0.025).predict([GRID[i] for i in idx])
    raw = int(np.argmax([y for _, y in obs]))
    pick = int(np.argmax(mean))
    assert obs[raw][1] - truth[idx[raw]] > 0.05  # the lucky start
    assert mean[raw] < obs[raw][1] - 0.02
    assert pick != raw and truth.max() - truth[idx[pick]] < 0.5 * (truth.max() - truth[idx[raw]])


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


# ------------------------------------------------------------------------- factored: acceptance x a round's cost


def chain_tau(a: float, steps: int, topk: int, n: int) -> float:
    """Tokens a round yields: a chain of ``steps`` (the bonus included), a little more for a wider tree."""
    return (1 - a ** (steps + 1)) / (1 - a) * (1 + 0.04 * math.log2(topk) * min(1.0, n / 16))


def round_s(steps: int, topk: int, n: int, graphs: bool) -> float:
    """What a round costs: a fixed part (larger without CUDA graphs), each draft step, each verified token."""
    return (8.0 if graphs else 14.0) + (1.0 if graphs else 3.5) * steps + 0.06 * n + (0.5 if topk > 1 else 0.0)


def synthetic_starts(configs, rng, start_noise=0.025):
    """(config, log tok/s, log seconds per round) of one start each: the start's noise in the round's cost."""
    out = []
    for c in configs:
        s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
        tau = chain_tau(0.6, s, k, n) * math.exp(rng.normal(0, 0.004))
        cyc = round_s(s, k, n, bool(c.cuda_graph)) * math.exp(rng.normal(0, start_noise))
        out.append((c, math.log(tau / cyc), math.log(cyc)))
    return out


def test_a_starts_round_cost_is_its_acceptance_over_its_tok_per_s_taken_to_the_whole_prompt_set():
    """Acceptance per round is tokens over rounds; a start that measured only the first prompts has its
    acceptance taken to the whole set by the completed starts' ratio on the same prompts (here the code prompt
    accepts twice as much as the chat one on every drafter)."""
    code = PromptResult(0, 200, 1.0, accept_length=4.0)  # 50 rounds
    chat = PromptResult(1, 200, 1.0, accept_length=2.0)  # 100 rounds
    assert tokens_per_round([code, chat]) == pytest.approx(400 / 150)
    assert tokens_per_round([code, replace(chat, accept_length=None)]) is None
    full = [code, chat]
    # a completed start: its own acceptance over all prompts, minus its log tok/s
    assert log_round_cost(full, math.log(100.0), [full]) == pytest.approx(math.log(400 / 150 / 100.0))
    # a stopped start that measured the code prompt only, at acceptance 6 (1.5x the completed start's there):
    # over the whole set it would be 1.5 x 400/150
    stopped = [replace(code, accept_length=6.0)]
    assert log_round_cost(stopped, math.log(100.0), [full]) == pytest.approx(math.log(1.5 * 400 / 150 / 100.0))
    assert log_round_cost(stopped, math.log(100.0), []) is None  # nothing to take it over with
    assert log_round_cost([], math.log(100.0), [full]) is None


def test_factored_model_is_acceptance_minus_cost_and_shares_acceptance_across_graph_settings():
    enc = Encoding.from_configs(GRID)
    on, off = cfg(4, 2, 16, cuda_graph=True), cfg(4, 2, 16, cuda_graph=False)
    obs = synthetic_starts(
        [on, cfg(2, 1, 3), cfg(6, 4, 32), cfg(8, 8, 64), cfg(3, 2, 8, cuda_graph=False)], np.random.default_rng(1)
    )
    model = fit(enc, obs, noise_floor=0.025)
    assert isinstance(model, FactoredSurrogate)
    mean, _sd = model.predict([on])
    la, lc = model.predict_factors([on])
    assert mean[0] == pytest.approx(la[0] - lc[0])
    # acceptance does not depend on the graphs: the graphs-off twin of a measured config gets its acceptance
    la_off, _ = model.accept.predict([off])
    assert la_off[0] == pytest.approx(la[0], abs=1e-9)
    assert enc.group(on) != enc.group(off)  # while the round's cost keeps them apart
    # one start without an acceptance length: one GP of log tok/s
    plain = fit(enc, obs[:-1] + [(obs[-1][0], obs[-1][1], None)], noise_floor=0.025)
    assert isinstance(plain, Surrogate)


def test_factored_model_predicts_unmeasured_configs_better_and_stays_calibrated():
    """tok/s is acceptance over a round's cost: a ratio with its optimum inside the space. From a dozen noisy
    starts the factored model predicts the whole grid with a smaller error than one GP of log tok/s, and its
    intervals hold the truth (here: an error of 0.048 against 0.065 in log tok/s; 5% of the grid's truths more
    than 2 sd away from the factored mean, 13% from the single GP's)."""
    rng = np.random.default_rng(7)
    grid = [c for c in GRID if c.knob("num_steps") <= 6] + [
        cfg(c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens"), cuda_graph=False)
        for c in GRID
        if c.knob("num_steps") <= 6
    ]
    truth = np.array(
        [
            math.log(
                chain_tau(0.6, c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens"))
                / round_s(c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens"), bool(c.cuda_graph))
            )
            for c in grid
        ]
    )
    picked = [grid[i] for i in rng.choice(len(grid), size=12, replace=False)]
    obs = synthetic_starts(picked, rng)
    enc = Encoding.from_configs(grid)
    errors = {}
    for name, o in (("factored", obs), ("plain", [(c, v, None) for c, v, _ in obs])):
        mean, sd = fit(enc, o, noise_floor=0.025).predict(grid)
        errors[name] = (float(np.sqrt(np.mean((mean - truth) ** 2))), float(np.mean(np.abs(truth - mean) > 2 * sd)))
    assert errors["factored"][0] < 0.8 * errors["plain"][0], errors
    assert errors["factored"][1] < 0.10, errors


def test_a_level_per_graph_setting_carries_a_shape_measured_in_one_group_to_the_other():
    """A round's cost: the same shape in steps and tokens with graphs on and off, off a level higher (launch
    overhead). With a level per graph setting (``level_of``), two graphs-off starts place the whole graphs-off
    group on the shape the graphs-on starts measured; without it the group correlation alone must explain the
    offset and predicts the graphs-off configs worse."""
    rng = np.random.default_rng(3)
    shape = [
        cfg(s, k, n)
        for s, k, n in ((1, 1, 2), (2, 1, 3), (3, 2, 8), (4, 2, 16), (5, 4, 32), (6, 4, 48), (8, 8, 64), (2, 4, 8))
    ]
    off_measured = [cfg(3, 1, 4, cuda_graph=False), cfg(6, 8, 48, cuda_graph=False)]
    off_unmeasured = [
        cfg(s, k, n, cuda_graph=False) for s, k, n in ((1, 1, 2), (2, 2, 6), (4, 4, 24), (5, 2, 12), (8, 8, 64))
    ]

    def log_cost(c: TrialConfig) -> float:
        s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
        return math.log(round_s(s, k, n, True)) + (0.0 if c.cuda_graph else 0.7)

    obs = [(c, log_cost(c) + rng.normal(0, 0.02)) for c in shape + off_measured]
    enc = Encoding.from_configs(GRID + off_unmeasured)
    truth = np.array([log_cost(c) for c in off_unmeasured])
    with_level = Surrogate(enc, obs, noise_floor=0.02, level_of=lambda c: bool(c.cuda_graph))
    without = Surrogate(enc, obs, noise_floor=0.02)
    assert with_level.level > 0
    err_with = float(np.abs(with_level.predict(off_unmeasured)[0] - truth).max())
    err_without = float(np.abs(without.predict(off_unmeasured)[0] - truth).max())
    assert err_with < 0.08 and err_with < 0.6 * err_without, (err_with, err_without)  # 0.061 and 0.115 here


def _brute_force_fit(model: Surrogate) -> tuple[tuple, float]:
    """The grid's best combo by one Cholesky per combo, in the grid's order (the fit before its closed form)."""
    import itertools

    from autotune import surrogate as s

    n, dims = model.X.shape
    same_level = (model.lv[:, None] == model.lv[None, :]).astype(float)
    same = model.g[:, None] == model.g[None, :]
    best, best_ll = None, -math.inf
    for lengths in itertools.product(s.LENGTHS, repeat=dims):
        for sig in s.SIGNAL:
            for f in s.NOISE_FACTORS:
                for rho in s.RHO if len(model._groups) > 1 else (0.0,):
                    for lv in s.LEVEL if model._level_of is not None else (0.0,):
                        d2 = sum(
                            (
                                ((model.X[:, j : j + 1] - model.X[:, j : j + 1].T) / ell) ** 2
                                for j, ell in enumerate(lengths)
                            ),
                            np.zeros((n, n)),
                        )
                        noise = f * model.noise_floor
                        K = (sig * model.scale) ** 2 * np.exp(-0.5 * d2) * np.where(same, 1.0, rho)
                        K += (noise**2 + 1e-10) * np.eye(n) + (lv * model.scale) ** 2 * same_level
                        L = np.linalg.cholesky(K)
                        z = np.linalg.solve(L, model.y)
                        ll = -0.5 * z @ z - np.log(np.diag(L)).sum()
                        if ll > best_ll + 1e-9:
                            best, best_ll = ((lengths, sig * model.scale, noise, rho), lv * model.scale), ll
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_fit_picks_the_combo_one_cholesky_per_combo_picks(seed):
    rng = random.Random(seed)
    obs = [
        (
            cfg(rng.randint(1, 8), rng.choice([1, 2, 4, 8]), rng.randint(9, 64), rng.choice("ab"), rng.random() < 0.5),
            rng.gauss(5.0, 0.3),
        )
        for _ in range(rng.randint(3, 14))
    ]
    enc = Encoding.from_configs([c for c, _ in obs])
    level_of = (lambda c: bool(c.cuda_graph)) if seed % 2 else None
    model = Surrogate(enc, obs, noise_floor=0.02, level_of=level_of)
    assert (model.params, model.level) == _brute_force_fit(model)


def test_the_surrogates_blas_runs_one_thread_inside_its_context_only():
    """``one_blas_thread``: BLAS's threads spin-waiting beside the surrogate's small factorizations doubled the
    loop's CPU (scripts/bench_loop.py); inside the context BLAS runs one thread, outside it as many as before."""
    from threadpoolctl import threadpool_info

    from autotune.surrogate import one_blas_thread

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    outside = blas_threads()
    assert outside  # numpy's BLAS is loaded (the surrogate imports numpy)
    with one_blas_thread():
        assert blas_threads() == [1] * len(outside)
    assert blas_threads() == outside


def mcfg(method: str, steps: int, n: int, drafter: str | None = None) -> TrialConfig:
    return TrialConfig.make(drafter, True, method=method, num_steps=steps, topk=1, num_draft_tokens=n)


MGRID = [mcfg(m, s, s + 1, "h" if m == "eagle3" else None) for m in ("eagle3", "ngram") for s in range(1, 9)]


def test_methods_are_modelled_apart():
    """One model per method (``fit_by_method``): another method's measurements never move a method's prediction
    (the steps knob means different things per method), and a method without its own evidence stays uncertain
    (#46: an n-gram config predicted far too low, with little uncertainty, from EAGLE-3's data)."""
    from autotune.surrogate import MethodSurrogate, fit_by_method

    def method(c):
        return c.knob("method")

    eagle = [(mcfg("eagle3", s, s + 1, "h"), 5.5 - 0.05 * (s - 4) ** 2, None) for s in (1, 3, 5, 7)]
    ngram = [(mcfg("ngram", s, s + 1), 6.2 + 0.02 * s, None) for s in (2, 6, 8)]
    a = fit_by_method(MGRID, eagle + ngram, key_of=method, noise_floor=0.02, min_own=3)
    assert isinstance(a, MethodSurrogate) and a.own(mcfg("ngram", 4, 5)) == 3
    # EAGLE-3 measured ten times lower: n-gram's predictions do not move
    low = [(c, v - 2.3, y) for c, v, y in eagle]
    b = fit_by_method(MGRID, low + ngram, key_of=method, noise_floor=0.02, min_own=3)
    probe = [mcfg("ngram", s, s + 1) for s in (1, 4, 7)]
    np.testing.assert_allclose(a.predict(probe)[0], b.predict(probe)[0])
    np.testing.assert_allclose(a.predict(probe)[1], b.predict(probe)[1])
    # joint draws are independent across methods
    draws = a.sample([mcfg("eagle3", 2, 3, "h"), mcfg("ngram", 4, 5)], 4000, np.random.default_rng(0))
    assert abs(np.corrcoef(draws.T)[0, 1]) < 0.05
    # a method with one measurement of its own: the study's spread as its uncertainty away from it
    one = fit_by_method(MGRID, eagle + ngram[:1], key_of=method, noise_floor=0.02, min_own=3)
    _, sd = one.predict([mcfg("ngram", 8, 9)])
    spread = float(np.std([v for _, v, _ in eagle + ngram[:1]]))
    assert one.own(mcfg("ngram", 8, 9)) == 1 and sd[0] > 0.8 * spread


def test_leave_one_out_is_the_prediction_from_the_other_configs():
    """``Surrogate.loo``: each measured config's observations' mean minus the model's prediction of it from the other
    configs' observations (the fitted hyperparameters kept), repeats of a config left out together."""
    obs = [(c, true_log_speed(c) + 0.03 * math.sin(i)) for i, c in enumerate(GRID[::41])]
    obs.append((obs[2][0], obs[2][1] + 0.02))  # a repeat
    model = Surrogate(Encoding.from_configs(GRID), obs, noise_floor=0.02)
    res, sds = model.loo()
    keys = list(dict.fromkeys(c.key() for c, _ in obs))
    assert len(res) == len(keys) == len(sds)
    _lengths, _signal, noise, _rho = model.params
    K = model._cov(model.X, model.g, model.lv, model.X, model.g, model.lv) + (noise**2 + 1e-10) * np.eye(len(obs))
    y = model.y
    for j, key in enumerate(keys):
        mine = [i for i, (c, _) in enumerate(obs) if c.key() == key]
        rest = [i for i in range(len(obs)) if i not in mine]
        pred = K[np.ix_(mine, rest)] @ np.linalg.solve(K[np.ix_(rest, rest)], y[rest])
        assert res[j] == pytest.approx(float(np.mean(y[mine] - pred)), abs=1e-6)
        assert 0 < sds[j] < 1


def test_a_methods_opinions_and_draws_carry_its_held_out_error():
    """``MethodSurrogate.opinions``: a factored method's model and one GP of log tok/s over the same measurements,
    each sd at least the model's held-out error; an ``unfactored`` (adaptive) method one GP only. Its joint draws
    move as a whole by that error: a model that missed its own measured configs can miss everywhere at once."""
    from autotune.surrogate import FactoredSurrogate, MethodSurrogate, fit_by_method, held_out_error

    def method(c):
        return c.knob("method")

    eagle = [(mcfg("eagle3", s, s + 1, "h"), 5.5 - 0.05 * (s - 4) ** 2, -3.0 + 0.02 * s) for s in (1, 3, 5, 7)]
    ngram = [
        (mcfg("ngram", s, s + 1), v, -3.5) for s, v in zip((1, 2, 4, 6, 8), (6.0, 6.3, 6.0, 6.3, 6.0), strict=True)
    ]
    model = fit_by_method(MGRID, eagle + ngram, key_of=method, noise_floor=0.02, min_own=3, unfactored=("ngram",))
    assert isinstance(model, MethodSurrogate)
    assert isinstance(model.models["eagle3"], FactoredSurrogate)
    assert not isinstance(model.models["ngram"], FactoredSurrogate)  # adaptive-like: one GP of log tok/s
    probe_e, probe_n = mcfg("eagle3", 2, 3, "h"), mcfg("ngram", 3, 4)
    assert len(model.opinions(probe_e)) == 2 and len(model.opinions(probe_n)) == 1
    err = held_out_error(model.models["ngram"])
    res, _ = model.models["ngram"].loo()
    assert err >= float(np.sqrt(np.mean(res**2))) > 0.1  # a jumpy method: its model misses its own configs
    assert model.opinions(probe_n)[0][1] >= err
    # the draws at a measured n-gram config spread by at least the held-out error (its posterior sd alone is less)
    _, sd = model.models["ngram"].predict([ngram[0][0]])
    assert sd[0] < err
    draws = model.sample([ngram[0][0]], 4000, np.random.default_rng(1))
    assert float(np.std(draws)) > 0.9 * err

"""When the search's answer is settled: the surrogate's joint posterior says how likely any config not measured yet
beats the best measured one by more than the study's resolution (``p_improve``), and how likely any config at all
beats the fastest baseline by ``verdict.min_gain`` (``p_gain``). The search stops before its budget once either is
under ``search.SETTLE_PROBABILITY`` (``budget.n_trials`` is then a cap, not a quota):

- ``p_improve`` small: the best region is found; more trials would refine a difference below the resolution.
- ``p_gain`` small: whatever the best config is, it is unlikely to clear the user's bar; the study goes straight to
  confirmation of that claim (the verdict: no-worthwhile-gain or baseline-wins when confirmation shows it).

Pure over a fitted ``Surrogate`` or ``FactoredSurrogate`` (``settle``); ``check`` reads the study."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autotune.config import TrialConfig
from autotune.records import Settled
from autotune.surrogate import Model

#: how many standard deviations a config's posterior may be off: configs further below every threshold than this
#: cannot move a probability above the Monte Carlo's own resolution and are left out of the joint draw
_REACH_SD = 4.0
#: the largest joint draw (configs); the rest are the least promising by mean + _REACH_SD sd
_MAX_JOINT = 400


def settle(
    model: Model,
    measured: Sequence[TrialConfig],
    unmeasured: Sequence[TrialConfig],
    *,
    baseline_log: float | None,
    baseline_sd: float,
    resolution: float,
    min_gain: float,
    threshold: float,
    samples: int,
    seed: int,
    improve_settles: bool = True,
) -> Settled:
    """The probabilities by Monte Carlo over ``samples`` joint draws of the latent log tok/s (seeded: the same
    study asks the same question and gets the same answer). ``baseline_log``: the fastest baseline's log tok/s
    (one measurement: drawn with ``baseline_sd``); None: ``p_gain`` is 1 (nothing to compare with).
    ``improve_settles``: whether a small ``p_improve`` or ``p_change`` may settle the search yet (they are
    computed either way). "The best is found" asks whether an unmeasured config beats the best (``p_improve``) or
    changes the answer (``p_change``: beat the best by the resolution or clear the bar, whichever is higher)."""
    if not measured:
        raise ValueError("settle needs at least one measured config")
    configs = list(measured) + list(unmeasured)
    mean, sd = model.predict(configs)
    n_meas = len(measured)
    best = int(np.argmax(mean[:n_meas]))
    up = math.log1p(resolution)
    gain = math.log1p(min_gain)
    # the configs that could matter: within reach of beating the best by the resolution, or the baseline by the bar
    floor = mean[best] - _REACH_SD * sd[best] + up
    if baseline_log is not None:
        floor = min(floor, baseline_log - _REACH_SD * baseline_sd + gain)
    reach = mean + _REACH_SD * sd
    keep: list[int] = np.flatnonzero((reach > floor) | (np.arange(len(configs)) == best)).tolist()
    if len(keep) > _MAX_JOINT:
        keep = sorted(keep, key=lambda i: (i != best, -reach[i]))[:_MAX_JOINT]
    rng = np.random.default_rng(seed)
    draws = model.sample([configs[i] for i in keep], samples, rng)
    pos = {i: j for j, i in enumerate(keep)}
    f_best = draws[:, pos[best]]
    others = [pos[i] for i in keep if i >= n_meas]
    unmeasured_draws = draws[:, others]
    top = unmeasured_draws.max(axis=1) if others else None
    p_improve = float(np.mean(top - f_best > up)) if top is not None else 0.0
    if baseline_log is None:
        p_gain = 1.0
        bar = f_best
        change = change_bar(f_best, resolution)
    else:
        b = baseline_draws(baseline_log, baseline_sd, samples, rng)
        p_gain = float(np.mean(draws.max(axis=1) - b > gain))
        bar = np.maximum(f_best, b + gain)
        change = change_bar(f_best, resolution, b, min_gain)
    p_change = float(np.mean(top > change)) if top is not None else 0.0
    if top is not None:
        # E[max(0, exp(f_u - ref) - 1)]: expected relative tok/s gain of measuring u next, per unmeasured config
        rel = np.expm1(unmeasured_draws - f_best[:, None])
        e_gain = float(np.maximum(rel, 0.0).mean(axis=0).max())
        rel_bar = np.expm1(unmeasured_draws - np.asarray(bar)[:, None])
        e_gain_bar = float(np.maximum(rel_bar, 0.0).mean(axis=0).max())
    else:
        e_gain = e_gain_bar = 0.0
    reason = None
    if p_gain < threshold:
        reason = (
            f"no config is likely to beat the fastest baseline by the minimum gain ({min_gain:.0%}): "
            f"P = {p_gain:.3f} < {threshold:g} (surrogate over {n_meas} measured and {len(unmeasured)} unmeasured "
            "configs); confirmation checks that claim"
        )
    elif p_improve < threshold and improve_settles:
        reason = (
            f"no unmeasured config is likely to beat the best measured one by more than {resolution:.0%}: "
            f"P = {p_improve:.3f} < {threshold:g} (surrogate over {n_meas} measured and {len(unmeasured)} "
            "unmeasured configs)"
        )
    elif p_change < threshold and improve_settles:
        reason = (
            f"no unmeasured config is likely to change the answer (beat the best measured one by more than "
            f"{resolution:.0%} or the fastest baseline by the minimum gain, {min_gain:.0%}, whichever is higher): "
            f"P = {p_change:.3f} < {threshold:g} (surrogate over {n_meas} measured and {len(unmeasured)} "
            "unmeasured configs); confirmation settles whether the best clears the bar"
        )
    return Settled(
        p_improve=p_improve,
        p_gain=p_gain,
        threshold=threshold,
        resolution=resolution,
        min_gain=min_gain,
        measured=n_meas,
        unmeasured=len(unmeasured),
        reason=reason,
        expected_gain=e_gain,
        expected_gain_bar=e_gain_bar,
        p_change=p_change,
    )


def baseline_draws(baseline_log: float, baseline_sd: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of the fastest baseline's latent log tok/s: its one measurement with a start's noise."""
    return baseline_log + baseline_sd * rng.standard_normal(n)


def change_bar(
    best: np.ndarray, resolution: float, baseline: np.ndarray | None = None, min_gain: float = 0.0
) -> np.ndarray:
    """Per joint draw, what a config must beat to change the answer: the best-ranked config's draw (``best``) by
    more than ``resolution``, or, where that is lower, the fastest baseline's draw (``baseline``, from
    ``baseline_draws``; None: no bar) times ``1 + min_gain``. Asked of the unmeasured configs by the search's stop
    (``Settled.p_change``) and of the candidates by confirmation (``confirm.thin``)."""
    up = best + math.log1p(resolution)
    return up if baseline is None else np.maximum(up, baseline + math.log1p(min_gain))

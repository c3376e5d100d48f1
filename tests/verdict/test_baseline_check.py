"""The baseline check: the search's single baseline start against confirmation's fresh ones.

On an H200 the search's baseline ran 1622 tok/s and confirmation's four fresh ones 1844 (+13.7%;
docs/gpu-runs/2026-12-01-h200-ext-check): the search's speedups were inflated. The other way round, a baseline start
that runs fast makes every config look slower, and a study that prunes them all would say "the baseline wins" on
one start. Tested on the pure check (recorded H200 figures, its limit) and end to end with a scripted runner whose
first baseline start runs off; its false-alarm rate by Monte Carlo: scripts/bench_statistics.py.
"""

from __future__ import annotations

import io
import math

import optuna
import pytest
from scipy import stats as st

from autotune.backends.sglang import SGLangBackend
from autotune.records import BaselineCheck, Round, SuspectPrune
from autotune.render import render_report
from autotune.report import build_report
from autotune.study import Orchestrator, baseline_check, open_study

from ..study.conftest import ScriptedRunner, make_space

H200_SEARCH = 1622.312818501145  # the search's baseline, docs/gpu-runs/2026-12-01-h200-ext-check/resumed/report.json
H200_FRESH_MEAN = 1843.815525779781  # the mean of confirmation's four fresh baselines there


def _rounds(values: list[float], cg: bool = True) -> list[Round]:
    return [Round(baseline={cg: v}) for v in values]


def test_the_h200_search_baseline_is_flagged_as_slow():
    fresh = [H200_FRESH_MEAN * f for f in (0.99, 1.01, 1.005, 0.995)]  # the per-round spread was not recorded: 1%
    [c] = baseline_check.check(_rounds(fresh), {True: H200_SEARCH}, confidence=0.95, start_noise=0.035)
    assert c.flagged and c.ratio == pytest.approx(H200_FRESH_MEAN / H200_SEARCH, rel=1e-3)
    text = baseline_check.text(c)
    assert "slow" in text and "14% too high" in text and "+13.6%" in text


def test_a_baseline_within_the_noise_is_not_flagged_and_a_wide_spread_widens_the_limit():
    fresh = [1844.0, 1810.0, 1870.0, 1830.0]
    [c] = baseline_check.check(_rounds(fresh), {True: 1800.0}, confidence=0.95, start_noise=0.035)
    assert not c.flagged and "within the start-to-start noise" in baseline_check.text(c)
    # fresh starts 20% apart: 14% off is no longer outside their prediction interval
    wide = [1500.0, 1850.0, 2200.0, 1840.0]
    [w] = baseline_check.check(_rounds(wide), {True: H200_SEARCH}, confidence=0.95, start_noise=0.035)
    assert not w.flagged and w.limit > 1.2


def test_two_fresh_starts_catch_a_fast_baseline_and_settings_are_checked_apart():
    rounds = [Round.from_dict({"baseline": {"True": 100.0, "False": 80.0}}), Round({True: 101.0, False: 81.0})]
    checks = baseline_check.check(rounds, {True: 125.0, False: 80.5}, confidence=0.95, start_noise=0.035)
    by = {c.cuda_graph: c for c in checks}
    assert by["True"].flagged and by["True"].ratio < 0.85 and not by["False"].flagged
    assert baseline_check.fast(checks) == {"True": pytest.approx(by["True"].ratio)}
    assert "too low" in baseline_check.text(by["True"])
    # one fresh start is not a check
    assert baseline_check.check(rounds[:1], {True: 125.0}, confidence=0.95, start_noise=0.035) == []


@pytest.mark.parametrize("n", [2, 4])
def test_the_limit_is_the_prediction_interval_of_one_more_start_pooled_with_the_start_noise(n: int):
    """The search's start is flagged when it lies outside the ``confidence`` prediction interval of one more draw
    of the fresh starts: t at 3 + n - 1 degrees of freedom, the fresh starts' spread pooled with the space's start
    noise worth 3 of them, times sqrt(1 + 1/n). (Its false-alarm rate when the search's start is one more such draw:
    scripts/bench_statistics.py, ``baseline_check_false_alarms``.)"""
    fresh = [1000.0 * math.exp(d) for d in (0.02, -0.01, 0.03, 0.0)[:n]]
    logs = [math.log(f / 1000.0) for f in fresh]
    mean = sum(logs) / n
    sd = math.sqrt((3 * 0.035**2 + sum((x - mean) ** 2 for x in logs)) / (3 + n - 1))
    limit = st.t.ppf(0.975, 3 + n - 1) * sd * math.sqrt(1 + 1 / n)
    [c] = baseline_check.check(_rounds(fresh), {True: 1000.0}, confidence=0.95, start_noise=0.035)
    assert c.limit == pytest.approx(math.exp(limit)) and c.ratio == pytest.approx(math.exp(mean))
    for off, flagged in ((0.99, False), (1.01, True)):
        search = 1000.0 * math.exp(mean) / math.exp(limit * off)  # the fresh starts that much above the search's
        [c] = baseline_check.check(_rounds(fresh), {True: search}, confidence=0.95, start_noise=0.035)
        assert c.flagged is flagged


def test_suspects_are_baseline_rule_prunes_whose_corrected_bound_reaches_one():
    checks = [
        BaselineCheck("True", 125.0, 100.0, (100.0, 100.0), 0.8, 1.1, True),
        BaselineCheck("False", 125.0, 100.0, (100.0, 100.0), 0.8, 1.1, False),
    ]
    pruned = [
        SuspectPrune(3, "True", 0.85),  # 0.85 / 0.8 = 1.06: may have won
        SuspectPrune(4, "True", 0.7),  # 0.875: lost whatever the baseline
        SuspectPrune(5, "False", 0.95),  # its setting's baseline was not off
    ]
    [s] = baseline_check.suspects(checks, pruned)
    assert s.trial == 3 and s.corrected_upper == pytest.approx(1.0625)


def _run(first_baseline: float, speed: float, seed: int = 0):
    space = make_space(n_trials=10, drafters=("good",), confirm_top=2, repeats=4)
    runner = ScriptedRunner(speed={"good": lambda c: speed}, noise=0.01, seed=seed, first_baseline=first_baseline)
    study = open_study(space, optuna.storages.InMemoryStorage(), f"bc-{first_baseline}-{speed}-{seed}", seed=seed)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(10)
    return orch.confirm(), study, runner


def test_a_fast_first_baseline_no_longer_buries_a_winner():
    """Every config truly 1.08x; the search's baseline start ran 1.25x fast, so all of them look 0.86x and the
    search leaves nothing to confirm. Two fresh baseline starts find it fast, the configs are judged against them,
    and the verdict is the truth instead of "the baseline wins"."""
    state, study, runner = _run(first_baseline=1.25, speed=1.08)
    assert len(state.check_rounds or []) == 2
    [c] = state.baseline_check or []
    assert c.flagged and c.ratio < 0.85
    assert state.verdict == "speculation-wins" and state.basis == "confirmed"
    assert "chosen against those" in (state.rests_on or "")
    rep = build_report(study)
    assert rep.to_json()["gpu_time"]["confirmation_starts"] == sum(
        len(r.baseline) + len(r.candidates) for r in (state.check_rounds or []) + state.rounds
    )


def test_a_true_loser_still_loses_after_the_check():
    state, study, runner = _run(first_baseline=1.0, speed=0.8)
    assert len(state.check_rounds or []) == 2 and not (state.baseline_check or [])[0].flagged
    assert state.verdict == "baseline-wins" and state.rounds == []
    assert sum(1 for c in runner.launches if c.is_baseline) == 3  # the search's one and the check's two


def test_a_slow_first_baseline_is_said_and_the_verdict_rests_on_the_paired_rounds():
    state, study, _ = _run(first_baseline=0.85, speed=1.08)
    [c] = state.baseline_check or []
    assert c.flagged and c.ratio > 1.1 and not state.recorded("check_rounds")
    assert state.verdict == "speculation-wins"
    best = next(r for r in state.results or [] if r.trial == state.best)
    assert best.speedup_ci is not None
    assert best.speedup_ci.point == pytest.approx(1.08, abs=0.03)  # not the search's inflated ~1.27x
    rep = build_report(study)
    assert rep.to_json()["baseline_check"] == state.to_dict()["baseline_check"]
    out = io.StringIO()
    render_report(rep, out)
    assert "baseline check (graphs on): the search's baseline ran" in out.getvalue()
    assert "start was slow" in out.getvalue()


def test_a_fast_first_baseline_over_true_losers_still_ends_in_baseline_wins():
    state, _, _ = _run(first_baseline=1.25, speed=0.7)
    [c] = state.baseline_check or []
    assert c.flagged and c.ratio < 0.85
    assert state.rounds == [] and state.verdict == "baseline-wins"
    assert (state.rests_on or "").endswith("and no config beat those either")

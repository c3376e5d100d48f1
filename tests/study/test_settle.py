"""A settled answer stops the search (``autotune.study.settle``, ``search.settled_now``) and confirmation confirms
only the candidates that can change the answer (``confirm.thin``): the pure probabilities on a known landscape,
and end to end on the orchestration with a scripted runner."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from autotune import records
from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.html import write_html_report
from autotune.report import build_report
from autotune.space import BudgetSpec
from autotune.study import Orchestrator, confirm, open_study, search, settle
from autotune.study.context import Event
from autotune.surrogate import Encoding, Surrogate

from .conftest import ScriptedRunner, make_space


def cfg(steps: int, n: int) -> TrialConfig:
    return TrialConfig.make("d", True, num_steps=steps, topk=1, num_draft_tokens=n)


GRID = [cfg(s, n) for s in range(1, 9) for n in range(2, 33, 2) if n >= s + 1]


def truth(c: TrialConfig) -> float:
    """log tok/s: one broad peak at steps 5, N 16."""
    s, n = c.knob("num_steps"), c.knob("num_draft_tokens")
    return math.log(200.0) - 0.02 * (s - 5) ** 2 - 0.1 * (math.log2(n) - 4) ** 2


def _model(measured: list[TrialConfig], seed: int = 0) -> Surrogate:
    rng = np.random.default_rng(seed)
    obs = [(c, truth(c) + rng.normal(0, 0.02)) for c in measured]
    return Surrogate(Encoding.from_configs(GRID), obs, noise_floor=0.02)


def _settle(measured: list[TrialConfig], baseline: float | None, min_gain: float = 0.02, **kw) -> settle.Settled:
    unmeasured = [c for c in GRID if c.key() not in {m.key() for m in measured}]
    return settle.settle(
        _model(measured),
        measured,
        unmeasured,
        baseline_log=None if baseline is None else math.log(baseline),
        baseline_sd=0.025,
        resolution=0.02,
        min_gain=min_gain,
        threshold=0.05,
        samples=512,
        seed=1,
        **kw,
    )


def test_a_measured_peak_settles_the_search_and_an_unexplored_region_does_not():
    around_peak = [c for c in GRID if 3 <= c.knob("num_steps") <= 7 and 8 <= c.knob("num_draft_tokens") <= 32]
    spread = around_peak + [cfg(1, 2), cfg(1, 32), cfg(8, 10), cfg(8, 32), cfg(2, 4)]
    done = _settle(spread, baseline=100.0)
    assert done.p_improve < 0.05 and done.p_gain > 0.95
    assert done.reason is not None and "beat the best measured one by more than 2%" in done.reason
    held = settle.settle(
        _model(spread),
        spread,
        [c for c in GRID if c.key() not in {m.key() for m in spread}],
        baseline_log=math.log(100.0),
        baseline_sd=0.025,
        resolution=0.02,
        min_gain=0.02,
        threshold=0.05,
        samples=512,
        seed=1,
        improve_settles=False,  # the surrogate's own picks not measured yet: computed, not settling
    )
    assert held.p_improve == done.p_improve and held.reason is None
    corner = [c for c in GRID if c.knob("num_steps") <= 2 and c.knob("num_draft_tokens") <= 8]  # far from the peak
    open_ = _settle(corner, baseline=100.0)
    assert open_.p_improve > 0.3 and open_.reason is None
    assert open_.measured == len(corner) and open_.unmeasured == len(GRID) - len(corner)


def test_nothing_likely_to_clear_the_bar_settles_it_too():
    measured = GRID[::3]
    # every config is ~200 tok/s at best; a baseline of 260 is far above: no config reaches 1.02x of it
    lost = _settle(measured, baseline=260.0)
    assert lost.p_gain < 0.01 and lost.reason is not None and "minimum gain (2%)" in lost.reason
    # a baseline of 195 with the peak at 200: a 2.6% gain is likely; the minimum gain is not settled against
    close = _settle(measured, baseline=195.0)
    assert close.p_gain > 0.5
    assert _settle(measured, baseline=None).p_gain == 1.0  # nothing to compare with


def test_the_answer_is_reproducible_and_needs_a_measurement():
    a = _settle(GRID[::4], baseline=180.0)
    assert a == _settle(GRID[::4], baseline=180.0)
    with pytest.raises(ValueError, match="at least one measured"):
        settle.settle(
            _model(GRID[:3]),
            [],
            GRID,
            baseline_log=None,
            baseline_sd=0.02,
            resolution=0.02,
            min_gain=0.02,
            threshold=0.05,
            samples=64,
            seed=0,
        )


def test_joint_draws_move_neighbours_together():
    model = _model(GRID[::5])
    near = [cfg(5, 16), cfg(5, 18)]
    draws = model.sample(near + [cfg(1, 2)], 2000, np.random.default_rng(0))
    corr = np.corrcoef(draws.T)
    assert corr[0, 1] > 0.9 > corr[0, 2]
    mean, sd = model.predict(near)
    assert np.allclose(draws[:, :2].mean(axis=0), mean, atol=4 * sd.max() / math.sqrt(2000) + 1e-3)


# -- end to end -------------------------------------------------------------------------------------------------


def peak(c) -> float:
    """Smooth in every knob, best at steps 5, topk 4, N 14 (inside make_space's grid)."""
    s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
    return 2.0 * math.exp(-0.03 * (s - 5) ** 2 - 0.15 * (math.log2(k) - 2) ** 2 - 0.004 * (n - 14) ** 2)


def _space(n_trials: int, stop_when_settled: bool = True):
    space = make_space(n_trials=n_trials, drafters=("good",))
    return dataclasses.replace(space, budget=BudgetSpec(n_trials=n_trials, stop_when_settled=stop_when_settled))


def _counted(study: optuna.Study) -> int:
    return records.counted_trials(study)


def _search(speed, n_trials: int, events: list | None = None, stop_when_settled: bool = True) -> optuna.Study:
    space = _space(n_trials, stop_when_settled)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=1)
    orch = Orchestrator(
        space,
        SGLangBackend(),
        ScriptedRunner(speed={"good": speed}),
        study,
        listener=(events.append if events is not None else None),
    )
    orch.search(n_trials)
    return study


#: the budget of the settled search several tests read (``settled``): the peak is found and the search stops before
#: its end
SETTLED_BUDGET = 20


@pytest.fixture(scope="module")
def settled() -> tuple[optuna.Study, list[Event]]:
    """One search of the smooth ``peak`` landscape with the stop rule on, and its events (read, not changed, by the
    tests that use it)."""
    events: list[Event] = []
    return _search(peak, SETTLED_BUDGET, events=events), events


def test_a_settled_search_stops_before_its_budget_and_says_why(tmp_path, settled):
    study, events = settled
    state = records.search_settled(study)
    assert state is not None and state.n_trials == SETTLED_BUDGET
    assert _counted(study) == state.trials < SETTLED_BUDGET
    notes = [e.data["message"] for e in events if e.kind == "note" and "search stopped" in e.data.get("message", "")]
    assert len(notes) == 1 and f"after {state.trials} of up to {SETTLED_BUDGET} trials" in notes[0]
    # the report says it, on the terminal and in the HTML page
    report = build_report(study)
    assert report.to_json()["search_settled"]["text"] == notes[0]
    write_html_report(study, report, tmp_path / "r.html")
    assert "id='search-settled'" in (tmp_path / "r.html").read_text()
    # the same budget again (a resumed run): nothing more is measured
    before = len(study.trials)
    space = _space(SETTLED_BUDGET)
    Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study).search(SETTLED_BUDGET)
    assert len(study.trials) == before


def test_the_best_is_found_only_after_the_surrogate_measured_its_own_picks(monkeypatch, settled):
    """The settled search had measured the surrogate's own picks; with more picks required than the budget holds,
    only "nothing clears the bar" may stop the same search, and it does not."""
    study, _ = settled
    picks = [t for t in study.trials if t.user_attrs.get("seeded") == "surrogate"]
    assert len(picks) >= search.IMPROVE_AFTER_PICKS
    monkeypatch.setattr(search, "IMPROVE_AFTER_PICKS", 1000)
    study = _search(peak, SETTLED_BUDGET)
    assert records.search_settled(study) is None and _counted(study) == SETTLED_BUDGET


def test_without_the_stop_rule_the_budget_is_a_quota(settled):
    """The same search with ``budget.stop_when_settled: false`` runs every trial of the budget."""
    assert _counted(settled[0]) < SETTLED_BUDGET
    study = _search(peak, SETTLED_BUDGET, stop_when_settled=False)
    assert records.search_settled(study) is None
    assert _counted(study) == SETTLED_BUDGET


def test_a_landscape_where_every_config_loses_stops_on_the_minimum_gain():
    study = _search(lambda c: 0.6 + 0.01 * c.knob("num_steps"), 40)
    state = records.search_settled(study)
    assert state is not None and state.p_gain < 0.05 and "minimum gain" in state.reason
    assert state.trials < 20


def test_confirmation_leaves_out_near_ties_the_surrogate_says_cannot_change_the_answer(monkeypatch):
    def run() -> list[int]:
        space = _space(20, stop_when_settled=False)
        space = dataclasses.replace(space, verdict=dataclasses.replace(space.verdict, confirm_top=3))
        study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=1)
        orch = Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}, seed=3), study)
        orch.search(20)
        return [t.number for t in orch.candidates()]

    with monkeypatch.context() as m:
        m.setattr(confirm, "JOIN_PROBABILITY", 0.0)  # every candidate joins
        every = run()
    thinned = run()
    assert len(every) >= 3
    assert 1 <= len(thinned) < len(every)
    assert thinned[0] in every


def test_search_only_trials_are_counted_as_before():
    study = _search(peak, 12, stop_when_settled=False)
    assert _counted(study) == 12
    assert all(t.state != TrialState.RUNNING for t in study.trials)


def test_a_gain_under_the_bar_is_no_worthwhile_gain_and_the_baseline_is_recommended(tmp_path):
    """Every config 1% faster than the baseline, a 10% bar: confirmation's interval lies under 1.10 (and not under
    1): the verdict says so, and the baseline is what to deploy, on the terminal, in JSON and in the HTML page."""
    import io

    from autotune.render import render_report

    space = dataclasses.replace(
        _space(12), verdict=dataclasses.replace(_space(12).verdict, min_gain=0.10, confirm_top=2)
    )
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=2)
    runner = ScriptedRunner(speed={"good": lambda c: 1.01}, seed=2)
    from autotune.study import run

    state = run(space, SGLangBackend(), runner, study)
    assert state.verdict == "no-worthwhile-gain"
    ci = next(r for r in state.results or [] if r.trial == state.best).deploy_speedup_ci
    assert ci is not None and ci.low <= 1.0 < ci.high < 1.10  # not a loss, not worth the bar
    report = build_report(study)
    assert (
        report.to_json()["verdict"] == "no-worthwhile-gain"
        and "deploy the baseline" in report.to_json()["verdict_text"]
    )
    assert report.to_json()["recommended"]["config"]["drafter"] is None  # the baseline
    out = io.StringIO()
    render_report(report, out)
    assert "verdict: no-worthwhile-gain" in out.getvalue()
    write_html_report(study, report, tmp_path / "r.html")
    assert "<b>no-worthwhile-gain</b>" in (tmp_path / "r.html").read_text()


def test_one_surrogate_fit_per_observation_set(monkeypatch):
    """The settle check and the next pick ask for the same surrogate between two trials: fitted once, and fitted
    again as soon as a measurement is added."""
    space = _space(30)
    study = open_study(space, optuna.storages.InMemoryStorage(), "fits", seed=1)
    orch = Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study)
    fits = []
    real = search.fit

    def counting(*a, **k):
        fits.append(1)
        return real(*a, **k)

    monkeypatch.setattr(search, "fit", counting)
    orch.search(12)
    ctx = orch.ctx
    first = search.surrogate(ctx)
    assert first is not None and search.surrogate(ctx) is first
    n = len(fits)
    assert search.surrogate(ctx) is first and len(fits) == n  # asked again: no new fit
    orch.search(13)  # one more trial: its settle check and its pick reuse the fit above
    assert records.counted_trials(study) == 13
    assert search.surrogate(ctx) is not first  # fitted again on the new measurement
    assert len(fits) == n + 1


def test_the_launch_gates_fit_adds_its_running_config_to_the_settle_checks_fit(monkeypatch):
    """The gate asks from inside its own running trial, whose config the surrogate counts as measured at its own
    mean: that fit starts from the settle check's fit of the same measurements (half the fitting) and is the same
    model as one fitted from scratch."""
    space = _space(30)
    study = open_study(space, optuna.storages.InMemoryStorage(), "gate-fit", seed=1)
    orch = Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study)
    orch.search(12)
    ctx = orch.ctx
    assert search.surrogate(ctx) is not None  # the settle check's fit
    measured = {c.key() for c, _, _ in search.measured_starts(ctx)}
    probe = next(c for c in ctx.grid if c.key() not in measured)
    study.ask().set_user_attr(records.EFFECTIVE, probe.to_dict())  # its trial, running
    fits = []
    real = Surrogate._fit
    monkeypatch.setattr(Surrogate, "_fit", lambda self: fits.append(1) or real(self))
    gate = search.surrogate(ctx)
    reused = len(fits)
    ctx.surrogate_fit.clear()
    fresh = search.surrogate(ctx)
    assert reused > 0 and len(fits) - reused == 2 * reused
    assert gate is not None and fresh is not None
    for a, b in zip(gate.predict(ctx.grid), fresh.predict(ctx.grid), strict=True):
        assert np.array_equal(a, b)


def test_with_load_levels_only_nothing_clearing_the_bar_stops_the_search(monkeypatch, settled):
    """The surrogate models the weighted objective, not each level's winner: with load levels "the best is found"
    is not asked to stop the search (scripts/bench_load.py: it missed a level's winner in more seeds)."""
    from autotune.study.context import StudyContext

    study, _ = settled  # one stream: the peak is found and settles the search
    assert "no unmeasured config" in records.search_settled(study).reason
    space = _space(SETTLED_BUDGET)
    asked = []
    real = search.settle.settle

    def spy(*a, **k):
        asked.append(k["improve_settles"])
        return real(*a, **k)

    monkeypatch.setattr(search.settle, "settle", spy)
    for levels, expected in (((1,), True), ((1, 8), False)):
        bench = dataclasses.replace(space.benchmark, concurrency=levels)
        ctx = StudyContext(dataclasses.replace(space, benchmark=bench), SGLangBackend(), ScriptedRunner({}), study)
        state = search.settled(ctx)
        assert asked[-1] is expected
        assert (state.reason is not None) is expected  # the same measurements: settled only without levels


def test_the_next_trials_expected_gain_is_recorded_with_the_settle_check():
    """``expected_gain``: what measuring the most promising unmeasured config next can gain, in expectation (over
    the best measured, and over it or the bar: ``expected_gain_bar``); computed and recorded, no stop rule."""
    spread = GRID[::8]  # the peak's region sampled, not every neighbour of the best measured
    corner = [c for c in GRID if c.knob("num_steps") <= 2 and c.knob("num_draft_tokens") <= 8]

    run = _settle

    found, open_ = run(spread, 100.0), run(corner, 100.0)
    assert found.expected_gain < 0.01 < 0.1 < open_.expected_gain  # the peak's region measured vs far from it
    assert found.p_improve > 0.05 and found.reason is None  # "any config beats the best by 2%" is still open
    # the bar: a gain that cannot lift any config over 1.02x a baseline of 260 cannot change the verdict
    for s in (found, open_, run(corner, 260.0), run(spread, 195.0)):
        assert 0.0 <= s.expected_gain_bar <= s.expected_gain
    assert run(corner, 260.0).expected_gain_bar < 0.1 * open_.expected_gain_bar
    # a baseline of 195: the bar (198.9, drawn with a start's noise) is often above the best (~200)
    assert run(spread, 195.0).expected_gain_bar < found.expected_gain_bar


def test_a_config_judged_lossy_is_never_the_best_the_stop_and_the_gate_measure_against(monkeypatch):
    """A lossy config cannot be recommended, so it is not "the best measured" of the settle check or of the launch
    gate: here a drafter twice as fast as the good one changes the answers (``diverge``). Its measurements stay
    in the surrogate (its speed is real), but every settle question is asked against lossless configs only, and
    the gate's bar is a lossless config or the baseline, never the lossy one."""
    asked: list[list[TrialConfig]] = []
    real = search.settle.settle

    def spy(model, measured, *a, **k):
        asked.append(list(measured))
        return real(model, measured, *a, **k)

    monkeypatch.setattr(search.settle, "settle", spy)
    space = make_space(n_trials=16, drafters=("good", "fast"))
    space = dataclasses.replace(space, budget=BudgetSpec(n_trials=16))
    study = open_study(space, optuna.storages.InMemoryStorage(), "lossy", seed=1)
    runner = ScriptedRunner(speed={"good": peak, "fast": lambda c: 2.0 * peak(c)}, diverge={"fast"})
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(16)
    lossy = [t for t in study.trials if records.TrialRecord(t).lossy]
    assert lossy and all(records.TrialRecord(t).effective_config().drafter == "fast" for t in lossy)
    observed = {c.drafter for c, _ in search.observations(orch.ctx)}
    assert observed == {"good", "fast"}  # the surrogate still learns from the lossy drafter's speed
    assert asked and all(c.drafter == "good" for measured in asked for c in measured)
    assert {c.drafter for c in search.recommendable(orch.ctx)} == {"good"}
    # the gate: a proposal of the lossy drafter is judged against the best lossless config, not against itself
    fast = TrialConfig.make("fast", True, num_steps=5, topk=4, num_draft_tokens=14)
    verdict = search.not_worth_a_start(orch.ctx, fast, None)
    assert verdict is None  # predicted far above every lossless config: worth a start as far as speed goes
    slow = TrialConfig.make("good", True, num_steps=1, topk=1, num_draft_tokens=2)
    judged = search.not_worth_a_start(orch.ctx, slow, None)
    assert judged is not None and judged.against not in {t.number for t in lossy}
    fastest_lossy = max(t.value for t in lossy if t.value)
    assert judged.tok_per_s < 0.75 * fastest_lossy  # the bar is the good drafter's best, half the lossy one's


def test_the_search_factors_its_surrogate_where_every_start_reports_acceptance():
    """The sim's and the scripted server's starts report an acceptance length: the search's surrogate is the
    factored one, its acceptance the measured 2.5 tokens a round (a start without acceptance gives one GP of log
    tok/s)."""
    from autotune.surrogate import FactoredSurrogate

    space = _space(30)
    study = open_study(space, optuna.storages.InMemoryStorage(), "factored", seed=1)
    orch = Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study)
    orch.search(12)
    model = search.surrogate(orch.ctx)
    assert isinstance(model, FactoredSurrogate)
    # the completed trials' (a pruned one's acceptance is inferred from its paired speedup and its prompts' round
    # cost, which the scripted server, unlike a real one, varies from prompt to prompt)
    done = [
        records.TrialRecord(t).effective_config()
        for t in records.trials(study, (TrialState.COMPLETE,))
        if records.is_measured_speculative(t)
    ]
    assert len(done) >= 3
    la, _lc = model.predict_factors(done)
    assert np.allclose(la, math.log(2.5), atol=0.02)


def test_under_the_bar_the_best_is_found_once_no_unmeasured_config_is_likely_to_clear_it():
    """``Settled.p_change``: where the best measured config is under the bar (the fastest baseline times
    1 + min_gain), an unmeasured one 2% faster than it changes nothing the user decides (both deploy the
    baseline); what could change the answer is one that clears the bar. Here the peak (~200 tok/s) is under the
    bar of a 203 tok/s baseline (207): an unmeasured config beats the best by 2% with P ~0.19, clears the bar with
    P ~0.03, and the search stops. Above the bar the two questions are one."""
    measured = GRID[::10]
    under = _settle(measured, 203.0)
    assert under.p_improve > 0.1 and under.p_change < 0.05 and under.p_gain > 0.05
    assert under.reason is not None and "change the answer" in under.reason
    assert _settle(measured, 203.0, improve_settles=False).reason is None  # the surrogate's picks come first
    above = _settle(measured, 100.0)  # the best is twice the baseline: the bar is far below it
    assert above.p_change == pytest.approx(above.p_improve, abs=0.02) and above.reason is None

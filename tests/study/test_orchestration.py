from __future__ import annotations

import io

import optuna
import pytest
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.errors import UserError
from autotune.html import write_html_report
from autotune.render import render_report
from autotune.report import build_report
from autotune.stats import rounds_to_settle
from autotune.study import Orchestrator, open_study, run

from .conftest import ScriptedRunner, make_space


def _study(space, tmp_path, seed=0, sqlite=False):
    storage = f"sqlite:///{tmp_path}/s.db" if sqlite else optuna.storages.InMemoryStorage()
    return open_study(space, storage, "t", seed=seed)


def test_baseline_first_then_search_and_verdict_speculation_wins(tmp_path):
    space = make_space(n_trials=15)
    runner = ScriptedRunner(speed={"good": lambda c: 1.0 + 0.1 * c.knob("num_steps"), "bad": lambda c: 0.5})
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    trials = study.get_trials()
    assert trials[0].params == {"cuda_graph": True}
    assert trials[0].user_attrs["role"] == "baseline"
    assert trials[0].state == TrialState.COMPLETE
    assert runner.launches[0].is_baseline
    counted = [
        t
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and "duplicate_of" not in t.user_attrs
    ]
    assert len(counted) == 15
    assert len(runner.launches) >= 14  # every counted trial but infeasible ones started a server
    # the bad drafter (speedup 0.5) is pruned before its last prompt whenever it was measured
    bad = [
        t
        for t in trials
        if t.params.get("drafter") == "bad" and "duplicate_of" not in t.user_attrs and t.user_attrs.get("measured")
    ]
    assert bad and all(t.state == TrialState.PRUNED and len(t.intermediate_values) < 5 for t in bad)
    assert state["verdict"] == "speculation-wins"
    rep = build_report(study)
    assert rep.to_json()["best"]["config"]["drafter"] == "good"
    assert rep.to_json()["best"]["speedup_ci"]["low"] > 1.02
    assert rep.to_json()["recommended"]["config"]["drafter"] == "good"


def test_nothing_beats_baseline_gives_baseline_wins_and_recommends_baseline(tmp_path):
    space = make_space(n_trials=10)
    runner = ScriptedRunner(speed={"good": lambda c: 0.6, "bad": lambda c: 0.5})
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    assert state["verdict"] == "baseline-wins"
    rep = build_report(study)
    assert rep.to_json()["recommended"]["config"] == {"drafter": None, "cuda_graph": True}
    assert rep.to_json()["pruned_before_last_prompt"] >= 1


def test_rerun_resumes_and_runs_nothing_new(tmp_path):
    space = make_space(n_trials=8)
    runner = ScriptedRunner(speed={"good": lambda c: 1.3, "bad": lambda c: 0.5})
    study = _study(space, tmp_path, sqlite=True)
    run(space, SGLangBackend(), runner, study)
    n_launches = len(runner.launches)
    study2 = _study(space, tmp_path, sqlite=True)
    run(space, SGLangBackend(), runner, study2)
    assert len(runner.launches) == n_launches
    assert len(study2.get_trials()) == len(study.get_trials())


def test_duplicate_configs_are_measured_once(tmp_path):
    space = make_space(n_trials=25, drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.2})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(25)
    keys = [c.key() for c in runner.launches]
    assert len(keys) == len(set(keys)), "a server config was launched twice"


def test_zero_acceptance_alarm_fails_trial_after_first_prompt_and_blocks_drafter(tmp_path):
    space = make_space(n_trials=8)
    runner = ScriptedRunner(speed={"good": lambda c: 0.9, "bad": lambda c: 0.9}, accept={"bad": 1.0})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(8)
    bad = [t for t in study.get_trials() if t.params.get("drafter") == "bad"]
    assert bad
    first = min(bad, key=lambda t: t.number)
    assert first.state == TrialState.FAIL
    assert first.user_attrs["fail_kind"] == "drafter-not-engaged"
    assert len(first.intermediate_values) == 1
    assert "EAGLE3" in first.user_attrs["fail_reason"]
    launched_bad = [c for c in runner.launches if c.drafter == "bad"]
    assert len(launched_bad) == 1, "a disengaged drafter was launched again"


def test_oom_is_infeasible_and_predicts_larger_trees(tmp_path):
    space = make_space(n_trials=20, drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.1}, oom_above=6)
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(20)
    ooms = [t for t in study.get_trials() if t.user_attrs.get("fail_kind") == "oom"]
    assert ooms
    assert all(t.state == TrialState.PRUNED and t.constraints == {"feasible": 1.0} for t in ooms)
    # after an OOM at size s, nothing of size >= s is launched again
    smallest_oom = float("inf")
    for c in runner.launches:
        size = c.knob("num_draft_tokens") or 0
        assert size < smallest_oom
        if size > 6:
            smallest_oom = min(smallest_oom, size)
    assert smallest_oom < float("inf")


def test_lossless_divergence_is_flagged_and_never_recommended(tmp_path):
    space = make_space(n_trials=10, drafters=("fast",))
    runner = ScriptedRunner(speed={"fast": lambda c: 1.5}, diverge={"fast"})
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    rep = build_report(study)
    assert any("diverges" in f for f in rep.to_json()["flags"])
    assert rep.to_json()["recommended"]["config"]["drafter"] is None
    # the only drafter's configs were excluded as lossy: nothing was weighed, so the baseline has not "won"
    assert state["verdict"] == "inconclusive"
    assert state["exclusions"] and {e["kind"] for e in state["exclusions"]} == {"lossy"}
    assert "lossy" in state["rests_on"].split("excluded: ")[1] and "lossy" in rep.to_json()["verdict_text"]


def test_baseline_launch_failure_is_a_clear_user_error(tmp_path):
    space = make_space(n_trials=5)

    class Broken(ScriptedRunner):
        def launch(self, config):
            from autotune.errors import ServerExited

            raise ServerExited("exited with code 1", returncode=1, log_tail="ModuleNotFoundError: sglang")

    study = _study(space, tmp_path)
    with pytest.raises(UserError, match="baseline server"):
        run(space, SGLangBackend(), Broken(speed={}), study)


def test_changed_prompt_set_refuses_to_resume(tmp_path):
    space = make_space(n_trials=3)
    _study(space, tmp_path, sqlite=True)
    other = make_space(n_trials=3, prompts=4)
    with pytest.raises(UserError, match="different prompt set"):
        _study(other, tmp_path, sqlite=True)


def test_two_cuda_graph_settings_each_get_their_own_baseline(tmp_path):
    space = make_space(n_trials=12, cuda_graph=(False, True))
    runner = ScriptedRunner(speed={"good": lambda c: 1.2, "bad": lambda c: 0.5})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(12)
    for t in study.get_trials():
        if t.user_attrs.get("baseline_trial") is not None:
            b = study.trials[t.user_attrs["baseline_trial"]]
            assert b.params["cuda_graph"] == t.params["cuda_graph"]
    assert {t.params["cuda_graph"] for t in study.get_trials() if t.user_attrs["role"] == "baseline"} == {False, True}


def test_a_config_that_failed_twice_is_not_launched_again_and_the_study_goes_on(tmp_path):
    space = make_space(n_trials=24)
    runner = ScriptedRunner(speed={"good": lambda c: 1.2, "bad": lambda c: 1.0}, crash={"bad"})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(24)
    launched = {}
    for c in runner.launches:
        launched[c.key()] = launched.get(c.key(), 0) + 1
    assert max(launched.values()) <= 2
    skipped = [t for t in study.get_trials() if t.user_attrs.get("not_launched")]
    assert all(t.state == TrialState.FAIL and "not launched again" in t.user_attrs["fail_reason"] for t in skipped)
    assert any(t.state == TrialState.COMPLETE and t.params.get("drafter") == "good" for t in study.get_trials())


def test_three_crashes_before_any_speculative_success_stop_the_study(tmp_path):
    space = make_space(n_trials=10)
    runner = ScriptedRunner(speed={}, crash={"good", "bad"})
    study = _study(space, tmp_path)
    with pytest.raises(UserError, match="3 servers in a row failed to start"):
        Orchestrator(space, SGLangBackend(), runner, study).search(10)


def test_an_inconclusive_verdict_says_what_settling_it_would_take(tmp_path):
    # every config ties the baseline (the field report's case): the pick's interval straddles the 2% bar
    space = make_space(n_trials=10, drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.0}, noise=0.03, seed=2)
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    assert state["verdict"] == "inconclusive"
    rep = build_report(study)
    assert rep.to_json()["to_settle"]["rounds"] is not None, "this seed's pick is far enough from the bar to be settled"
    settle = rep.to_json()["to_settle"]
    ci = settle["speedup_ci"]
    assert settle["trial"] == rep.to_json()["best"]["trial"] and ci["low"] <= 1.02 <= ci["high"]
    # the rounds named are where an interval at the measured spread leaves the bar (tests/test_stats.py), and
    # each round is two server starts, priced at this study's mean confirmation start
    assert settle["rounds"] == rounds_to_settle(settle["sd"], ci["point"], 1.02, 0.95)
    assert settle["starts"] == 2 * settle["rounds"]
    per_start = rep.to_json()["gpu_time"]["confirmation_s"] / rep.to_json()["gpu_time"]["confirmation_starts"]
    assert settle["gpu_s"] == pytest.approx(settle["starts"] * per_start)
    assert f"autotune reverify F --repeats {settle['rounds']}" in settle["text"]
    assert f"trial {settle['trial']}" in settle["text"]
    # said where the verdict is: the terminal report and the HTML one
    out = io.StringIO()
    render_report(rep, out)
    assert settle["text"][:60] in " ".join(out.getvalue().split())
    page = tmp_path / "r.html"
    write_html_report(study, rep, page)
    assert "id='to-settle'" in page.read_text() and f"--repeats {settle['rounds']}" in page.read_text()


def test_a_settled_verdict_has_nothing_to_settle(tmp_path):
    space = make_space(n_trials=10, drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.0 + 0.1 * c.knob("num_steps")})
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    assert state["verdict"] == "speculation-wins"
    assert build_report(study).to_json()["to_settle"] is None


def test_an_inconclusive_verdict_on_the_bar_says_rounds_would_not_settle_it(tmp_path):
    # this seed's pick lands 0.7% under the 2% bar: no number of rounds at this noise settles which side it is on
    space = make_space(n_trials=10, drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.0}, noise=0.03, seed=0)
    study = _study(space, tmp_path)
    assert run(space, SGLangBackend(), runner, study)["verdict"] == "inconclusive"
    settle = build_report(study).to_json()["to_settle"]
    ci = settle["speedup_ci"]
    assert settle["rounds"] is None and settle["starts"] is None and settle["gpu_s"] is None
    assert rounds_to_settle(settle["sd"], ci["point"], 1.02, 0.95, most=settle["most"]) is None
    assert f"more than {settle['most']} rounds would not settle" in settle["text"]
    assert f"at most {ci['high'] - 1:.1%}" in settle["text"]

"""Issue #11 on the scripted seam: the headline against the fastest baseline, early coverage of every drafter x
CUDA-graph combination, and verdicts that name what they rest on."""

from __future__ import annotations

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.report import build_report
from autotune.study import Orchestrator, open_study, run

from .conftest import ScriptedRunner, make_space


def _study(space, tmp_path):
    return open_study(space, f"sqlite:///{tmp_path}/s.db", "t", seed=0)


def test_a_graphs_off_winner_is_judged_against_the_faster_graphs_on_baseline(tmp_path):
    """Graphs off, the drafter is 1.3x its own baseline; but the graphs-on baseline is 1.5x faster than that. The
    deployment question (speculation or not, whatever the graphs) is lost: no speculation-wins."""
    space = make_space(n_trials=12, cuda_graph=(False, True), drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 0.9 * 1.5 if c.cuda_graph else 1.3}, graph_gain=1.5)
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    assert state["deploy_cuda_graph"] is True
    assert state["verdict"] != "speculation-wins"
    for rnd in state["rounds"]:
        assert "True" in rnd["baseline"]  # the deployable baseline measured in every round
    for r in state["results"]:
        if r["config"]["cuda_graph"] is False and r["speedup_ci"]:
            assert r["speedup_ci"]["low"] > 1.2  # against its own baseline it clearly wins...
            assert r["deploy_speedup_ci"]["high"] < 1.0  # ...against the one a user would deploy it loses
    rep = build_report(study).to_json()
    assert rep["recommended"]["config"] == {"drafter": None, "cuda_graph": True}


def test_a_graphs_off_winner_that_beats_the_fastest_baseline_wins_with_the_deployable_interval(tmp_path):
    space = make_space(n_trials=12, cuda_graph=(False, True), drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 0.8 if c.cuda_graph else 1.4}, graph_gain=1.1)
    study = _study(space, tmp_path)
    state = run(space, SGLangBackend(), runner, study)
    assert state["verdict"] == "speculation-wins"
    best = next(r for r in state["results"] if r["trial"] == state["best"])
    assert best["config"]["cuda_graph"] is False
    assert best["speedup_ci"]["point"] == pytest.approx(1.4, rel=0.05)  # against its own (graphs-off) baseline
    assert best["deploy_speedup_ci"]["point"] == pytest.approx(1.4 / 1.1, rel=0.05)  # against graphs on: headline
    rep = build_report(study).to_json()
    assert rep["best"]["speedup"] == pytest.approx(best["deploy_speedup_ci"]["point"])
    row = next(r for r in rep["trials"] if r["number"] == state["best"])
    assert row["speedup_vs_fastest"] == pytest.approx(1.4 / 1.1, rel=0.05)


def test_min_gain_applies_to_the_deployable_comparison(tmp_path):
    """1.3x over its own baseline, 1.3/1.25 = 1.04x over the fastest: with min_gain 0.1 that is not a win."""
    space = make_space(n_trials=10, cuda_graph=(False, True), drafters=("good",), min_gain=0.1)
    runner = ScriptedRunner(speed={"good": lambda c: 0.5 if c.cuda_graph else 1.3}, graph_gain=1.25)
    state = run(space, SGLangBackend(), runner, _study(space, tmp_path))
    best = max(state["results"], key=lambda r: r["speedup_ci"]["point"])
    assert best["speedup_ci"]["low"] > 1.1 and best["deploy_speedup_ci"]["low"] < 1.1
    assert state["verdict"] != "speculation-wins"


def test_every_drafter_and_graph_setting_is_measured_first(tmp_path):
    space = make_space(n_trials=8, cuda_graph=(False, True), drafters=("good", "bad"))
    runner = ScriptedRunner(speed={"good": lambda c: 1.2, "bad": lambda c: 0.95})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(8)
    first = sorted(study.get_trials(), key=lambda t: t.number)[:6]
    assert [t.user_attrs.get("role") for t in first[:2]] == ["baseline", "baseline"]
    combos = {(t.params["drafter"], t.params["cuda_graph"]) for t in first[2:]}
    assert combos == {("good", True), ("good", False), ("bad", True), ("bad", False)}
    assert all(t.user_attrs.get("seeded") == "server default" for t in first[2:])


def test_the_sampler_never_proposes_the_baseline(tmp_path):
    space = make_space(n_trials=25, cuda_graph=(False, True), drafters=("good",))
    runner = ScriptedRunner(speed={"good": lambda c: 1.1})
    study = _study(space, tmp_path)
    Orchestrator(space, SGLangBackend(), runner, study).search(25)
    baselines = [t for t in study.get_trials() if t.user_attrs.get("role") == "baseline"]
    assert len(baselines) == 2 and all(t.user_attrs.get("config", {}).get("drafter") is None for t in baselines)
    assert all(t.params.get("drafter") == "good" for t in study.get_trials() if t.user_attrs.get("role") != "baseline")


@pytest.mark.parametrize(
    ("speed", "crash", "diverge"),
    [
        ({"good": lambda c: 1.5, "bad": lambda c: 0.6}, set(), set()),
        ({"good": lambda c: 0.7, "bad": lambda c: 0.6}, set(), set()),
        ({"good": lambda c: 0.7, "bad": lambda c: 1.4}, {"bad"}, set()),
        ({"good": lambda c: 0.7, "bad": lambda c: 1.4}, set(), {"bad"}),
        ({"good": lambda c: 1.01, "bad": lambda c: 0.99}, set(), set()),
    ],
    ids=["wins", "loses", "winner-crashes", "winner-lossy", "tie"],
)
def test_a_verdict_rests_on_what_it_says(tmp_path, speed, crash, diverge):
    """Never "confirmed" without confirmed candidates; never "the baseline wins" while a config was excluded."""
    space = make_space(n_trials=10, drafters=("good", "bad"))
    runner = ScriptedRunner(speed=speed, crash=crash, diverge=diverge)
    study = _study(space, tmp_path)
    try:
        state = run(space, SGLangBackend(), runner, study)
    except Exception as e:  # noqa: BLE001 - 3 crashed servers in a row is a user error, which is fine here
        assert "in a row failed" in str(e)
        return
    rep = build_report(study).to_json()
    confirmed = [r for r in state["results"] if r.get("speedup_ci")]
    assert (state["basis"] == "confirmed") == bool(confirmed)
    assert rep["verdict_basis"] == state["basis"] and rep["verdict_rests_on"] == state["rests_on"]
    if state["verdict"] == "baseline-wins":
        assert not state["exclusions"]
    if state["exclusions"]:
        assert "excluded" in state["rests_on"]
        kinds = {e["kind"] for e in state["exclusions"]}
        assert kinds <= {"lossy", "failed", "not-engaged"}
        assert state["verdict"] in ("speculation-wins", "inconclusive")
    if crash:
        assert any(e["kind"] == "failed" for e in state["exclusions"])
    if diverge:
        assert any(e["kind"] == "lossy" for e in state["exclusions"])
    optuna.delete_study(study_name="t", storage=f"sqlite:///{tmp_path}/s.db")

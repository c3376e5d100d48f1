"""The HTML report's plots carry the study's figures (the drawing itself: tests/cli/test_html_report.py)."""

from __future__ import annotations

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.plots import PLOTS, figures
from autotune.records import TrialRecord
from autotune.report import build_report
from autotune.study import open_study, run

from .conftest import ScriptedRunner, make_space


@pytest.fixture(scope="module")
def study_and_report():
    space = make_space(n_trials=12, drafters=("good", "bad"), confirm_top=2, repeats=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.6, "bad": lambda c: 0.5})
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=2)
    run(space, SGLangBackend(), runner, study)
    return study, build_report(study)


def test_every_plot_has_data(study_and_report):
    study, rep = study_and_report
    figs = {k: f for k, _t, f in figures(study, rep)}
    assert list(figs) == [k for k, _t, _f in PLOTS]
    assert all(f is not None and f.data for f in figs.values())


def test_history_and_timeline_show_every_server_start(study_and_report):
    study, rep = study_and_report
    figs = {k: f for k, _t, f in figures(study, rep)}
    starts = [t for t in study.get_trials() if TrialRecord(t).measured and not TrialRecord(t).is_duplicate]
    up, bench, confirm = figs["timeline"].data  # the search's starts, then confirmation's
    assert len(up.x) == len(bench.x) == len(starts)
    rounds = study.user_attrs["confirmation"]["rounds"]
    assert (
        len(confirm.x)
        == sum(len(r["baseline"]) + len(r["candidates"]) for r in rounds)
        == rep.to_json()["gpu_time"]["confirmation_starts"]
    )
    assert sum(confirm.x) * 60 == pytest.approx(rep.to_json()["gpu_time"]["confirmation_s"])
    assert [round(x * 60, 6) for x in up.x] == [60.0] * len(starts)  # ScriptedRunner's startup_s
    shown = sum(len(tr.x) for tr in figs["history"].data)
    assert shown == len([t for t in starts if not TrialRecord(t).is_baseline])
    baseline = rep.to_json()["baseline"]["cuda_graph_on"]["tok_per_s"]
    assert any(s.y0 == pytest.approx(baseline) for s in figs["history"].layout.shapes)


def test_intervals_and_per_prompt_follow_the_confirmation(study_and_report):
    study, rep = study_and_report
    figs = {k: f for k, _t, f in figures(study, rep)}
    (tr,) = figs["intervals"].data
    cis = [c.get("deploy_speedup_ci") or c["speedup_ci"] for c in rep.to_json()["confirmed"]]
    assert list(tr.x) == [ci["point"] for ci in cis]
    assert list(tr.error_x.array) == pytest.approx([ci["high"] - ci["point"] for ci in cis])
    bars = figs["prompts"].data
    assert len(bars) == 1 + len(rep.to_json()["confirmed"])
    assert list(bars[0].y) == rep.to_json()["fastest_baseline"]["per_prompt_tok_per_s"]
    assert list(bars[0].x) == [f"p{i}" for i in range(5)]


def test_an_empty_study_draws_nothing_and_says_so(tmp_path):
    from autotune.html import write_html_report

    space = make_space()
    study = open_study(space, optuna.storages.InMemoryStorage(), "t")
    rep = build_report(study)
    assert all(f is None for _k, _t, f in figures(study, rep))
    write_html_report(study, rep, tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().count("not available: nothing to draw yet") == len(PLOTS)

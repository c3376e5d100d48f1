"""A load study (the shipped spaces/llama-8b-load.yaml, simulated in-process) whose tables, plots and dashboard
note agree with the recommendation: one speedup (the objective's) everywhere, pruned trials in the objective's unit,
pruning's saving counted for load levels, the intervals' confidence explained, every pruned row with its reason."""

from __future__ import annotations

import json
import math

import pytest

from autotune.plots import figures, interval_axis
from autotune.records import TrialRecord
from autotune.render import publish
from autotune.report import build_report
from autotune.space import load_space
from autotune.stats import Interval
from autotune.study.storage import open_study

from .helpers import REPO, autotune

pytestmark = pytest.mark.slow
SPACE = REPO / "spaces" / "llama-8b-load.yaml"


@pytest.fixture(scope="module")
def load_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    studies = tmp / "studies"
    r = autotune("study", str(SPACE), "--simulate", "--in-process", "--n-trials", "16", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    r = autotune("report", str(SPACE), "--simulate", "--json", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    url = f"sqlite:///{studies / 'llama31-8b-load-sim.db'}"
    study = open_study(load_space(SPACE), url, report["study"], create=False)
    return study, report, tmp


def test_one_speedup_ranks_the_best_configs_with_the_recommendation_first(load_study):
    _study, rep, _tmp = load_study
    rec = rep["recommended"]["trial"]
    assert rep["verdict"] == "speculation-wins" and rep["best_configs"][0]["trial"] == rec
    fastest = rep["fastest_baseline"]["tok_per_s"]
    rows = {r["number"]: r for r in rep["trials"]}
    for r in rows.values():  # a complete trial's vs best is its objective over the fastest baseline's
        if r["state"] == "COMPLETE" and r["role"] == "speculative" and r["duplicate_of"] is None:
            assert r["speedup_vs_fastest"] == pytest.approx(r["tok_per_s"] / fastest)
            assert r["speedup"] == pytest.approx(r["tok_per_s"] / fastest)  # one baseline setting here
    for b in rep["best_configs"]:
        assert b["speedup"] == pytest.approx(rows[b["trial"]]["speedup_vs_fastest"])
    shown = [b["confirmed_speedup"] or b["speedup"] for b in rep["best_configs"][1:]]
    assert shown == sorted(shown, reverse=True)
    assert rep["objective"]["weights"] == {"1": 0.1, "8": 0.2, "32": 0.25, "64": 0.25, "128": 0.1, "256": 0.1}


def test_pruned_rows_have_a_reason_and_the_objectives_speedup_over_their_levels(load_study):
    _study, rep, _tmp = load_study
    base = {int(x["level"]): x["tok_per_s"] for x in next(r for r in rep["trials"] if r["number"] == 0)["levels"]}
    weights = {int(c): w for c, w in rep["objective"]["weights"].items()}
    pruned = [r for r in rep["trials"] if r["state"] == "PRUNED" and r["duplicate_of"] is None]
    assert pruned
    for r in pruned:
        assert r["reason"].startswith("lost to the "), r
        if r["levels_measured"] and len(r["levels_measured"]) > 1:
            w = {int(x["level"]): weights[int(x["level"])] for x in r["levels"]}
            logs = sum(w[int(x["level"])] * math.log(x["tok_per_s"] / base[int(x["level"])]) for x in r["levels"])
            assert r["speedup_vs_fastest"] == pytest.approx(math.exp(logs / sum(w.values())))
            assert r["speedup"] == pytest.approx(r["speedup_vs_fastest"])
            assert "levels" in r["speedup_basis"]


def test_pruning_saves_the_levels_a_pruned_trial_did_not_run(load_study):
    study, rep, _tmp = load_study
    g = rep["gpu_time"]
    early = [r for r in rep["trials"] if r["state"] == "PRUNED" and len(r["levels_measured"]) < 6]
    assert early and g["saved_by_pruning_s"] > 0
    # the search's time holds every start's load levels, not only its single-stream prompts
    starts = [TrialRecord(t) for t in study.get_trials() if TrialRecord(t).measured and not TrialRecord(t).is_duplicate]
    levels = sum(x.seconds for r in starts for x in r.levels if x.level > 1)
    prompts = sum(p.seconds for r in starts for p in r.prompt_results())
    assert levels > 0
    assert g["search_s"] == pytest.approx(sum(r.startup_s or 0 for r in starts) + prompts + levels)


def test_the_plots_show_pruned_trials_in_the_objectives_unit(load_study):
    study, rep, _tmp = load_study
    figs = {k: f for k, _t, f in figures(study, build_report(study))}
    complete = next(t for t in figs["history"].data if t.name == "complete trials")
    pruned = next(t for t in figs["history"].data if t.name.startswith("pruned trials"))
    assert min(pruned.y) > 0.4 * min(complete.y)  # aggregate tok/s, not one stream's (~10x lower)
    assert any(t.name.startswith("pruned") for t in figs["knobs"].data)
    n_pruned = sum(1 for r in rep["trials"] if r["state"] == "PRUNED" and r["role"] == "speculative")
    assert len(next(t for t in figs["knobs"].data if t.name.startswith("pruned")).x) == n_pruned
    *_, confirm = figs["timeline"].data
    assert len(confirm.x) == rep["gpu_time"]["confirmation_starts"] > 0
    assert "level 1 only" in figs["prompts"].layout.title.text
    level = rep["confirmed"][0]["speedup_ci"]["confidence"] * 100
    assert f"{level:.4g}% intervals" in figs["intervals"].layout.title.text


def test_the_recommended_interval_is_never_clipped_and_a_wide_one_is_marked():
    cis = [
        Interval(point=1.247, low=1.206, high=1.290, n=8, confidence=0.95),
        Interval(point=0.941, low=0.167, high=5.294, n=2, confidence=0.95),  # two rounds, out of the race
    ]
    lo, hi = interval_axis(cis, [True, False])
    assert lo < 0.941 and lo <= 1.0 < 1.206 and 1.290 < hi < 1.6  # the winner's interval fills the axis
    assert 0.167 < lo and hi < 5.294


def test_the_dashboard_note_names_the_recommended_trial_and_the_verdict(load_study):
    from optuna_dashboard import get_note

    study, rep, _tmp = load_study
    rec = rep["recommended"]["trial"]
    body = get_note(study)  # written at the study's end
    assert f"**autotune recommends trial {rec}**" in body and "**SIMULATED**" in body
    assert f"**Verdict: {rep['verdict']}**" in body and "weighted geometric mean" in body
    assert "Bonferroni" in body
    if study.best_trial.number != rec:
        assert f'"Best Trial" is trial {study.best_trial.number}' in body and f"**deploy trial {rec}**" in body
    publish(study, build_report(study), attrs=True)  # what `autotune dashboard` adds
    assert study.user_attrs["recommended"]["trial"] == rec and study.user_attrs["verdict"] == rep["verdict"]
    assert study.user_attrs["recommended"]["speedup"] == round(rep["recommended"]["speedup_ci"]["point"], 3)


def test_the_html_report_says_why_and_where(load_study):
    _study, _rep, tmp = load_study
    path = tmp / "report.html"
    r = autotune("report", str(SPACE), "--simulate", "--html", str(path), "--studies-dir", str(tmp / "studies"))
    assert r.returncode == 0, r.stderr
    page = path.read_text()
    assert "id='interval-note'" in page and "Bonferroni" in page and "pruning.start_noise, worth 3 rounds" in page
    assert "weighted geometric mean of the load levels" in page
    rows = [x for x in page.split("<tr class='PRUNED'")[1:]]
    assert rows and all("lost to the baseline" in x.split("</tr>")[0] for x in rows)

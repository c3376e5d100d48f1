"""The typed study result (``autotune.study.result``): what the study found, read from its records without the
report; the report presents the same figures, and an export deploys them. Presentation reads the study's result,
never the reverse."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.export_bundle import bundle
from autotune.report import build_report
from autotune.study import open_study, run
from autotune.study.result import study_result
from autotune.verdict import Verdict

from ..study.conftest import ScriptedRunner, make_space


@pytest.fixture(scope="module")
def finished():
    space = make_space(n_trials=8, drafters=("good", "bad"), confirm_top=2, repeats=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.6, "bad": lambda c: 0.5})
    study = open_study(space, optuna.storages.InMemoryStorage(), "result", seed=3)
    run(space, SGLangBackend(), runner, study)
    return space, study


def test_the_result_is_what_the_report_says(finished):
    space, study = finished
    res, rep = study_result(study, space), build_report(study).to_json()
    assert res.space is space and res.schedule_rows == []  # no load levels
    assert res.verdict is Verdict(rep["verdict"]) is Verdict.SPECULATION_WINS
    assert (res.study, res.simulated, res.units, res.basis) == (rep["study"], None, "tok/s", rep["verdict_basis"])
    assert res.recommended.to_json() == rep["recommended"] and res.recommended.winner
    assert res.recommended.trial_config == TrialConfig.from_dict(rep["recommended"]["config"])
    assert res.best is not None and res.best.to_json() == rep["best"]
    assert [c.summary() for c in res.confirmed] == rep["confirmed"]
    assert {k: b.to_json() for k, b in res.baselines.items()} == rep["baseline"]
    assert res.baseline(False) is None and res.fastest_baseline == res.baseline(True)
    rows = {r["number"]: r for r in rep["trials"]}
    for t in res.trials:
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert res.search_speedup(t) == rows[t.number]["speedup"]


def test_an_export_cites_the_recommendation_or_the_chosen_trial(finished):
    space, study = finished
    res, rep = study_result(study, space), build_report(study).to_json()
    now = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    b = bundle(space, SGLangBackend(), res, now=now).public
    rec = rep["recommended"]
    assert (b["trial"], b["config"], b["why"]) == (rec["trial"], rec["config"], rec["why"])
    assert b["measured"]["speedup_ci"] == rec["speedup_ci"] and b["measured"]["source"] == "confirmation"
    assert b["measured"]["speedup"] == rep["best"]["speedup"]
    other = next(
        r
        for r in rep["trials"]
        if r["state"] == "COMPLETE" and r["role"] == "speculative" and r["number"] != b["trial"]
    )
    chosen = bundle(space, SGLangBackend(), res, trial=other["number"], now=now).public
    confirmed = {c["trial"]: c for c in rep["confirmed"]}.get(other["number"])
    if confirmed is None:
        assert chosen["measured"]["speedup"] == other["speedup"] and chosen["measured"]["source"] == "search"
    else:
        assert chosen["measured"]["speedup_ci"] == confirmed["deploy_speedup_ci"] or confirmed["speedup_ci"]
    with pytest.raises(ValueError, match="no such trial"):
        bundle(space, SGLangBackend(), res, trial=999, now=now)


def test_the_study_layer_imports_no_presentation():
    """``autotune/study/`` reads records and computes results; the report, text, HTML and plots read those."""
    presentation = {"autotune.report", "autotune.render", "autotune.html", "autotune.plots"}
    found = []
    for path in sorted((Path(__file__).resolve().parents[2] / "autotune" / "study").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n in presentation]
    assert found == []

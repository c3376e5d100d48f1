"""The typed study result (``autotune.study.result``): the report's fields an export reads, and the space."""

from __future__ import annotations

import optuna

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.report import build_report
from autotune.study import open_study, run
from autotune.study.result import study_result
from autotune.verdict import Verdict

from ..study.conftest import ScriptedRunner, make_space


def test_the_result_carries_what_an_export_reads():
    space = make_space(n_trials=8, drafters=("good", "bad"), confirm_top=2, repeats=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.6, "bad": lambda c: 0.5})
    study = open_study(space, optuna.storages.InMemoryStorage(), "result", seed=3)
    run(space, SGLangBackend(), runner, study)
    rep = build_report(study)
    res = study_result(study, space)
    assert res.report == rep and res.space is space
    assert res.verdict is Verdict(rep["verdict"]) is Verdict.SPECULATION_WINS
    assert (res.study, res.simulated, res.units) == (rep["study"], rep["simulated"], rep["units"])
    assert res.recommended == rep["recommended"] and res.speedup_ci == rep["recommended"]["speedup_ci"]
    assert res.recommended_config == TrialConfig.from_dict(rep["recommended"]["config"])
    assert res.best == rep["best"] and res.fastest_baseline == rep["fastest_baseline"]
    assert res.baseline(True) == rep["baseline"]["cuda_graph_on"] and res.baseline(False) is None
    n = rep["best"]["trial"]
    assert res.trial_row(n) == next(r for r in rep["trials"] if r["number"] == n)
    assert res.confirmed_row(n) == next(c for c in rep["confirmed"] if c["trial"] == n)
    assert res.schedule_rows == []  # no load levels


def test_an_export_reads_the_result_as_it_read_the_report():
    import datetime as dt

    from autotune.export import render
    from autotune.export_bundle import bundle

    space = make_space(n_trials=8, drafters=("good", "bad"), confirm_top=2, repeats=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.6, "bad": lambda c: 0.5})
    study = open_study(space, optuna.storages.InMemoryStorage(), "export", seed=3)
    backend = SGLangBackend()
    run(space, backend, runner, study)
    res, rep = study_result(study, space), build_report(study)
    now = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    typed, plain = bundle(space, backend, res, now=now), bundle(space, backend, rep, now=now)
    assert typed == plain and type(typed["verdict"]) is str and typed["verdict"] == "speculation-wins"
    assert typed["trial"] == rep["recommended"]["trial"] and typed["measured"]["units"] == rep["units"]
    n = next(r["number"] for r in rep["trials"] if r["state"] == "COMPLETE" and r["number"] != typed["trial"])
    assert bundle(space, backend, res, trial=n, now=now) == bundle(space, backend, rep, trial=n, now=now)

    def text(result, fmt):  # the export's text but for the time it was made
        return [line for line in render(space, backend, result, fmt).splitlines() if "exported_at" not in line]

    for fmt in ("command", "yaml", "json", "compose"):
        assert text(res, fmt) == text(rep, fmt)

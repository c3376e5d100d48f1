"""Warm-up passes in a whole study, at the seam: a scripted server whose first requests after each start run slower
(llama.cpp capturing its CUDA graphs: docs/gpu-runs/2026-12-04-h200-warmup24) measures a speedup that is low by the
cold requests' share without a pass, and the true one with one; every start's passes are recorded and billed."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.measure import measure_config
from autotune.records import TrialRecord
from autotune.report import build_report
from autotune.study import open_study, run

from .conftest import ScriptedRunner, make_space

TRUE = 1.5  # the good drafter's steady speedup
COLD, COLD_SPEC = 0.02, 0.08  # the H200's first-pass shortfall, baseline and draft model (side-by-side run)


def _runner() -> ScriptedRunner:
    return ScriptedRunner(
        speed={"good": lambda c: TRUE, "bad": lambda c: 0.5},
        noise=0.002,
        request_noise=0.002,
        cold=COLD,
        cold_speculative=COLD_SPEC,
        cold_requests=5,  # one pass of the 5 prompts
    )


def _space(passes):
    space = make_space(n_trials=8)
    return dataclasses.replace(space, benchmark=dataclasses.replace(space.benchmark, warmup_passes=passes))


@pytest.fixture(scope="module")
def studies():
    out = {}
    for passes in (0, 1):
        space = _space(passes)
        study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=1)
        run(space, SGLangBackend(), _runner(), study)
        out[passes] = (study, build_report(study))
    return out


def test_without_a_pass_the_cold_requests_bias_the_speedup_and_one_pass_removes_it(studies):
    cold = studies[0][1].to_json()["best"]["speedup"]
    warm = studies[1][1].to_json()["best"]["speedup"]
    assert cold == pytest.approx(TRUE * (1 + COLD) / (1 + COLD_SPEC), rel=0.01)  # 1.417: 5.6% low
    assert warm == pytest.approx(TRUE, rel=0.01)
    assert studies[0][1].to_json()["warmup"] is None  # no passes, no line


def test_every_start_records_its_pass_and_the_bill_counts_it(studies):
    study, rep = studies[1]
    measured = [t for t in study.get_trials() if TrialRecord(t).measured and not TrialRecord(t).is_duplicate]
    for t in measured:
        w = TrialRecord(t).warmup
        assert w.passes == 1 and w.steady is None and w.seconds > 0
        timed = [p.tok_per_s for p in TrialRecord(t).prompt_results()]
        # the pass took the cold requests: it ran slower than the timed prompts, prompt by prompt
        assert all(a < b for a, b in zip(w.tok_per_s[0], timed, strict=False))
    g = rep.to_json()["gpu_time"]
    expected = sum(
        60.0 + TrialRecord(t).warmup.seconds + sum(p.seconds for p in TrialRecord(t).prompt_results()) for t in measured
    )
    assert g["search_s"] == pytest.approx(expected)
    w = rep.to_json()["warmup"]
    assert w["starts"] == g["search_starts"] + g["confirmation_starts"]
    assert (w["passes_median"], w["passes_max"]) == (1, 1)
    assert w["text"].startswith(f"{w['starts']} starts warmed up with 1 pass(es) of the prompts")
    rounds = study.user_attrs["confirmation"]["rounds"]
    recorded = [s for r in rounds for grp in r["starts"].values() for s in grp.values()]
    assert recorded and all(len(s["warmup"]["tok_per_s"]) == 1 for s in recorded)


def test_a_start_takes_the_passes_the_space_gives():
    runner = _runner()
    space = _space(2)
    m = measure_config(
        runner, TrialConfig.make("good", cuda_graph=True, num_steps=3, topk=1, num_draft_tokens=4), space
    )
    assert m.warmup.passes == 2 and m.warmup.steady is None
    assert len(m.results) == 5
    base = measure_config(runner, TrialConfig.baseline(True), space)
    assert base.warmup.passes == 2
    assert m.tok_per_s / base.tok_per_s == pytest.approx(TRUE, rel=0.01)


def test_the_terminal_and_html_reports_say_how_the_starts_warmed_up(studies, tmp_path):
    import io

    from autotune.html import write_html_report
    from autotune.render import render_report

    study, rep = studies[1]
    out = io.StringIO()
    render_report(rep, out)
    assert f"warm-up: {rep.to_json()['warmup']['text']}" in out.getvalue()
    write_html_report(study, rep, tmp_path / "r.html")
    assert "id='warmup'>Warm-up: " in (tmp_path / "r.html").read_text()
    out = io.StringIO()
    render_report(studies[0][1], out)
    assert "warm-up:" not in out.getvalue()


def test_a_drafter_not_engaged_is_caught_on_the_first_warm_up_request(tmp_path):
    """With warm-up passes the drafter alarm looks at the first answer of the first pass: a dead drafter costs one
    request, not a pass of the prompts (and the trial has no timed prompt)."""
    from optuna.trial import TrialState

    from autotune.study.orchestrator import Orchestrator

    space = _space(1)
    runner = ScriptedRunner(speed={"good": lambda c: 0.9, "bad": lambda c: 0.9}, accept={"bad": 1.0})
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    Orchestrator(space, SGLangBackend(), runner, study).search(8)
    bad = [t for t in study.get_trials() if t.params.get("drafter") == "bad"]
    first = min(bad, key=lambda t: t.number)
    assert first.state == TrialState.FAIL and first.user_attrs["fail_kind"] == "drafter-not-engaged"
    assert first.intermediate_values == {} and "prompts" not in first.user_attrs
    (session,) = [s for s in runner.sessions if s.config.drafter == "bad"]
    assert session.requests == 1
    good = [s for s in runner.sessions if s.config.drafter == "good"]
    assert good and all(s.requests == 2 * 5 for s in good)  # a pass and the 5 timed prompts

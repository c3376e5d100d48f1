"""The report's review figures: pruned and failed counts by reason, GPU time spent and saved, the best configs; and
the terminal rendering of them (rich, plain text into a pipe)."""

from __future__ import annotations

import io
from dataclasses import replace

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.records import TrialRecord
from autotune.render import render_report
from autotune.report import Load, Traffic, build_report
from autotune.space.model import TrafficInfo
from autotune.stats import Interval
from autotune.study import open_study, run
from autotune.traffic import Guard

from .conftest import ScriptedRunner, make_space


@pytest.fixture(scope="module")
def study_and_report():
    space = make_space(n_trials=16, drafters=("good", "bad", "crashy"), confirm_top=2, repeats=3)
    runner = ScriptedRunner(
        speed={"good": lambda c: 1.6, "bad": lambda c: 0.5, "crashy": lambda c: 1.0}, crash={"crashy"}, oom_above=12
    )
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=3)
    run(space, SGLangBackend(), runner, study)
    return study, build_report(study), runner


def test_reasons_count_every_pruned_and_failed_trial(study_and_report):
    study, rep, _runner = study_and_report
    reasons = rep.to_json()["reasons"]
    assert sum(reasons["PRUNED"].values()) == rep.to_json()["counts"]["PRUNED"]
    assert sum(reasons["FAIL"].values()) == rep.to_json()["counts"]["FAIL"]
    assert reasons["PRUNED"].get("lost to the baseline", 0) >= 1  # "bad" loses
    assert reasons["FAIL"].get("exited", 0) >= 1  # "crashy" never starts


def test_gpu_time_is_startups_plus_timed_prompts_and_pruning_savings(study_and_report):
    study, rep, _runner = study_and_report
    g = rep.to_json()["gpu_time"]
    measured = [t for t in study.get_trials() if TrialRecord(t).measured and not TrialRecord(t).is_duplicate]
    # the starts that failed: "crashy" half-way through its start-up, trees over 12 tokens out of memory after it
    failed = [f for t in study.get_trials() for f in TrialRecord(t).failed_starts]
    assert {f.kind for f in failed} == {"exited", "oom"}
    assert g["failed_starts"] == len(failed) and g["failed_s"] == sum(
        30.0 if f.kind == "exited" else 60.0 for f in failed
    )
    assert g["search_starts"] == len(measured) + len(failed)
    expected = sum(60.0 + sum(p.seconds for p in TrialRecord(t).prompt_results()) for t in measured)  # startup_s = 60
    assert g["search_s"] == pytest.approx(expected + g["failed_s"])
    pruned = [t for t in measured if t.state == optuna.trial.TrialState.PRUNED and TrialRecord(t).prompt_results()]
    saved = 0.0
    for t in pruned:
        ps = TrialRecord(t).prompt_results()
        saved += sum(p.seconds for p in ps) / len(ps) * (5 - len(ps))
    assert saved > 0 and g["saved_by_pruning_s"] == pytest.approx(saved)
    rounds = study.user_attrs["confirmation"]["rounds"]
    assert g["confirmation_starts"] == sum(len(r["baseline"]) + len(r["candidates"]) for r in rounds)
    assert g["total_s"] == pytest.approx(g["search_s"] + g["confirmation_s"])
    # each trial's own server time (a method's share of the search adds these up): the rows sum to the search's
    assert sum(r["gpu_s"] for r in rep.to_json()["trials"]) == pytest.approx(g["search_s"])
    assert all(r["gpu_s"] == 0.0 for r in rep.to_json()["trials"] if r["duplicate_of"] is not None)


def test_best_configs_are_the_fastest_speculative_with_their_intervals(study_and_report):
    _study, rep, _runner = study_and_report
    best = rep.to_json()["best_configs"]
    assert best and all(b["config"]["drafter"] == "good" for b in best)
    # the recommended config first, then by the objective's speedup: confirmation's where it measured one
    assert best[0]["trial"] == rep.to_json()["recommended"]["trial"] and best[0]["recommended"]
    shown = [b["confirmed_speedup"] if b["confirmed_speedup"] is not None else b["speedup"] for b in best[1:]]
    assert shown == sorted(shown, reverse=True)
    fastest = rep.to_json()["fastest_baseline"]["tok_per_s"]
    assert all(b["speedup"] == pytest.approx(b["tok_per_s"] / fastest) for b in best)
    confirmed = {c["trial"] for c in rep.to_json()["confirmed"]}
    for b in best:
        assert (b["speedup_ci"] is not None) == (b["trial"] in confirmed)


def test_terminal_report_shows_tables_and_whole_lines(study_and_report):
    _study, rep, _runner = study_and_report
    out = io.StringIO()
    render_report(rep, out)
    text = out.getvalue()
    assert "\x1b[" not in text  # no escapes into a pipe
    assert "baselines" in text and "best configs (against the fastest baseline)" in text
    assert "pruned and failed, by reason" in text and "lost to the baseline" in text and "exited" in text
    gpu = next(line for line in text.splitlines() if line.startswith("GPU time: "))
    assert "saved" in gpu and "by pruning" in gpu
    assert f"in {rep.gpu_time.failed_starts} start(s) that failed or were refused" in gpu  # "crashy" and the OOM trees
    verdict = next(line for line in text.splitlines() if line.startswith("verdict: "))
    assert rep.to_json()["verdict"] in verdict
    best = rep.to_json()["best_configs"][0]
    ci = best["speedup_ci"]
    if ci:
        assert f"{ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]" in text


def test_the_closing_summary_is_at_most_12_lines_and_ends_the_report(study_and_report):
    """The study's last lines are the summary a person reads (verdict, interval, recommendation, cost, how to
    deploy): at most 12, whatever the report holds; the intervals' derivation is a pointer, not a paragraph."""
    from autotune.render import INTERVAL_POINTER, summary_lines

    _study, rep, _runner = study_and_report
    deploy = "python3 -m sglang.launch_server --model-path /m"
    lines = summary_lines(rep, deploy)
    assert lines[0].startswith(f"verdict: {rep.verdict.value}") and lines[-1] == f"  {deploy}"
    assert any(x.startswith("recommended: trial ") for x in lines) and any(x.startswith("GPU time: ") for x in lines)
    # the most a report can say: an open verdict with its way to settle, per-level verdicts, a confirmed pick
    ci = Interval(point=1.2, low=1.1, high=1.3, n=4, confidence=0.95)
    full = replace(
        rep,
        to_settle={"text": "settling whether ... would take about 15 fresh rounds"},
        load=Load(1, [], "", None, "speculation wins up to 64 streams"),
        result=replace(rep.result, recommended=replace(rep.recommended, winner=True, speedup_ci=ci)),
        flags=["trial 3: drafter not engaged: 0 draft tokens accepted", "trial 5: out of memory (at start-up)"],
        acceptance_guards=(Guard("acceptance-far-below", "trial 4 accepts ..."),),
        traffic=Traffic(
            TrafficInfo("log.jsonl", 100, 10, "category", {}),
            {"warning": "the subset runs ..."},
            "subset vs the rest of the log ...",
            None,
            None,
            [],
            None,
            [],
            "... WARNING ...",
        ),
    )
    most = summary_lines(full, deploy)
    assert len(most) <= 12
    assert "  speedup 1.200 [1.100, 1.300] (95% CI) against the fastest baseline" in most
    # the alarms and warnings are never left to the full report alone: the first alarm whole, how many more
    assert "ALARM (+1 more): trial 3: drafter not engaged: 0 draft tokens accepted" in most
    names = "acceptance-far-below, subset-unrepresentative, loses at some output length"
    assert f"warnings: {names} (autotune report says why)" in most
    assert any(x.startswith("ALARM") for x in summary_lines(rep, deploy)) == bool(rep.flags)
    out = io.StringIO()
    render_report(rep, out, deploy=deploy)
    text = out.getvalue().rstrip("\n").splitlines()
    assert text[-len(lines) :] == lines  # the summary closes the report
    assert rep.result.confirmed and "Bonferroni" in (rep.interval_note or "")  # the derivation: in the report, the HTML
    assert "Bonferroni" not in "\n".join(text) and f"  ({INTERVAL_POINTER})" in text  # the terminal points to it


def test_report_json_keeps_its_keys_and_their_order(study_and_report):
    """``report --json`` is read by scripts and diffed between versions: the typed report writes the same keys in
    the same order (a row's confirmed interval only on confirmation's candidates)."""
    _study, rep, _runner = study_and_report
    js = rep.to_json()
    assert (
        list(js)
        == (
            "study simulated units baseline trials counts pruned_before_last_prompt pruned_by reasons gpu_time "
            "search_settled to_settle warmup best_configs best confirmed verdict verdict_basis verdict_rests_on "
            "verdict_text exclusions baseline_check suspect_prunes fastest_baseline lossless recommended flags "
            "acceptance_guards load objective interval_note comparisons"
        ).split()
    )
    row_keys = (
        "number state role seeded params config tok_per_s speedup speedup_upper prompts_measured accept_length "
        "accept_per_pos startup_s duplicate_of prune_reason prune_rule pruned_against fail_kind fail_reason lossless "
        "lossless_summary log_path argv levels levels_measured slo_broken reason gpu_s"
    ).split()
    confirmed = {c.trial for c in rep.result.confirmed}
    assert confirmed
    for row in js["trials"]:
        ci = ["speedup_ci"] if row["number"] in confirmed else []
        assert list(row) == [*row_keys, *ci, "speedup_vs_fastest", "speedup_basis"]
    assert list(js["recommended"]) == ["config", "trial", "tok_per_s", "speedup_ci", "why"]
    assert list(js["gpu_time"])[-1] == "note" and list(js["lossless"])[:2] == ["numerics", "lossy_trials"]

"""The trial record (``autotune.records``): its accessors and queries over hand-made trials in an in-memory study,
and that nothing else in the package touches user attrs."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune import records
from autotune.config import TrialConfig
from autotune.records import TrialRecord

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"
DISTS = {
    "drafter": CategoricalDistribution(["none", "good", "bad"]),
    "cuda_graph": CategoricalDistribution([False, True]),
    "num_draft_tokens": IntDistribution(2, 64),
}


def _add(study, state, *, drafter="good", cg=True, value=None, iv=None, **attrs):
    params = {"drafter": drafter, "cuda_graph": cg}
    dists = {k: DISTS[k] for k in params}
    if drafter != "none":
        params["num_draft_tokens"] = attrs.pop("size", 8)
        dists["num_draft_tokens"] = DISTS["num_draft_tokens"]
        eff = TrialConfig.make(drafter, cg, num_draft_tokens=params["num_draft_tokens"])
    else:
        eff = TrialConfig.baseline(cg)
    ua = {"role": "baseline" if drafter == "none" else "speculative", "effective": eff.to_dict()}
    ua["config_key"] = eff.key()
    ua.update(attrs)
    study.add_trial(
        create_trial(
            state=state,
            value=value if state == TrialState.COMPLETE else None,
            params=params,
            distributions=dists,
            user_attrs=ua,
            intermediate_values=iv or {},
        )
    )
    return study.trials[-1]


def _study():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction="maximize")


def test_find_baseline_wants_a_measured_non_duplicate_of_the_setting():
    study = _study()
    _add(study, TrialState.COMPLETE, drafter="none", cg=False, value=90.0, iv={0: 90.0})
    _add(study, TrialState.COMPLETE, drafter="none", cg=True, value=100.0, iv={0: 100.0}, duplicate_of=0)
    assert records.find_baseline(study, True) is None
    on = _add(study, TrialState.COMPLETE, drafter="none", cg=True, value=100.0, iv={0: 100.0})
    assert records.find_baseline(study, True).number == on.number
    assert records.find_baseline(study, False).number == 0
    assert records.is_baseline_trial(on) and TrialRecord(on).is_baseline


def test_failed_twice_counts_launched_retried_failures_only():
    study = _study()
    key = TrialConfig.make("bad", True, num_draft_tokens=8).key()
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="exited")
    assert records.failed_twice(study, key) == []
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="exited", interrupted=True)
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="exited", not_launched=True)
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="drafter-not-engaged")
    assert records.failed_twice(study, key) == []
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="server-died")
    assert [t.number for t in records.failed_twice(study, key)] == [0, 4]


def test_predicted_oom_by_size_knob_drafter_and_graphs():
    study = _study()
    _add(study, TrialState.PRUNED, drafter="good", size=16, fail_kind="oom")
    bigger = TrialConfig.make("good", True, num_draft_tokens=20)
    assert records.predicted_oom(study, bigger, "num_draft_tokens").number == 0
    assert records.predicted_oom(study, bigger.with_knobs(num_draft_tokens=8), "num_draft_tokens") is None
    assert (
        records.predicted_oom(study, TrialConfig.make("good", False, num_draft_tokens=20), "num_draft_tokens") is None
    )
    assert records.predicted_oom(study, bigger, None) is None  # a backend without a size knob predicts nothing


def test_consecutive_launch_failures_stop_counting_once_a_speculative_config_ran():
    study = _study()
    _add(study, TrialState.COMPLETE, drafter="none", value=100.0, iv={0: 100.0}, measured=True)
    _add(study, TrialState.FAIL, drafter="good", fail_kind="exited")
    _add(study, TrialState.FAIL, drafter="good", fail_kind="launch-failed", not_launched=True)
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="startup-timeout")
    assert records.consecutive_launch_failures(study) == 2
    _add(study, TrialState.PRUNED, drafter="bad", measured=True)
    assert records.consecutive_launch_failures(study) == 0


def test_budget_and_exclusions():
    study = _study()
    _add(study, TrialState.COMPLETE, drafter="none", value=100.0, iv={0: 100.0}, measured=True)
    _add(study, TrialState.COMPLETE, drafter="good", value=120.0, measured=True, lossless={"ok": False})
    _add(study, TrialState.COMPLETE, drafter="good", value=120.0, duplicate_of=1)
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="drafter-not-engaged", fail_reason="acceptance 1.00")
    _add(study, TrialState.FAIL, drafter="bad", fail_kind="drafter-not-engaged", fail_reason="again")
    _add(study, TrialState.FAIL, drafter="good", size=4, fail_kind="exited", fail_reason="boom")
    _add(study, TrialState.FAIL, drafter="good", size=5, interrupted=True)
    assert records.counted_trials(study) == 5
    kinds = [(e.trial, e.kind) for e in records.find_exclusions(study)]
    assert kinds == [(1, "lossy"), (3, "not-engaged"), (5, "failed")]
    assert TrialRecord(study.trials[1]).lossy and not TrialRecord(study.trials[0]).lossy


def test_reopen_confirmation_marks_it_not_done():
    study = _study()
    records.reopen_confirmation(study)  # nothing recorded: nothing to reopen
    assert records.confirmation(study) is None
    records.set_confirmation(study, records.ConfirmationState.from_dict({"keys": ["k"], "rounds": [], "done": True}))
    records.reopen_confirmation(study)
    assert study.user_attrs[records.CONFIRMATION] == {"keys": ["k"], "rounds": [], "done": False}


def test_every_key_is_documented():
    doc = records.__doc__ or ""
    for key in (*records.TRIAL_KEYS, *records.STUDY_KEYS):
        assert f"``{key}``" in doc, key


def test_user_attrs_are_touched_only_by_the_records_module():
    # the one documented exception: failing a killed run's trial writes through the storage (study/_optuna.py)
    allowed = {PACKAGE / "records.py", PACKAGE / "study" / "_optuna.py"}
    pattern = re.compile(r"user_attrs|set_user_attr")
    offenders = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p not in allowed
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_the_record_reads_prompts_and_levels_back_typed():
    from dataclasses import replace

    from autotune.config import LevelResult, PromptResult
    from autotune.records import TrialWriter

    trial = _study().ask()
    results = [
        PromptResult(0, 100, 2.0, ttft_s=0.1, prompt_tokens=12, accept_length=2.5, text="hi", finish_reason="length"),
        PromptResult(1, 50, 0.5),
    ]
    loaded = LevelResult(4, (*results, PromptResult(0, 80, 1.0, ttft_s=0.2)), 1.5, failed=1)
    level4 = replace(loaded.summary(), speedup=1.2, slo_broken=("itl_p99_ms",))
    writer = TrialWriter(trial)
    writer.prompts(results)
    writer.levels([LevelResult.sequential(results).summary(), level4])

    r = TrialRecord(trial)
    assert r.prompt_results() == [PromptResult(**{**results[0].__dict__, "text": ""}), results[1]]  # no text kept
    assert [x.tok_per_s for x in r.prompt_results()] == [p["tok_per_s"] for p in r.attrs["prompts"]] == [50.0, 100.0]
    assert [x.level for x in r.levels] == [1, 4]
    x = r.level(4)
    assert x.tok_per_s == loaded.tok_per_s and r.levels[1] == level4  # read back whole
    assert r.attrs["levels"][1] == {**loaded.summary().to_dict(), "speedup": 1.2, "slo_broken": ["itl_p99_ms"]}
    assert (x.speedup, x.slo_broken, r.level(1).speedup, r.level(8)) == (1.2, ("itl_p99_ms",), None, None)
    assert r.level_tok_per_s() == {1: 150 / 2.5, 4: loaded.tok_per_s}


def test_reading_serves_one_snapshot_inside_and_the_study_outside(tmp_path):
    """``records.reading``: within it every read is the snapshot taken on entry (a trial added meanwhile is not
    seen, states still filter), nested readings keep the outer snapshot, and after it reads see the study again.
    On SQLite, as studies run."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    _add(study, TrialState.COMPLETE, drafter="none", value=100.0, iv={0: 100.0})
    with records.reading(study):
        _add(study, TrialState.FAIL, size=16)
        assert [t.number for t in records.trials(study)] == [0]
        with records.reading(study):
            assert len(records.trials(study)) == 1
        assert records.trials(study, (TrialState.FAIL,)) == []
        assert len(records.trials(study)) == 1  # the inner reading left the outer snapshot in place
    assert [t.state for t in records.trials(study)] == [TrialState.COMPLETE, TrialState.FAIL]
    assert [t.number for t in records.trials(study, (TrialState.FAIL,))] == [1]


def test_the_running_trial_as_this_process_wrote_it_is_what_the_storage_holds(tmp_path):
    """``_optuna.latest`` (what the pruner decides on after each prompt, no storage read): the running trial's
    params, user attrs (the enqueued ones too) and reported values, as ``_optuna.frozen`` reads them back."""
    from autotune.config import PromptResult
    from autotune.study import _optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    study.enqueue_trial({"cuda_graph": True}, user_attrs={"role": "speculative"})
    trial = study.ask()
    trial.suggest_categorical("cuda_graph", [False, True])
    trial.suggest_categorical("drafter", ["good", "bad"])
    trial.suggest_int("num_draft_tokens", 2, 64)
    records.TrialWriter(trial).prompts([PromptResult(0, 100, 2.0), PromptResult(1, 80, 1.0)])
    trial.report(50.0, 0)
    trial.report(80.0, 1)

    def seen(t):
        return t.number, t.state, t.params, t.user_attrs, t.intermediate_values

    assert seen(_optuna.latest(trial)) == seen(_optuna.frozen(trial))
    assert _optuna.latest(trial).intermediate_values == {0: 50.0, 1: 80.0}

"""Every pruned and failed trial carries its reason (also one failed outside its steps), leader prunes are counted
as such, and the dashboard's trial note names knobs, not parameter names, and shows the measured acceptance."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune import records
from autotune.evidence import param_knobs, trial_note
from autotune.render import study_note
from autotune.report import _reasons, build_report


def _study() -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    # a FAIL no outcome of ours settled: the port race's launch error raised outside the trial's steps
    t = study.ask()
    t.set_user_attr(records.ROLE, records.ROLE_BASELINE)
    study.tell(t, state=TrialState.FAIL)
    # a trial pruned by the leader rule
    t = study.ask()
    t.set_user_attr(records.ROLE, records.ROLE_SPECULATIVE)
    t.set_user_attr(records.PRUNE_REASON, "upper 95% bound of the speedup over trial 3 is 0.91 < 0.95")
    t.set_user_attr(records.SPEEDUP_UPPER, 0.91)
    t.set_user_attr(records.PRUNE_RULE, "leader")
    t.set_user_attr(records.PRUNED_AGAINST, 3)
    study.tell(t, state=TrialState.PRUNED)
    # an interrupted one (a re-run found the baseline queued, not measured)
    t = study.ask()
    t.set_user_attr(records.FAIL_REASON, "baseline queued, not measured yet")
    t.set_user_attr(records.INTERRUPTED, True)
    study.tell(t, state=TrialState.FAIL)
    return study


def test_every_failed_and_pruned_row_has_a_reason():
    study = _study()
    rows = {r["number"]: r for r in build_report(study).to_json()["trials"]}
    assert "no outcome recorded" in rows[0]["reason"]
    assert rows[1]["reason"].startswith("lost to the leader (trial 3): upper 95% bound")
    assert rows[2]["reason"] == "interrupted: baseline queued, not measured yet (not counted in the budget)"


def test_leader_prunes_are_not_counted_as_lost_to_the_baseline():
    reasons = _reasons(_study().get_trials())
    assert reasons["PRUNED"] == {"lost to the leader": 1}
    assert reasons["FAIL"] == {"no outcome recorded (its process stopped)": 1, "interrupted": 1}


def test_the_study_note_lists_every_pruned_and_failed_trial_with_its_reason():
    study = _study()
    note = study_note(study, build_report(study))
    assert "| 0 | FAIL | no outcome recorded" in note and "| 1 | PRUNED | lost to the leader (trial 3)" in note
    assert "**Verdict: " in note


def test_trial_note_maps_parameter_names_to_knobs_and_shows_the_measured_acceptance():
    config = {"drafter": "d", "cuda_graph": True, "num_steps": 4, "topk": 4, "num_draft_tokens": 9}
    params = {"drafter": "d", "cuda_graph": True, "num_steps": 4, "topk": 4, "num_draft_tokens_s4_k4": 9}
    assert param_knobs(params, config)["num_draft_tokens_s4_k4"] == "num_draft_tokens"
    attrs = {
        records.CONFIG: config,
        records.ACCEPT_LENGTH: 2.02,
        records.SERVER_EFFECTIVE: {"num_steps": 4, "avg_spec_accept_length": 0.0},
    }
    note = trial_note(5, attrs, {"state": "COMPLETE", "tok_per_s": 1234.5678}, [], params)
    assert "`num_draft_tokens_s4_k4` is knob `num_draft_tokens` = 9" in note
    assert '"avg_spec_accept_length": "2.02 measured over the prompts' in note
    assert '"avg_spec_accept_length": 0.0' not in note

"""A server that crashes during a trial gets one fresh start; a config that crashes twice is unstable (issue #22,
item 6: on an H200 llama-server aborted with code -6 in 2 of 13 trials at 4+ streams, and each was excluded)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.records import TrialRecord, find_exclusions
from autotune.study import Orchestrator, open_study

from .conftest import ScriptedRunner, make_space


def _run(runner, n_trials=8, drafters=("good", "bad")):
    space = make_space(n_trials=n_trials, drafters=drafters)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    events = []
    Orchestrator(space, SGLangBackend(), runner, study, listener=events.append).search(n_trials)
    return study, events


def _spec(study, drafter):
    return [t for t in study.trials if TrialRecord(t).drafter == drafter and not TrialRecord(t).is_duplicate]


def test_a_config_that_crashes_once_is_measured_on_its_second_start():
    runner = ScriptedRunner(speed={"good": lambda c: 1.3, "bad": lambda c: 0.9}, crash_serving={"good": 1})
    study, events = _run(runner)
    good = [t for t in _spec(study, "good") if t.state != TrialState.WAITING]
    assert good and all(t.state == TrialState.COMPLETE for t in good), [(t.state, t.user_attrs) for t in good]
    for t in good:
        r = TrialRecord(t)
        assert len(r.crashes) == 1 and "exit -6" in r.crashes[0] and "Aborted" in r.crashes[0]
        assert [p.index for p in r.prompt_results()] == list(
            range(len(r.prompt_results()))
        )  # every prompt once, in order
        assert sorted(t.intermediate_values) == list(range(len(t.intermediate_values)))
    starts = [c for c in runner.launches if c.drafter == "good"]
    assert len(starts) == 2 * len(good)  # one fresh start each, no more
    assert any("one fresh start" in (e.data.get("message") or "") for e in events if e.kind == "note")
    assert not find_exclusions(study)  # a one-off crash leaves no exclusion behind


def test_a_config_that_crashes_twice_is_unstable_with_its_log_line_and_never_started_again():
    runner = ScriptedRunner(speed={"good": lambda c: 1.3, "bad": lambda c: 0.9}, crash_serving={"bad": 99})
    study, _ = _run(runner, n_trials=10)
    bad = [t for t in _spec(study, "bad") if t.state == TrialState.FAIL]
    unstable = [t for t in bad if TrialRecord(t).fail_kind == "unstable" and not TrialRecord(t).not_launched]
    assert unstable, [(TrialRecord(t).fail_kind, TrialRecord(t).fail_reason) for t in bad]
    for t in unstable:
        r = TrialRecord(t)
        assert len(r.crashes) == 2 and "Aborted" in r.fail_reason and "2 starts" in r.fail_reason
    keys = {TrialRecord(t).config_key for t in unstable}
    for key in keys:  # each unstable config got exactly its two starts, then was refused without a start
        assert sum(1 for c in runner.launches if c.key() == key) == 2
    assert not any(e.kind == "failed" for e in find_exclusions(study))  # decided: not deployable

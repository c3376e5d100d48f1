"""Each outcome of a trial is settled in one place (``study.trial.TrialObjective``): recorded once, announced by
exactly one ``trial-end`` event, the last event of its trial; and ``measure_config`` stops its server whatever
happens."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.config import LaunchInfo, TrialConfig
from autotune.errors import ServerDied
from autotune.measure import measure_config
from autotune.records import TrialRecord
from autotune.study import Orchestrator, open_study

from .conftest import ScriptedRunner, make_space


class _Faulty(ScriptedRunner):
    """``odd`` resolves another config than launched; ``flaky`` dies at its third prompt."""

    def launch(self, config):
        s = super().launch(config)
        if config.drafter == "odd":
            s.info = LaunchInfo(argv=["fake"], effective={"num_steps": 99, "cuda_graph": config.cuda_graph})
        if config.drafter == "flaky":
            run = s.run_prompt

            def run_prompt(i):
                if i == 2:
                    raise ServerDied("the server process exited", returncode=1, log_tail="Segmentation fault")
                return run(i)

            s.run_prompt = run_prompt
        return s


def _search(runner, n_trials=14, drafters=("good", "odd", "flaky", "bad")):
    space = make_space(n_trials=n_trials, drafters=drafters)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    events = []
    Orchestrator(space, SGLangBackend(), runner, study, listener=events.append).search(n_trials)
    return study, events


def test_every_trial_ends_with_exactly_one_trial_end_event():
    runner = _Faulty(
        speed={"good": lambda c: 1.2, "odd": lambda c: 1.3, "flaky": lambda c: 1.3, "bad": lambda c: 0.5},
        accept={"bad": 1.0},
        oom_above=12,
    )
    study, events = _search(runner)
    per_trial: dict[int, list[str]] = {}
    for ev in events:
        if ev.trial is not None:
            per_trial.setdefault(ev.trial, []).append(ev.kind)
    finished = [t for t in study.trials if t.state != TrialState.WAITING]
    assert sorted(per_trial) == [t.number for t in finished]
    for number, kinds in per_trial.items():
        assert kinds[0] == "trial-start" and kinds[-1] == "trial-end" and kinds.count("trial-end") == 1, (number, kinds)
    ends = {ev.trial: ev.data for ev in events if ev.kind == "trial-end"}
    for t in finished:
        assert ends[t.number]["state"] == t.state.name
        r = TrialRecord(t)
        if t.state == TrialState.FAIL:
            assert ends[t.number]["reason"] == r.fail_reason
    kinds = {TrialRecord(t).fail_kind for t in finished}
    assert {"unstable", "drafter-not-engaged"} <= kinds  # flaky dies on every start: one fresh start, then unstable


def test_a_config_mismatch_fails_the_trial_once_and_is_not_recorded_as_measured():
    runner = _Faulty(speed={"good": lambda c: 1.2, "odd": lambda c: 1.3})
    study, events = _search(runner, n_trials=10, drafters=("good", "odd"))
    odd = [t for t in study.trials if t.params.get("drafter") == "odd" and t.state == TrialState.FAIL]
    assert odd
    for t in odd:
        r = TrialRecord(t)
        assert not r.measured and not r.prompt_results()
        if not r.not_launched:
            assert "resolved a different config than launched" in r.fail_reason
            assert r.fail_kind == "benchmark-failed"  # as before issue #12 (retried once, then not launched again)
        assert sum(1 for ev in events if ev.kind == "trial-end" and ev.trial == t.number) == 1


def test_measure_config_stops_the_server_when_a_prompt_fails():
    space = make_space(prompts=3)
    sessions = []

    class Runner(_Faulty):
        def launch(self, config):
            s = super().launch(config)
            sessions.append(s)
            return s

    runner = Runner(speed={"flaky": lambda c: 1.0, "good": lambda c: 1.0})
    m = measure_config(runner, TrialConfig.make("good", True, num_steps=2), space, on_prompt=lambda i, r, rs: None)
    assert len(m.results) == 3 and m.tok_per_s > 0 and sessions[-1].closed
    with pytest.raises(ServerDied):
        measure_config(runner, TrialConfig.make("flaky", True, num_steps=2), space)
    assert sessions[-1].closed

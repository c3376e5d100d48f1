"""A drafter whose server never starts (an incompatible checkpoint fails every config of it) is not launched again
after ``NEVER_STARTED`` failed starts under one CUDA-graph setting, nor one whose servers crash on every start after
``NEVER_SERVED`` unstable configs: each failed start holds the GPUs until it fails (a start-up timeout: the whole
limit), and before, the search went on launching its configs. A drafter that served once is never refused so."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.errors import ServerExited
from autotune.records import TrialRecord
from autotune.report import build_report
from autotune.study import Orchestrator, open_study
from autotune.study.trial import NEVER_SERVED, NEVER_STARTED

from .conftest import ScriptedRunner, make_space


def _search(runner, n_trials=24, cuda_graph=(True,), seed=0):
    space = make_space(n_trials=n_trials, drafters=("good", "bad"), cuda_graph=cuda_graph)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=seed)
    Orchestrator(space, SGLangBackend(), runner, study).search(n_trials)
    return study


def _bad(study):
    return [t for t in study.trials if TrialRecord(t).drafter == "bad" and not TrialRecord(t).is_duplicate]


def test_a_drafter_that_never_starts_gets_three_starts_per_graph_setting_then_none():
    runner = ScriptedRunner(speed={"good": lambda c: 1.3}, crash={"bad"})
    study = _search(runner, cuda_graph=(False, True))
    for cg in (False, True):
        starts = [c for c in runner.launches if c.drafter == "bad" and c.cuda_graph == cg]
        assert len(starts) == NEVER_STARTED, (cg, len(starts))
    refused = [t for t in _bad(study) if TrialRecord(t).not_launched and "never started" in TrialRecord(t).fail_reason]
    assert refused, "the search should have proposed the drafter again"
    for t in refused:
        r = TrialRecord(t)
        assert t.state == TrialState.FAIL and r.fail_kind == "exited" and not r.failed_starts
        assert f"CUDA graphs {'on' if r.cuda_graph else 'off'}" in r.fail_reason and "drafter 'bad'" in r.fail_reason
    assert any(t.state == TrialState.COMPLETE and TrialRecord(t).drafter == "good" for t in study.trials)
    rep = build_report(study).to_json()
    assert rep["gpu_time"]["failed_starts"] == 2 * NEVER_STARTED  # billed: half a start-up each
    assert rep["gpu_time"]["failed_s"] == 2 * NEVER_STARTED * runner.startup_s / 2


class StartsOnceThenFails(ScriptedRunner):
    """ "bad" starts once and serves; every later start of it fails at start-up."""

    def launch(self, config):
        if config.drafter == "bad" and any(c.drafter == "bad" for c in self.launches):
            self.launches.append(config)
            raise ServerExited("server exited with code 1 during startup", returncode=1, log_tail="Traceback: boom")
        return super().launch(config)


def test_a_drafter_that_started_once_is_not_refused_as_a_whole():
    runner = StartsOnceThenFails(speed={"good": lambda c: 1.3, "bad": lambda c: 1.25})
    study = _search(runner)
    failed = [t for t in _bad(study) if t.state == TrialState.FAIL and not TrialRecord(t).not_launched]
    assert len(failed) > NEVER_STARTED  # each config still gets its own start (and its retry)
    assert not any("never started" in (TrialRecord(t).fail_reason or "") for t in study.trials)


def test_a_drafter_whose_servers_crash_on_every_start_is_not_launched_after_two_unstable_configs():
    # every server of "bad" dies at its second prompt: each config gets its fresh start, dies again (unstable)
    runner = ScriptedRunner(speed={"good": lambda c: 1.3, "bad": lambda c: 1.25}, crash_serving={"bad": 99})
    study = _search(runner)
    unstable = [t for t in _bad(study) if TrialRecord(t).fail_kind == "unstable" and not TrialRecord(t).not_launched]
    assert len(unstable) == NEVER_SERVED
    assert sum(1 for c in runner.launches if c.drafter == "bad") == 2 * NEVER_SERVED  # each: the crash, a fresh start
    refused = [t for t in _bad(study) if "never served" in (TrialRecord(t).fail_reason or "")]
    assert refused and all(TrialRecord(t).not_launched for t in refused)
    # one crash of each unstable config was followed by a fresh start: those are the starts billed as failed
    assert build_report(study).to_json()["gpu_time"]["failed_starts"] == NEVER_SERVED


def test_a_drafter_measured_once_is_not_refused_for_its_unstable_configs():
    # "bad" serves its first start; every later start dies at its second prompt
    runner = ScriptedRunner(speed={"good": lambda c: 1.3, "bad": lambda c: 1.25}, crash_serving={})
    first = {"done": False}

    def launch(config, _launch=runner.launch):
        session = _launch(config)
        if config.drafter == "bad":
            session.dies_at = 1 if first["done"] else None
            first["done"] = True
        return session

    runner.launch = launch
    study = _search(runner)
    assert any(t.state == TrialState.COMPLETE for t in _bad(study))
    unstable = [t for t in _bad(study) if TrialRecord(t).fail_kind == "unstable" and not TrialRecord(t).not_launched]
    assert len(unstable) > NEVER_SERVED
    assert not any("never served" in (TrialRecord(t).fail_reason or "") for t in study.trials)

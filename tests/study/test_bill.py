"""The report's GPU time is the server time the study used: on the simulator's in-process model every second a
server held the machine is charged to the virtual clock (its "startup" and "generate" ledgers: start-ups, failed
ones included, warm-up passes, timed prompts and load levels), and the report's bill, read back from the study's
records alone, must come to the same figure. Before, it left out every start that failed (a 1T model's failed
start costs its whole load) and the load levels of confirmation's starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.records import TrialRecord
from autotune.report import build_report
from autotune.seam import VirtualClock
from autotune.sim import ModelRunner, simulated_space
from autotune.space import load_space
from autotune.study import Orchestrator, open_study

ROOT = Path(__file__).resolve().parents[2]


def _study(space_file: str, *faults: str, confirm: bool = True):
    space = simulated_space(load_space(str(ROOT / space_file)))
    extra = list(space.server.extra_args)
    for f in faults:
        extra += ["--fault", f]
    space = dataclasses.replace(space, server=dataclasses.replace(space.server, extra_args=tuple(extra)))
    clock = VirtualClock()
    runner = ModelRunner(space, SGLangBackend(), clock, seed=0)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0, simulated=True)
    orch = Orchestrator(space, SGLangBackend(), runner, study, clock=clock)
    orch.search(space.budget.n_trials)
    searched = _server_s(clock)
    if confirm:
        orch.confirm()
    return study, clock, searched, runner


def _server_s(clock: VirtualClock) -> float:
    """What the servers held the machine for (warm-up requests and reference answers are not billed)."""
    return clock.charged.get("startup", 0.0) + clock.charged.get("generate", 0.0)


def test_starts_that_run_out_of_memory_are_billed_until_they_fail():
    # the field report's Kimi space: trees of more than 6 draft tokens run out of memory after loading the model
    study, clock, searched, _ = _study("spaces/eagle3.yaml", "oom-above:6")
    g = build_report(study).to_json()["gpu_time"]
    oom = [t for t in study.trials if TrialRecord(t).fail_kind == "oom" and TrialRecord(t).failed_starts]
    assert oom, "the space should launch some trees that run out of memory"
    assert g["failed_starts"] == len(oom) and g["failed_s"] > 0
    assert g["search_s"] == pytest.approx(searched, rel=1e-9)
    assert g["total_s"] == pytest.approx(_server_s(clock), rel=1e-9)
    for t in oom:  # each held the machine for its start-up, as long as a start that served
        (f,) = TrialRecord(t).failed_starts
        assert f.kind == "oom" and f.seconds > 60


def test_a_drafter_whose_server_never_gets_healthy_is_billed_at_the_startup_timeout():
    study, clock, searched, _ = _study("spaces/eagle3.yaml", "never-healthy@aq-medai", confirm=False)
    g = build_report(study).to_json()["gpu_time"]
    timeout = load_space(str(ROOT / "spaces/eagle3.yaml")).server.startup_timeout_s
    hung = [f for t in study.trials for f in TrialRecord(t).failed_starts]
    assert hung and all(f.kind == "startup-timeout" and f.seconds == timeout for f in hung)
    assert g["failed_starts"] == len(hung) and g["failed_s"] == pytest.approx(timeout * len(hung))
    assert g["total_s"] == pytest.approx(searched, rel=1e-9) == pytest.approx(_server_s(clock), rel=1e-9)


def test_a_start_that_crashes_while_serving_is_billed_and_its_fresh_start_too():
    # every server of one drafter dies at its third request: a fresh start, which dies too (unstable)
    study, clock, _, _ = _study("spaces/eagle3.yaml", "crash-after:3@aq-medai", confirm=False)
    g = build_report(study).to_json()["gpu_time"]
    crashed = [t for t in study.trials if TrialRecord(t).crashes]
    assert crashed and g["failed_starts"] > 0
    lost = [f for t in crashed for f in TrialRecord(t).failed_starts]
    assert len(lost) == g["failed_starts"] and all(f.kind == "server-died" for f in lost)
    # what is not billed: the request each crash cut short (the simulator charges a third of it)
    short = _server_s(clock) - g["total_s"]
    assert 0 <= short < 0.01 * g["total_s"], (short, g)


def test_confirmation_of_a_load_study_bills_its_load_levels():
    study, clock, searched, _ = _study("spaces/llama-8b-load.yaml")
    g = build_report(study).to_json()["gpu_time"]
    assert g["confirmation_starts"] > 0 and g["failed_starts"] == 0
    assert g["search_s"] == pytest.approx(searched, rel=1e-9)
    assert g["confirmation_s"] == pytest.approx(_server_s(clock) - searched, rel=1e-9)

"""A server that fails in confirmation (found on the H200: llama.cpp's CUDA build crashed with "an illegal
instruction was encountered" on a fresh start of a config that had served in the search, and the whole study
exited 1, docs/gpu-runs/2026-12-04-h200-levels21). A failed start gets a fresh one; a candidate whose starts all
fail leaves confirmation, on record and among the exclusions; a baseline whose starts all fail stops confirmation
with a clear error and the rounds kept, and the study resumes."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import optuna
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.errors import ConfirmationFailed, ServerDied
from autotune.html import write_html_report
from autotune.records import TrialRecord
from autotune.render import render_report
from autotune.report import build_report
from autotune.seam import VirtualClock
from autotune.sim import ModelRunner, simulated_space
from autotune.space import BudgetSpec, load_space
from autotune.study import Orchestrator, open_study

from .conftest import ScriptedRunner, make_space

ROOT = Path(__file__).resolve().parents[2]


def peak(c) -> float:
    s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
    return 2.0 * math.exp(-0.03 * (s - 5) ** 2 - 0.15 * (math.log2(k) - 2) ** 2 - 0.004 * (n - 14) ** 2)


class CrashLater(ScriptedRunner):
    """The scripted runner, whose servers of the configs in ``doomed`` (config key -> starts left to die, -1:
    every start) die at their second prompt from the moment they are put there (a crash while serving, exit -6)."""

    doomed: dict = None  # type: ignore[assignment]

    def launch(self, config):
        session = super().launch(config)
        left = (self.doomed or {}).get(config.key(), 0)
        if left != 0:
            session.dies_at = 1
            if left is not None and left > 0:
                self.doomed[config.key()] = left - 1
        return session


def _space(n_trials=12, **verdict):
    space = make_space(n_trials=n_trials, drafters=("good",), confirm_top=3, repeats=3, **verdict)
    return dataclasses.replace(space, budget=BudgetSpec(n_trials=n_trials, stop_when_settled=False))


def _searched(tmp_path, seed=4):
    """A searched study with several candidates to confirm (asked with the ``every_candidate`` fixture: every
    candidate the surrogate ranks is confirmed, so that one can leave and others stay)."""
    space = _space()
    url = f"sqlite:///{tmp_path}/s.db"
    runner = CrashLater(speed={"good": peak}, noise=0.02, seed=seed)
    study = open_study(space, url, "t", seed=seed)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(space.budget.n_trials)
    cands = orch.candidates()
    assert len(cands) >= 2, "the landscape should leave several candidates to confirm"
    return space, url, runner, study, orch, cands


def test_a_candidate_whose_server_crashes_on_every_fresh_start_leaves_confirmation_and_is_excluded(
    tmp_path, every_candidate
):
    space, url, runner, study, orch, cands = _searched(tmp_path)
    doomed = cands[0]
    key = TrialRecord(doomed).effective_config().key()
    runner.doomed = {key: -1}  # every start from here on
    before = len(runner.launches)
    state = orch.confirm()
    starts = runner.launches[before:]
    # round 1: the doomed candidate got two starts (the crash, one fresh start), then it was out of the race
    assert sum(1 for c in starts if c.key() == key) == 2
    (failed,) = state.failed or []
    assert failed.trial == doomed.number and failed.kind == "unstable" and failed.round == 1
    assert failed.reason.count("exit -6: Aborted") == 2  # both starts' crash lines
    # both starts held the machine until they died (start-up and the first prompt): billed, as failed starts
    assert len(failed.failed_s) == 2 and all(s > runner.startup_s for s in failed.failed_s)
    assert all(doomed.number not in r.candidates for r in state.rounds)
    assert len(state.rounds) >= space.verdict.repeats  # the others were confirmed
    others = {t.number for t in cands[1:]}
    assert all(others & set(r.candidates) for r in state.rounds)
    assert state.best != doomed.number and state.best in others
    assert {r.trial for r in state.results or []} == others
    rep = build_report(study)
    assert rep.to_json()["gpu_time"]["failed_starts"] == 2 and rep.to_json()["gpu_time"]["failed_s"] == sum(
        failed.failed_s
    )
    measured = sum(len(r.baseline) + len(r.candidates) for r in state.rounds)
    assert rep.to_json()["gpu_time"]["confirmation_starts"] == measured + 2 == len(runner.launches) - before
    (ex,) = [e for e in rep.to_json()["exclusions"] if e["trial"] == doomed.number]
    assert ex["kind"] == "unstable" and "confirmation round 1" in ex["reason"] and ex["config"]
    out = io.StringIO()
    render_report(rep, out)
    lines = out.getvalue().splitlines()
    assert any(ln.startswith(f"excluded trial {doomed.number} ") and "unstable" in ln for ln in lines)
    write_html_report(study, rep, tmp_path / "r.html")
    assert "confirmation round 1" in (tmp_path / "r.html").read_text()
    # resumed (the same candidates): the recorded verdict stands, nothing is launched again
    again = Orchestrator(space, SGLangBackend(), runner, open_study(space, url, "t", seed=4))
    n = len(runner.launches)
    assert again.confirm().failed == state.failed and len(runner.launches) == n


def test_one_crash_gets_a_fresh_start_and_the_candidate_stays(tmp_path, every_candidate):
    space, url, runner, study, orch, cands = _searched(tmp_path)
    key = TrialRecord(cands[0]).effective_config().key()
    runner.doomed = {key: 1}  # its next start dies, the one after serves
    before = len(runner.launches)
    state = orch.confirm()
    assert not state.failed
    assert all(cands[0].number in r.candidates for r in state.rounds[: space.verdict.repeats])
    starts = runner.launches[before:]
    measured = sum(1 for r in state.rounds for _ in r.baseline) + sum(len(r.candidates) for r in state.rounds)
    assert len(starts) == measured + 1  # the one crashed start, measured again on a fresh one
    (lost,) = state.rounds[0].starts.candidates[cands[0].number].failed_s  # billed with the start after it
    assert lost > runner.startup_s
    g = build_report(study).to_json()["gpu_time"]
    assert g["confirmation_starts"] == len(starts) and g["failed_starts"] == 1 and g["failed_s"] == lost


def test_a_baseline_that_crashes_on_every_fresh_start_stops_confirmation_clearly_and_it_resumes(
    tmp_path, every_candidate
):
    space, url, runner, study, orch, cands = _searched(tmp_path)
    base = TrialConfig.baseline(True).key()
    runner.doomed = {base: -1}
    with pytest.raises(ConfirmationFailed) as e:
        orch.confirm()
    msg = str(e.value)
    assert "fresh baseline" in msg and "2 starts" in msg and "run the study again" in msg and "exit -6" in msg
    stored = study.user_attrs.get("confirmation") or {}
    assert not stored.get("done")
    # the two failed starts held the machine (start-up and the first prompt each): on record, and billed
    assert len(stored["lost_s"]) == 2 and all(s > runner.startup_s for s in stored["lost_s"])
    runner.doomed = {}
    state = Orchestrator(space, SGLangBackend(), runner, open_study(space, url, "t", seed=4))
    done = state.confirm()
    assert done.done and done.verdict is not None and not done.failed
    g = build_report(open_study(space, url, "t", seed=4)).to_json()["gpu_time"]
    assert g["failed_starts"] == 2 and g["failed_s"] == pytest.approx(sum(stored["lost_s"]))


class CrashLevelWinner(ModelRunner):
    """The simulator's runner; from ``arm()`` on, every start of one config dies at its second prompt, as a CUDA
    error kills llama-server mid-benchmark."""

    doomed: str | None = None

    def launch(self, config):
        session = super().launch(config)
        if self.doomed is not None and config.key() == self.doomed:
            run = session.run_prompt

            def run_prompt(i, *a, **kw):
                if i == 1:
                    raise ServerDied(
                        "the server exited while serving (code -6)",
                        returncode=-6,
                        log_tail="CUDA error: an illegal instruction was encountered",
                    )
                return run(i, *a, **kw)

            session.run_prompt = run_prompt
        return session


def test_a_load_level_study_whose_leader_crashes_in_confirmation_ends_with_a_verdict(tmp_path):
    """The H200 case on the simulator: load levels, the level phase, then the leader's server crashes on every
    confirmation start: the study still ends with a verdict on the others and per-level verdicts."""
    space = simulated_space(load_space(str(ROOT / "scripts/bench_scenarios/llama-load.space.yaml")))
    backend, clock = SGLangBackend(), VirtualClock()
    runner = CrashLevelWinner(space, backend, clock, seed=1)
    study = open_study(space, f"sqlite:///{tmp_path}/l.db", "l", seed=0, simulated=True)
    orch = Orchestrator(space, backend, runner, study, clock=clock)
    orch.search(space.budget.n_trials)
    cands = orch.candidates()
    leader = max(cands, key=lambda t: float(t.value or 0.0))
    runner.doomed = TrialRecord(leader).effective_config().key()
    state = orch.confirm()
    assert [f.trial for f in state.failed or []] == [leader.number]
    assert state.verdict is not None and state.best != leader.number
    assert state.level_verdicts and all(v.trial != leader.number for v in state.level_verdicts)
    rep = build_report(study)
    assert any(e["trial"] == leader.number and e["kind"] == "unstable" for e in rep.to_json()["exclusions"])
    assert optuna.load_study(study_name="l", storage=f"sqlite:///{tmp_path}/l.db").user_attrs["confirmation"]["done"]

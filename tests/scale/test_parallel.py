"""Parallel workers of one study without a database server: threads on one in-memory storage, one virtual clock
per slot on one timeline (the same orchestration the GPU slots run as processes on PostgreSQL)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import psutil
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from autotune import records
from autotune.backends.sglang import SGLangBackend
from autotune.process.server import PidRecord, reap_leftovers
from autotune.seam import ParallelClocks
from autotune.space import load_space
from autotune.study import storage as st
from tests.cli.helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench_scale  # noqa: E402


def test_parallel_clocks_run_workers_in_virtual_time_order():
    timeline = ParallelClocks(2)
    seen: list[tuple[float, int]] = []

    def worker(i: int, steps: list[float]) -> None:
        timeline.start(i)
        clock = timeline.clock(i)
        for dt in steps:
            seen.append((clock.now(), i))
            clock.advance(dt)
        timeline.done(i)

    threads = [
        threading.Thread(target=worker, args=(0, [5.0, 5.0, 5.0])),
        threading.Thread(target=worker, args=(1, [3.0, 3.0, 3.0, 3.0])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == sorted(seen)  # every step happened in the order of the workers' virtual times
    assert timeline.now() == 15.0


@pytest.mark.parametrize("slots", [3])
def test_parallel_workers_share_the_budget_exactly(slots):
    space = bench_scale.bench_search.load("kimi")  # the field report's space (simulated): two CUDA-graph settings
    # the budget as a quota (no settled-answer stop): what is shared exactly is the whole budget (16 of its 40
    # trials: a few for each worker after the baselines and the server defaults)
    space = dataclasses.replace(space, budget=dataclasses.replace(space.budget, n_trials=16, stop_when_settled=False))
    n = space.budget.n_trials
    study, timeline, runners = bench_scale.parallel_search(space, slots, seed=1, name="par")
    trials = study.get_trials(deepcopy=False)
    assert records.counted_trials(study) == n  # every trial of every worker; exactly the budget
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    baselines = [t for t in trials if records.TrialRecord(t).is_baseline and not records.TrialRecord(t).is_duplicate]
    assert sorted(t.params["cuda_graph"] for t in baselines) == [False, True]  # measured once per setting
    # no server config measured twice by two workers (a duplicate copies the first measurement)
    measured = [records.TrialRecord(t).config_key for t in trials if records.TrialRecord(t).measured]
    assert len(measured) == len(set(measured))
    assert all(r.launches > 0 for r in runners)  # every slot ran servers
    assert len({t.user_attrs.get("claimed") for t in trials if t.state.is_finished()}) == 1
    # the workers overlapped: the wall time is well under the sum of their busy times
    busy = [timeline.clock(i).now() for i in range(slots)]
    assert timeline.now() < 0.6 * sum(busy)


def test_a_lost_trial_is_retried_once_with_only_its_enqueued_attrs():
    study = optuna.create_study(direction="maximize")
    records.enqueue_speculative(study, {"drafter": "d", "cuda_graph": True}, seeded=records.SEEDED_DEFAULT)
    trial = study.ask()
    trial.suggest_categorical("drafter", ["d"])
    trial.suggest_categorical("cuda_graph", [True, False])
    trial.set_user_attr(records.MEASURED, True)
    trial.set_user_attr(records.PROMPTS, [{"x": 1}])
    study.tell(trial, state=TrialState.FAIL)  # what Optuna's heartbeat check does to a lost worker's trial
    lost = study.trials[0]
    assert records.is_lost(lost) and not records.is_counted(lost)
    callback = st.RetryLostTrial(max_retry=1)
    callback(study, lost)
    retry = study.get_trials(states=(TrialState.WAITING,))[0]
    assert retry.params == lost.params
    assert retry.user_attrs == {
        records.ROLE: records.ROLE_SPECULATIVE,
        records.SEEDED: records.SEEDED_DEFAULT,
        records.REQUEUED_FROM: 0,
    }
    # the retry is lost too: not retried again
    t2 = study.ask()
    assert t2.number == retry.number
    study.tell(t2, state=TrialState.FAIL)
    callback(study, study.trials[retry.number])
    assert study.get_trials(states=(TrialState.WAITING,)) == []


def test_a_failure_of_ours_is_not_lost_and_counts():
    study = optuna.create_study()
    t = study.ask()
    t.set_user_attr(records.FAIL_REASON, "exited")
    study.tell(t, state=TrialState.FAIL)
    assert not records.is_lost(study.trials[0]) and records.counted_trials(study) == 1


def test_worker_spec_differences_are_named():
    space = load_space(REPO / "spaces" / "eagle3.yaml")
    import dataclasses

    knobs = dict(space.search.knobs)
    knobs["topk"] = dataclasses.replace(knobs["topk"], values=(1, 2))
    other = dataclasses.replace(space, search=dataclasses.replace(space.search, knobs=knobs))
    diffs = st.spec_differences(st.worker_spec(space), st.worker_spec(other))
    assert diffs == ["search.knobs.topk: the study has [1, 2, 4], this space file has [1, 2]"]
    moved = dataclasses.replace(space, server=dataclasses.replace(space.server, model_path="/elsewhere", port=1))
    assert st.spec_differences(st.worker_spec(space), st.worker_spec(moved)) == []  # paths and ports may differ


def _connection_refused() -> Exception:
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))


def test_storage_retries_connection_errors_with_backoff_then_gives_up():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise optuna.exceptions.StorageInternalError("commit failed") from _connection_refused()
        return "ok"

    assert st._retrying(flaky, what="x", sleep=sleeps.append) == "ok"
    assert sleeps == [0.25, 0.5, 1.0]
    with pytest.raises(ValueError):  # not a connection error: raised at once
        st._retrying(lambda: (_ for _ in ()).throw(ValueError("bad")), what="x", sleep=sleeps.append)

    def down():
        raise _connection_refused()

    with pytest.raises(sqlalchemy.exc.OperationalError):
        st._retrying(down, what="x", limit_s=0.0, sleep=sleeps.append)


def test_the_study_lock_excludes_other_threads():
    study = optuna.create_study()
    inside, overlaps = [], []

    def worker():
        for _ in range(20):
            with st.study_lock(study):
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(1)
                time.sleep(0.001)
                inside.pop()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []


def test_reap_leaves_servers_of_a_live_worker_alone(tmp_path):
    """Two workers on one host share the PID record: a worker starting up stops only what dead workers left."""
    record = tmp_path / "study.pids.json"
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ctime = psutil.Process(server.pid).create_time()
        me = psutil.Process()
        entry = {"pid": server.pid, "create_time": ctime, "argv": server.args, "port": 1}
        PidRecord(record).put({**entry, "orchestrator_pid": os.getpid(), "orchestrator_create_time": me.create_time()})
        assert reap_leftovers(record, term_timeout_s=1.0) == []
        assert server.poll() is None and len(PidRecord(record).read()) == 1
        dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
        dead_owner.wait()
        PidRecord(record).put({**entry, "orchestrator_pid": dead_owner.pid, "orchestrator_create_time": 1.0})
        assert reap_leftovers(record, term_timeout_s=1.0) == [server.pid]
        assert server.wait(timeout=10) is not None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_bench_scale_tiny(tmp_path):
    rc = bench_scale.main(
        ["--seeds", "1", "--slots", "1", "2", "--scenarios", "llama-edge", "--jobs", "1", "--out", str(tmp_path)]
    )
    assert rc == 0
    import json

    data = json.loads((tmp_path / "benchmarks.json").read_text())["scale"]["scenarios"]["llama-edge"]
    assert set(data["slots"]) == {"1", "2"}
    for m in data["slots"].values():
        assert m["budget_exact"] and 0 <= m["hit_rate_2pct"] <= 1 and m["search_median_s"] > 0
    assert data["slots"]["2"]["speedup_vs_1_slot"] > 1  # two slots overlap their trials
    assert "<!-- begin scale -->" in (tmp_path / "benchmarks.md").read_text()
    assert Path(tmp_path / "benchmarks.md").read_text().count("| llama-edge (20 trials) |") == 2


def test_a_worker_goes_on_when_another_fails_its_trial_meanwhile():
    """Late heartbeats (a stalled worker, a database outage): another worker fails the running trial as stale.
    This worker's next write to it is refused; it stops that trial's server and goes on, the budget exact."""
    from autotune.study import Orchestrator, open_study
    from tests.study.conftest import ScriptedRunner, make_space

    space = make_space(n_trials=8)
    study = open_study(space, optuna.storages.InMemoryStorage(), "stale", seed=0)
    runner = ScriptedRunner(speed={"good": lambda c: 1.5, "bad": lambda c: 0.8})
    failed = []
    launch = runner.launch

    def launch_then_fail_it_elsewhere(config):
        session = launch(config)
        if len(runner.launches) == 4:  # as fail_stale_trials in another worker would
            (running,) = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            study._storage.set_trial_state_values(running._trial_id, TrialState.FAIL)
            failed.append((running.number, session))
        return session

    runner.launch = launch_then_fail_it_elsewhere
    Orchestrator(space, SGLangBackend(), runner, study).search(8)
    ((number, session),) = failed
    assert session.closed  # its server was stopped
    assert records.is_lost(study.trials[number])
    assert records.counted_trials(study) == 8


def test_the_surrogate_counts_what_other_workers_measure_now():
    from autotune.records import TrialWriter
    from autotune.study import search
    from autotune.study.context import StudyContext

    space = bench_scale.bench_search.load("llama-edge")
    study, _timeline, runners = bench_scale.parallel_search(
        space, 1, seed=0, name="kb", scenarios=bench_scale.bench_search.scenarios()
    )
    ctx = StudyContext(space, SGLangBackend(), runners[0], study)
    model = search.surrogate(ctx)
    tried = {records.TrialRecord(t).config_key for t in study.trials}
    cfg = next(c for c in ctx.grid if c.key() not in tried)
    _, sd_before = model.predict([cfg])
    trial = study.ask()  # another worker's trial, measuring cfg right now
    TrialWriter(trial).resolved(cfg)
    assert [c.key() for c in search.running_configs(ctx)] == [cfg.key()]
    _, sd_after = search.surrogate(ctx).predict([cfg])
    assert sd_after[0] < 0.5 * sd_before[0]  # no longer unexplored: the next pick goes elsewhere
    assert search.refine_next(ctx).key() != cfg.key()


def test_workers_must_warm_up_alike():
    """A worker whose starts warm up with other passes would measure another server state: refused (a study of a
    server with no passes by default records none, so studies recorded before warm-up passes still match)."""
    import dataclasses

    space = load_space(REPO / "spaces" / "eagle3.yaml")  # SGLang: no passes by default
    assert "warmup_passes" not in st.worker_spec(space)
    one = dataclasses.replace(space, benchmark=dataclasses.replace(space.benchmark, warmup_passes=1))
    assert st.spec_differences(st.worker_spec(space), st.worker_spec(one)) == [
        "warmup_passes: the study has null, this space file has 1"
    ]
    llama = load_space(REPO / "spaces" / "llamacpp-tiny.yaml")  # llama.cpp: one pass by default
    assert st.worker_spec(llama)["warmup_passes"] == 1

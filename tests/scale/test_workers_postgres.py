"""Parallel workers on a real PostgreSQL (started by .ci/run or scripts/start_postgres.sh): GPU slots as worker
processes of real simulator servers, one SIGKILLed mid-trial; a worker with another space refused; storage calls
riding out a database restart."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from optuna.trial import TrialState

from autotune import records

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres
N_PROMPTS = len(yaml.safe_load((REPO / "spaces" / "eagle3.yaml").read_text())["benchmark"]["prompts"])


@pytest.fixture
def pg_url():
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL is not set (scripts/start_postgres.sh prints one)")
    return url


@pytest.fixture
def rdb():
    """Wraps the storages a test makes, so that their connections are closed even when an assertion fails (an
    open psycopg connection collected later is a warning, which this suite turns into an error, in another test)."""
    made = []

    def keep(storage):
        made.append(storage)
        return storage

    yield keep
    for storage in made:
        storage.engine.dispose()


def _free_port_block(n: int = 40) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n < 65000 and all(_free(base + i) for i in range(0, n, 10)):
            return base
    raise RuntimeError("no free port block")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _space(tmp_path: Path, name: str, file: str = "space.yaml", **replace: str) -> Path:
    text = (REPO / "spaces" / "eagle3.yaml").read_text()
    text = text.replace("name: kimi-k25-eagle3", f"name: {name}", 1)
    text = text.replace("port: 30000", f"port: {_free_port_block()}", 1)
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new, 1)
    p = tmp_path / file
    p.write_text(text)
    return p


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "autotune", *args]


def _sim_servers_of(pids: set[int]) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.info["pid"] in pids and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _mid_measurement(t: optuna.trial.FrozenTrial) -> bool:
    """A speculative trial whose server is up and measuring (warming up or running its prompts, not all recorded).
    Warm-up counts too: requiring a recorded prompt narrowed the window so much that on a CI machine running
    tests side by side no trial of the 10 was caught."""
    r = records.TrialRecord(t)
    done = len(r.attrs.get(records.PROMPTS) or [])
    return not r.is_baseline and r.measured and done < N_PROMPTS


def _reap(proc: subprocess.Popen) -> None:
    """Kill the study this test started if it is still running (a failed assertion left it), and collect it."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.mark.slow
def test_three_slots_one_worker_sigkilled_mid_trial(pg_url, tmp_path, rdb):
    name = f"scale-{uuid.uuid4().hex[:8]}"
    # a slower simulated clock than the quick start's, so that a trial spends long enough measuring to be caught
    space = _space(tmp_path, name, **{"time_scale: 200": "time_scale: 60"})
    n_trials = 10
    argv = _cli(
        "study", str(space), "--simulate", "--storage", pg_url, "--gpus", "0-7", "--gpus", "8-15", "--gpus", "16-23",
        "--n-trials", str(n_trials), "--no-confirm", "--heartbeat-s", "1", "--json", "--skip-validation",
        "--studies-dir", str(tmp_path / "studies"),
    )  # fmt: skip
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    storage = rdb(optuna.storages.RDBStorage(pg_url))
    killed_worker = None
    orphans: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while killed_worker is None and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.1)
            try:
                study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
            except KeyError:
                continue
            for t in study.get_trials(states=(TrialState.RUNNING,)):
                if not _mid_measurement(t):
                    continue
                pid = int(str(t.user_attrs[records.WORKER]).rsplit(":", 1)[1])
                worker = psutil.Process(pid)
                # Frozen first, so that it cannot stop its server between our look and the kill; then the trial
                # must still be mid-measurement and its server still up after a pause (a server being stopped
                # by a prune or the last prompt would be gone by then).
                worker.send_signal(signal.SIGSTOP)
                time.sleep(0.5)
                now = storage.get_trial(t._trial_id)
                orphans = {c.pid for c in worker.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE}
                if now.state != TrialState.RUNNING or not _mid_measurement(now) or not orphans:
                    worker.send_signal(signal.SIGCONT)  # between prompts' records or stopping its server: another
                    orphans = set()
                    continue
                worker.send_signal(signal.SIGKILL)
                killed_worker = str(t.user_attrs[records.WORKER])
                break
        assert killed_worker is not None, "no speculative trial was caught mid-measurement"
        out, err = parent.communicate(timeout=600)
    finally:
        _reap(parent)
    assert parent.returncode == 0, err
    assert "slot" in err and "exited with code -9" in err  # the parent names the lost worker

    study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
    trials = study.get_trials()
    # the budget is exact: every trial of every worker, the lost one not counted, its retry counted
    assert records.counted_trials(study) == n_trials
    (lost,) = [t for t in trials if t.user_attrs.get(records.WORKER) == killed_worker and records.is_lost(t)]
    assert lost.state == TrialState.FAIL and records.TrialRecord(lost).measured  # killed while measuring
    retries = [t for t in trials if t.user_attrs.get(records.REQUEUED_FROM) == lost.number]
    assert len(retries) == 1 and retries[0].state.is_finished() and retries[0].params == lost.params
    assert retries[0].user_attrs.get(records.WORKER) != lost.user_attrs[records.WORKER]
    # one measured baseline per CUDA-graph setting, measured once for the whole study
    measured_baselines = [
        t
        for t in trials
        if records.TrialRecord(t).is_baseline
        and t.state == TrialState.COMPLETE
        and not records.TrialRecord(t).is_duplicate
    ]
    assert sorted(t.params["cuda_graph"] for t in measured_baselines) == [False, True]
    assert len({t.user_attrs[records.WORKER] for t in trials if t.state.is_finished()}) == 3
    assert not [t for t in trials if t.state in (TrialState.RUNNING,)]
    # the lost worker's simulator server was stopped (by its PID record), and nothing else of ours runs
    assert _sim_servers_of(orphans) == []
    assert "left by an earlier run" in err
    optuna.delete_study(study_name=f"{name}-sim", storage=storage)
    storage.engine.dispose()


def test_a_worker_with_another_space_is_refused_naming_the_difference(pg_url, tmp_path, rdb):
    name = f"scale-{uuid.uuid4().hex[:8]}"
    space = _space(tmp_path, name)
    first = subprocess.run(
        _cli("study", str(space), "--simulate", "--in-process", "--storage", pg_url, "--n-trials", "3",
             "--no-confirm", "--json", "--studies-dir", str(tmp_path / "studies")),
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    other = _space(tmp_path, name, "other.yaml", **{"num_steps: {low: 1, high: 6}": "num_steps: {low: 1, high: 5}"})
    r = subprocess.run(
        _cli("worker", str(other), "--simulate", "--in-process", "--storage", pg_url,
             "--studies-dir", str(tmp_path / "studies")),
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "search.knobs.num_steps: the study has 1-6, this space file has 1-5" in line, r.stderr
    assert "Traceback" not in r.stderr
    # the same space file joins, runs what is left of the study's budget (none) and exits 0
    ok = subprocess.run(
        _cli("worker", str(space), "--simulate", "--in-process", "--storage", pg_url,
             "--studies-dir", str(tmp_path / "studies")),
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "3 of 3 trials" in ok.stderr
    storage = rdb(optuna.storages.RDBStorage(pg_url))
    optuna.delete_study(study_name=f"{name}-sim", storage=storage)
    storage.engine.dispose()


def test_a_worker_needs_an_existing_study(pg_url, tmp_path):
    space = _space(tmp_path, f"scale-{uuid.uuid4().hex[:8]}")
    r = subprocess.run(
        _cli("worker", str(space), "--simulate", "--in-process", "--storage", pg_url,
             "--studies-dir", str(tmp_path / "studies")),
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "no study named" in r.stderr and "Traceback" not in r.stderr


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


class PrivatePostgres:
    """A PostgreSQL server of the test's own (scripts/start_postgres.sh), to stop and start under a study."""

    def __init__(self) -> None:
        bindir = _pg_bin()
        if bindir is None or (shutil.which("runuser") is None and os.getuid() == 0):
            pytest.skip("PostgreSQL's binaries are not installed (scripts/start_postgres.sh installs them)")
        # outside pytest's private tmp folder: the server runs as the postgres user when we are root
        self.datadir = Path(os.environ.get("TMPDIR", "/tmp")) / f"autotune-pg-restart-{uuid.uuid4().hex[:8]}"
        self.port = _free_port_block(1)
        self.url = subprocess.run(
            [str(REPO / "scripts" / "start_postgres.sh"), str(self.datadir), str(self.port)],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout.strip().splitlines()[-1]  # fmt: skip
        as_owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        self.pg_ctl = [*as_owner, str(bindir / "pg_ctl"), "-D", str(self.datadir)]

    def stop(self) -> None:
        subprocess.run([*self.pg_ctl, "-m", "fast", "stop"], check=True, capture_output=True, timeout=60)

    def start_later(self, delay_s: float) -> subprocess.Popen:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.datadir}"
        return subprocess.Popen(
            ["sh", "-c", f"sleep {delay_s} && exec {' '.join(self.pg_ctl)} -l {self.datadir}/server.log -w -t 60 "
             f"-o '{opts}' start"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def close(self) -> None:
        subprocess.run([*self.pg_ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.datadir, ignore_errors=True)


@pytest.fixture
def private_pg():
    pg = PrivatePostgres()
    try:
        yield pg
    finally:
        pg.close()


@pytest.mark.slow
def test_storage_calls_ride_out_a_database_restart(private_pg, rdb):
    """Stopped and started again under a storage in use: calls made while it is down wait (backoff) and then
    succeed instead of failing the worker."""
    from autotune.study.storage import make_storage

    url = private_pg.url
    storage = rdb(make_storage(url, heartbeat_s=1))
    study = optuna.create_study(study_name="restart", storage=storage, direction="maximize")
    study.set_user_attr("before", 1)
    private_pg.stop()
    restart = private_pg.start_later(2)  # back while the next call is already waiting for it
    t0 = time.monotonic()
    study.set_user_attr("after", 2)  # the server is down: retried with backoff until it is back
    waited = time.monotonic() - t0
    assert restart.wait(timeout=60) == 0
    assert waited >= 1.0  # it did wait for the restart rather than succeed on a stale connection
    fresh = rdb(make_storage(url))
    again = optuna.load_study(study_name="restart", storage=fresh)
    assert again.user_attrs == {"before": 1, "after": 2}
    again.optimize(lambda t: 1.0, n_trials=1)
    assert again.trials[0].value == 1.0
    storage.engine.dispose()
    fresh.engine.dispose()


@pytest.mark.slow
def test_a_study_with_two_slots_rides_out_a_database_restart(private_pg, tmp_path, rdb):
    """The database restarted in the middle of a two-slot study: the workers wait for it and the study
    completes its budget exactly."""
    name = f"scale-{uuid.uuid4().hex[:8]}"
    space = _space(tmp_path, name)
    argv = _cli(
        "study", str(space), "--simulate", "--in-process", "--storage", private_pg.url, "--gpus", "0-7",
        "--gpus", "8-15", "--n-trials", "16", "--no-confirm", "--heartbeat-s", "10", "--json", "--skip-validation",
        "--studies-dir", str(tmp_path / "studies"),
    )  # fmt: skip
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    storage = rdb(optuna.storages.RDBStorage(private_pg.url))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and parent.poll() is None:
            try:
                if records.counted_trials(optuna.load_study(study_name=f"{name}-sim", storage=storage)) >= 4:
                    break
            except KeyError:
                pass
            time.sleep(0.1)
        storage.engine.dispose()
        assert parent.poll() is None, "the study ended before the restart"
        private_pg.stop()
        restart = private_pg.start_later(3)
        assert restart.wait(timeout=60) == 0
        out, err = parent.communicate(timeout=600)
    finally:
        _reap(parent)
    assert parent.returncode == 0, err
    logs = "".join(p.read_text() for p in (tmp_path / "studies").rglob("worker.log"))
    assert "retrying in" in logs  # the workers did meet the outage
    study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
    assert records.counted_trials(study) == 16
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    storage.engine.dispose()


def _llama_space(tmp_path: Path, name: str) -> Path:
    text = (REPO / "spaces" / "llama-8b-eagle3.yaml").read_text()
    text = text.replace("name: llama31-8b-eagle3", f"name: {name}", 1).replace(
        "port: 30000", f"port: {_free_port_block()}"
    )
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def test_two_slots_give_the_budget_exactly_and_the_verdict_of_one(pg_url, tmp_path, rdb):
    import json

    name = f"scale-{uuid.uuid4().hex[:8]}"
    space = _llama_space(tmp_path, name)
    common = ["--simulate", "--in-process", "--n-trials", "12", "--json", "--skip-validation"]
    two = subprocess.run(
        _cli("study", str(space), *common, "--storage", pg_url, "--gpus", "0", "--gpus", "1",
             "--studies-dir", str(tmp_path / "two")),
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr
    one = subprocess.run(
        _cli("study", str(space), *common, "--studies-dir", str(tmp_path / "one")),
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    r2, r1 = json.loads(two.stdout), json.loads(one.stdout)
    assert r2["verdict"] == r1["verdict"] == "speculation-wins"
    storage = rdb(optuna.storages.RDBStorage(pg_url))
    study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
    assert records.counted_trials(study) == 12
    assert len({t.user_attrs[records.WORKER] for t in study.trials}) == 2
    assert records.confirmation(study).done  # confirmed once, by the study command
    optuna.delete_study(study_name=f"{name}-sim", storage=storage)
    storage.engine.dispose()


def test_the_study_lock_spans_processes_and_dies_with_its_holder(pg_url, rdb):
    """Held by another process, the lock waits; that process SIGKILLed while holding it, the lock is free."""
    from autotune.study.storage import make_storage, study_lock

    name = f"lock-{uuid.uuid4().hex[:8]}"
    storage = rdb(make_storage(pg_url))
    study = optuna.create_study(study_name=name, storage=storage)
    holder_code = f"""
import sys, time, optuna
from autotune.study.storage import make_storage, study_lock
study = optuna.load_study(study_name={name!r}, storage=make_storage({pg_url!r}))
with study_lock(study):
    print("held", flush=True)
    time.sleep(600)
"""
    holder = subprocess.Popen([sys.executable, "-c", holder_code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        got = []

        def take():
            with study_lock(study):
                got.append(time.monotonic())

        import threading

        waiter = threading.Thread(target=take)
        waiter.start()
        time.sleep(1.0)
        assert got == []  # the other process holds it
        killed_at = time.monotonic()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        waiter.join(timeout=30)
        assert got and got[0] - killed_at < 10  # released with the dead holder's connection
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
    optuna.delete_study(study_name=name, storage=storage)
    storage.engine.dispose()


@pytest.mark.slow
def test_sigterm_to_the_study_stops_every_worker_and_server(pg_url, tmp_path, rdb):
    name = f"scale-{uuid.uuid4().hex[:8]}"
    space = _space(tmp_path, name)
    argv = _cli(
        "study", str(space), "--simulate", "--storage", pg_url, "--gpus", "0-7", "--gpus", "8-15",
        "--n-trials", "20", "--no-confirm", "--json", "--skip-validation", "--studies-dir", str(tmp_path / "studies"),
    )  # fmt: skip
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        tree: set[int] = set()
        while time.monotonic() < deadline and parent.poll() is None:
            kids = psutil.Process(parent.pid).children(recursive=True)
            if len(kids) >= 4:  # two workers, each with its simulator server up
                tree = {k.pid for k in kids}
                break
            time.sleep(0.1)
        assert tree, "the workers' servers never came up"
        parent.send_signal(signal.SIGTERM)
        _out, err = parent.communicate(timeout=200)
    finally:
        _reap(parent)
    assert parent.returncode == 130, err
    assert "interrupted" in err
    deadline = time.monotonic() + 10
    while _sim_servers_of(tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sim_servers_of(tree) == []  # every worker and every server it started: stopped
    storage = rdb(optuna.storages.RDBStorage(pg_url))
    study = optuna.load_study(study_name=f"{name}-sim", storage=storage)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]  # settled as interrupted
    optuna.delete_study(study_name=f"{name}-sim", storage=storage)
    storage.engine.dispose()

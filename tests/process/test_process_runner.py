"""ProcessRunner against real child processes (tests/process/fake_server.py) and real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.errors import PortInUse, ServerDied, ServerExited, ServerOOM, StartupTimeout
from autotune.process import ProcessRunner, reap_leftovers
from autotune.process.server import PidRecord, log_tail, port_listening

from .conftest import FAKE_SERVER, fake_space, free_port

SPEC = TrialConfig.make("d", True, num_steps=3, topk=1, num_draft_tokens=4)


def make_runner(space, tmp_path: Path, **kw) -> ProcessRunner:
    runner = ProcessRunner(
        space, SGLangBackend(), log_dir=tmp_path / "logs", record_path=tmp_path / "study.pids.json", **kw
    )
    runner.term_timeout_s = 1.0
    runner.kill_timeout_s = 5.0
    return runner


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class ForeignListener:
    """A listener autotune did not start (a socket in this test process)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)

    def close(self) -> None:
        self.sock.close()


def test_healthy_launch_measure_close(tmp_path):
    space = fake_space("healthy", delay=0.3)
    runner = make_runner(space, tmp_path)
    session = runner.launch(SPEC)
    try:
        assert session.info.pid and session.info.log_path
        assert session.info.startup_s >= 0.25
        assert session.info.effective["speculative_algorithm"] == "EAGLE3"
        assert session.info.effective["num_draft_tokens"] == 4
        assert session.info.effective["cuda_graph"] is True
        records = PidRecord(tmp_path / "study.pids.json").read()
        assert [r["pid"] for r in records] == [session.info.pid]
        assert records[0]["argv"] == session.info.argv
        session.warmup()
        r = session.run_prompt(1)
        assert r.index == 1 and r.completion_tokens == 8 and r.accept_length == 2.5
        assert r.text == "".join(f"w{i} " for i in range(8))
        assert r.finish_reason == "length" and r.seconds > 0 and r.ttft_s is not None
    finally:
        session.close()
    assert session.server.returncode is not None and session.server.port_freed
    assert gone(session.info.pid)
    assert PidRecord(tmp_path / "study.pids.json").read() == []
    session.close()  # idempotent


def test_time_scale_converts_to_hardware_seconds(tmp_path):
    space = fake_space("healthy", delay=0.0, startup_timeout_s=500.0)
    runner = make_runner(space, tmp_path, time_scale=50.0, simulated=True)
    with runner.launch(SPEC) as session:
        r = session.run_prompt(0)
    assert r.seconds >= 50 * 0.02  # three chunks 10 ms apart, scaled


def test_exit_during_startup_with_oom(tmp_path):
    runner = make_runner(fake_space("oom", delay=0.1), tmp_path)
    with pytest.raises(ServerOOM) as ei:
        runner.launch(SPEC)
    assert ei.value.returncode == 1
    assert "CUDA out of memory" in ei.value.log_tail
    assert PidRecord(tmp_path / "study.pids.json").read() == []


def test_exit_during_startup_plain(tmp_path):
    runner = make_runner(fake_space("crash", delay=0.1), tmp_path)
    with pytest.raises(ServerExited) as ei:
        runner.launch(SPEC)
    assert not isinstance(ei.value, ServerOOM)
    assert ei.value.returncode == 3 and "something else broke" in ei.value.log_tail


def test_startup_timeout_stops_server(tmp_path):
    space = fake_space("never", startup_timeout_s=1.0)
    runner = make_runner(space, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout) as ei:
        runner.launch(SPEC)
    assert time.monotonic() - t0 < 30  # the limit applied (a server that never gets ready would hang the test)
    assert "fake server starting" in ei.value.log_tail
    assert not port_listening("127.0.0.1", space.server.port)


def test_startup_timeout_is_divided_by_time_scale(tmp_path):
    space = fake_space("never", startup_timeout_s=50.0)
    runner = make_runner(space, tmp_path, time_scale=50.0, simulated=True)
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout):
        runner.launch(SPEC)
    assert time.monotonic() - t0 < 25  # 50 s / 50, far below the unscaled 50 s even on a loaded machine


def test_sigterm_ignored_gets_sigkill(tmp_path):
    runner = make_runner(fake_space("ignore-term"), tmp_path)
    session = runner.launch(SPEC)
    pid = session.info.pid
    session.close()
    assert gone(pid)
    assert session.server.returncode == -signal.SIGKILL


def test_whole_tree_stopped(tmp_path):
    children_file = tmp_path / "children.txt"
    runner = make_runner(fake_space("spawn-child", env={"FAKE_CHILDREN": str(children_file)}), tmp_path)
    session = runner.launch(SPEC)
    pids = [int(x) for x in children_file.read_text().split()]
    assert len(pids) == 2 and all(not gone(p) for p in pids)
    record = PidRecord(tmp_path / "study.pids.json").read()
    assert {c["pid"] for c in record[0]["children"]} >= set(pids)
    session.close()
    deadline = time.monotonic() + 5
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(p) for p in pids)


def test_server_dies_during_measurement(tmp_path):
    runner = make_runner(fake_space("die-on-generate"), tmp_path)
    with runner.launch(SPEC) as session, pytest.raises(ServerDied) as ei:
        session.run_prompt(0)
    assert ei.value.returncode == 5


def test_keyboard_interrupt_during_launch_stops_server(tmp_path):
    space = fake_space("never", startup_timeout_s=30.0)
    runner = make_runner(space, tmp_path)

    class InterruptingClock:
        def __init__(self):
            self.calls = 0

        def now(self):
            return time.monotonic()

        def sleep(self, s):
            self.calls += 1
            if self.calls > 3:
                raise KeyboardInterrupt
            time.sleep(s)

    runner.clock = InterruptingClock()
    with pytest.raises(KeyboardInterrupt):
        runner.launch(SPEC)
    assert PidRecord(tmp_path / "study.pids.json").read() == []
    # the autouse fixture asserts the child is gone


def test_keyboard_interrupt_during_measurement_stops_server(tmp_path):
    runner = make_runner(fake_space("healthy", delay=0.0), tmp_path)
    session = runner.launch(SPEC)

    class InterruptMidStream:
        def __init__(self):
            self.calls = 0

        def now(self):
            self.calls += 1
            if self.calls == 3:  # after the request is sent, while chunks arrive
                raise KeyboardInterrupt
            return time.monotonic()

        def sleep(self, s):
            time.sleep(s)

    session.client.clock = InterruptMidStream()
    with pytest.raises(KeyboardInterrupt):
        session.run_prompt(0)
    assert session.closed and gone(session.info.pid)
    assert PidRecord(tmp_path / "study.pids.json").read() == []


def test_runner_reap_leftovers_method(tmp_path):
    runner = make_runner(fake_space(), tmp_path)
    assert runner.reap_leftovers() == []
    assert ProcessRunner(fake_space(), SGLangBackend(), log_dir=tmp_path).reap_leftovers() == []


def test_port_busy_fail_names_owner_and_never_kills(tmp_path):
    port = free_port()
    foreign = ForeignListener(port)
    try:
        runner = make_runner(fake_space(port=port, port_busy="fail"), tmp_path)
        with pytest.raises(PortInUse) as ei:
            runner.launch(SPEC)
        assert str(port) in str(ei.value)
        assert f"pid {os.getpid()}" in str(ei.value)
        assert port_listening("127.0.0.1", port)  # still there
    finally:
        foreign.close()


def test_port_busy_next_picks_another_port(tmp_path):
    port = free_port()
    foreign = ForeignListener(port)
    try:
        runner = make_runner(fake_space(port=port, port_busy="next"), tmp_path)
        with runner.launch(SPEC) as session:
            assert session.port != port
            assert session.info.argv[session.info.argv.index("--port") + 1] == str(session.port)
            assert session.run_prompt(0).completion_tokens == 8
        assert port_listening("127.0.0.1", port)
    finally:
        foreign.close()


def test_port_busy_wait_times_out_then_succeeds(tmp_path):
    port = free_port()
    foreign = ForeignListener(port)
    try:
        runner = make_runner(fake_space(port=port, port_busy="wait", port_wait_s=0.6), tmp_path)
        t0 = time.monotonic()
        with pytest.raises(PortInUse):
            runner.launch(SPEC)
        assert 0.5 <= time.monotonic() - t0 < 5
        assert port_listening("127.0.0.1", port)
    finally:
        foreign.close()
    runner = make_runner(fake_space(port=port, port_busy="wait", port_wait_s=5), tmp_path)
    with runner.launch(SPEC) as session:
        assert session.port == port


def test_shell_syntax_arrives_literally(tmp_path):
    dump = tmp_path / "argv.json"
    nasty = "$(touch pwned); echo hi `id` > x | y && z"
    space = fake_space(
        env={"FAKE_DUMP": str(dump)}, extra_args=("--served-model-name", nasty), model_path=f"/models/{nasty}"
    )
    runner = make_runner(space, tmp_path)
    with runner.launch(SPEC):
        pass
    argv = json.loads(dump.read_text())
    assert argv[argv.index("--served-model-name") + 1] == nasty
    assert argv[argv.index("--model-path") + 1] == f"/models/{nasty}"
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_probe_help_when_version_unknown(tmp_path):
    runner = make_runner(fake_space(version=None), tmp_path)
    with runner.launch(TrialConfig.make("d", False, num_steps=3, topk=1, num_draft_tokens=4)) as session:
        assert "--disable-cuda-graph" in session.info.argv
        assert session.info.effective["cuda_graph"] is False
    assert runner.backend.cuda_graph_spelling == "legacy"


def test_reap_leftovers_after_orchestrator_sigkill(tmp_path):
    record = tmp_path / "study.pids.json"
    port = free_port()
    children_file = tmp_path / "children.txt"
    orchestrator = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from pathlib import Path
from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from tests.process.conftest import fake_space
from autotune.process import ProcessRunner
space = fake_space("spawn-child", port={port}, env={{"FAKE_CHILDREN": {str(children_file)!r}}})
logs = Path({str(tmp_path)!r}) / "logs"
runner = ProcessRunner(space, SGLangBackend(), log_dir=logs, record_path=Path({str(record)!r}))
session = runner.launch(TrialConfig.make("d", True, num_steps=3, topk=1, num_draft_tokens=4))
print("up", flush=True)
time.sleep(600)
"""
    orch = subprocess.Popen([sys.executable, "-c", orchestrator], stdout=subprocess.PIPE, text=True)
    try:
        assert orch.stdout.readline().strip() == "up"
    finally:
        orch.kill()
        orch.wait()
        orch.stdout.close()
    entries = PidRecord(record).read()
    assert len(entries) == 1
    server_pid = entries[0]["pid"]
    pids = [server_pid, *(int(x) for x in children_file.read_text().split())]
    assert all(not gone(p) for p in pids)  # orphaned, still running
    # a record entry whose pid now belongs to someone else is never touched
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        rec = PidRecord(record)
        rec.put({"pid": bystander.pid, "create_time": 12345.0, "argv": ["x"], "port": 1})
        stopped = reap_leftovers(record, term_timeout_s=1.0)
        assert set(stopped) == set(pids)
        deadline = time.monotonic() + 5
        while not all(gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(gone(p) for p in pids)
        assert bystander.poll() is None
        assert PidRecord(record).read() == []
        assert not port_listening("127.0.0.1", port)
    finally:
        bystander.kill()
        bystander.wait()
    assert reap_leftovers(record) == []


def test_log_tail(tmp_path):
    p = tmp_path / "x.log"
    p.write_text("\n".join(f"line {i}" for i in range(100)))
    assert log_tail(p, lines=3) == "line 97\nline 98\nline 99"
    assert log_tail(tmp_path / "missing.log") == ""
    assert FAKE_SERVER.exists()


class RecordingClock:
    """The real monotonic clock, noting every sleep it is asked for."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        time.sleep(seconds)


def test_health_is_polled_at_a_fixed_short_interval(tmp_path):
    """startup_s is the server's start-up time within one poll interval: the poll never backs off (a back-off to
    1 s reported 2.5-4.5 s for servers that were up in 2.0-2.9 s)."""
    space = fake_space("healthy", delay=1.5)
    clock = RecordingClock()
    runner = make_runner(space, tmp_path, clock=clock)
    session = runner.launch(SPEC)
    try:
        polls = [s for s in clock.sleeps if s > 0]
        assert len(polls) >= 10  # 1.5 s of 503 answers at 50 ms
        assert max(polls) <= ProcessRunner.poll_interval_s <= 0.1
        assert session.info.startup_s >= 1.5
    finally:
        session.close()

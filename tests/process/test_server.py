"""ServerProcess on its own: start, readiness wait, stop of exactly what it started (real child processes)."""

from __future__ import annotations

import signal
import sys

import httpx
import pytest

from autotune.errors import ServerExited, ServerOOM
from autotune.process.server import PidRecord, ServerProcess, port_listening

from .conftest import FAKE_SERVER, free_port


def fake(tmp_path, mode: str, *, delay: float = 0.2, **kw) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, str(FAKE_SERVER), "--mode", mode, "--delay", str(delay), "--port", str(port)]
    kw.setdefault("term_timeout_s", 1.0)
    return ServerProcess(argv, log_path=tmp_path / "logs" / "server.log", host="127.0.0.1", port=port, **kw)


def health_200(server: ServerProcess):
    def check(limit_s: float) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=limit_s).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def test_start_ready_stop_and_the_record(tmp_path):
    record = PidRecord(tmp_path / "pids.json")
    server = fake(tmp_path, "healthy", record=record).start()
    try:
        assert server.pid is not None and server.popen is not None and server.popen.poll() is None
        assert [e["pid"] for e in record.read()] == [server.pid]
        assert record.read()[0]["log_path"] == str(server.log_path)
        assert server.wait_ready(health_200(server), timeout_s=10.0, poll_interval_s=0.05)
        assert server.log_path.read_text().startswith("# autotune: [")
    finally:
        rc = server.stop()
    assert rc == server.returncode == -signal.SIGTERM
    assert server.port_freed and not port_listening("127.0.0.1", server.port)
    assert record.read() == []
    assert server.stop() == rc  # idempotent


def test_not_ready_in_time_is_false_and_stop_escalates_to_kill(tmp_path):
    server = fake(tmp_path, "ignore-term").start()
    try:
        assert not server.wait_ready(lambda _limit: False, timeout_s=0.3, poll_interval_s=0.05)
    finally:
        server.stop()
    assert server.returncode == -signal.SIGKILL


@pytest.mark.parametrize(("mode", "error", "rc"), [("crash", ServerExited, 3), ("oom", ServerOOM, 1)])
def test_exit_while_waiting_raises_with_the_log(tmp_path, mode, error, rc):
    server = fake(tmp_path, mode, delay=0.0).start()
    try:
        with pytest.raises(error) as ei:
            server.wait_ready(lambda _limit: False, timeout_s=30.0, poll_interval_s=0.05)
        assert ei.value.returncode == rc and ei.value.log_path == str(server.log_path)
        assert "fake server starting" in ei.value.log_tail
    finally:
        server.stop()
    assert server.returncode == rc


def test_not_started(tmp_path):
    server = ServerProcess(["x"], log_path=tmp_path / "x.log", host="127.0.0.1", port=1)
    assert server.stop() is None  # never started: nothing to stop
    with pytest.raises(RuntimeError, match="not started"):
        server.wait_ready(lambda _limit: True, timeout_s=1.0, poll_interval_s=0.05)


def test_a_ctrl_c_during_the_spawn_waits_until_the_server_is_ours_to_stop(tmp_path, monkeypatch):
    """A real SIGINT delivered inside ``subprocess.Popen`` after the fork (the CLI's handler installed): without the
    hold it raises there, the Popen object is lost and the child outlives us holding its port (a reverify interrupted
    as its next server started left one). With it, start() raises KeyboardInterrupt once the child is assigned, and
    that child is stopped."""
    import os
    import subprocess

    import psutil

    from autotune import cli
    from autotune.process import server as server_mod

    spawned: list[int] = []
    real = subprocess.Popen

    class Interrupted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            spawned.append(self.pid)
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs before this constructor returns

    monkeypatch.setattr(server_mod.subprocess, "Popen", Interrupted)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        cli._interrupt_on_termination()
        server = fake(tmp_path, "ok", delay=0.0)
        with pytest.raises(KeyboardInterrupt):
            server.start()
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert len(spawned) == 1 and server.popen is not None and server.popen.pid == spawned[0]
    assert not psutil.pid_exists(spawned[0]) or psutil.Process(spawned[0]).status() == psutil.STATUS_ZOMBIE
    # outside a spawn the handler raises at once, as before
    with server_mod.uninterrupted():
        pass
    assert server_mod.hold_signal(signal.SIGINT) is False

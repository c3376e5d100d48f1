"""Port probing and the port a launch gets (a listener in this process; a virtual clock, so no real waiting)."""

from __future__ import annotations

import socket

import pytest

from autotune.errors import PortInUse
from autotune.process.server import accepts_connections, choose_port, connect_host, url_host, wait_port_free
from autotune.seam import VirtualClock

from .conftest import free_port


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize(
    ("host", "connect", "url"),
    [("0.0.0.0", "127.0.0.1", "127.0.0.1"), ("", "127.0.0.1", "127.0.0.1"), ("::", "::1", "[::1]"), ("h", "h", "h")],
)
def test_wildcard_hosts(host, connect, url):
    assert connect_host(host) == connect and url_host(host) == url


def test_probes(listener):
    assert accepts_connections("127.0.0.1", listener) and accepts_connections("0.0.0.0", listener)
    assert not accepts_connections("127.0.0.1", free_port())


def test_choose_port(listener):
    clock = VirtualClock()
    free = free_port()
    assert choose_port("127.0.0.1", free, busy="fail", wait_s=0, tries=5, clock=clock) == free
    with pytest.raises(PortInUse, match=f"port {listener} on 127.0.0.1 is in use by pid"):
        choose_port("127.0.0.1", listener, busy="fail", wait_s=0, tries=5, clock=clock)
    with pytest.raises(PortInUse, match="still in use .* after 3 s"):
        choose_port("127.0.0.1", listener, busy="wait", wait_s=3.0, tries=5, clock=clock)
    assert clock.now() >= 3.0
    assert choose_port("127.0.0.1", listener, busy="next", wait_s=0, tries=100, clock=clock) > listener


def test_wait_port_free(listener):
    clock = VirtualClock()
    assert not wait_port_free("127.0.0.1", listener, timeout_s=1.0, clock=clock)
    assert wait_port_free("127.0.0.1", free_port(), timeout_s=1.0, clock=clock)


def test_the_server_process_owns_both_port_checks(listener):
    from autotune.process.server import ServerProcess
    from autotune.space import ServerSpec

    busy = ServerSpec(model_path="/m", host="127.0.0.1", port=listener)
    with pytest.raises(
        PortInUse, match=rf"port {listener} on 127.0.0.1 is already in use by another process .* in s.yaml$"
    ):
        ServerProcess.preflight(busy, "s.yaml")
    ServerProcess.preflight(ServerSpec(model_path="/m", host="127.0.0.1", port=listener, port_busy="next"), "s.yaml")
    ServerProcess.preflight(ServerSpec(model_path="/m", host="127.0.0.1", port=free_port()), "s.yaml")
    with pytest.raises(PortInUse, match=f"port {listener} on 127.0.0.1 is in use by pid"):
        ServerProcess.claim_port(busy, tries=5, clock=VirtualClock())
    nxt = ServerSpec(model_path="/m", host="127.0.0.1", port=listener, port_busy="next")
    assert ServerProcess.claim_port(nxt, tries=100, clock=VirtualClock()) > listener

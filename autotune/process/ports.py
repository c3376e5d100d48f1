"""Ports: is something listening (and who), may we bind, which port a launch gets, waiting for one to be free.

``accepts_connections`` is the one connect probe: both port checks (``ServerProcess.claim_port`` through
``port_listening``, and ``ServerProcess.preflight``) use it. ``port_listening`` adds psutil's view of listeners on
the port (one bound to another address, or one that does not accept). Every probe and every wait has a limit; waits
run on the injected clock.
"""

from __future__ import annotations

import socket
from typing import Any

import psutil

from autotune.clock import Clock
from autotune.errors import PortInUse

_PORT_BUSY = ("fail", "wait", "next")


def connect_host(host: str) -> str:
    """The address to connect to for a server bound to ``host`` (a wildcard address means this machine)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 in brackets)."""
    h = connect_host(host)
    return f"[{h}]" if ":" in h else h


def accepts_connections(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when a TCP connection to (host, port) succeeds within ``timeout_s``."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listeners(port: int) -> list[Any] | None:
    """psutil's listening sockets on ``port`` (None when psutil may not look)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    return [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def port_owner(port: int) -> psutil.Process | None:
    """The process listening on ``port``, when psutil may see it."""
    for c in _listeners(port) or []:
        if c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def port_listening(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when something accepts connections on (host, port), or psutil sees a listener on the port."""
    return accepts_connections(host, port, timeout_s=timeout_s) or bool(_listeners(port))


def describe_owner(port: int) -> str:
    proc = port_owner(port)
    if proc is None:
        return "an unknown process"
    try:
        cmd = " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        cmd = "?"
    return f"pid {proc.pid} ({cmd})"


def bindable(host: str, port: int) -> bool:
    """True when a socket may bind (host, port) right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(host: str, port: int, *, busy: str, wait_s: float, tries: int, clock: Clock) -> int:
    """The port a launch gets: ``port`` when nothing listens there; otherwise by ``busy``: ``fail`` raises
    ``PortInUse`` naming the owner (never stopped), ``wait`` polls up to ``wait_s`` on ``clock``, ``next`` takes the
    first of the following ``tries`` ports that is free and bindable."""
    if busy not in _PORT_BUSY:
        raise ValueError(f"server.port_busy must be fail, wait or next but got {busy!r}")
    if not port_listening(host, port):
        return port
    if busy == "fail":
        raise PortInUse(
            f"port {port} on {host} is in use by {describe_owner(port)}; autotune did not start it "
            "and will not stop it (set server.port_busy to wait or next, or free the port)"
        )
    if busy == "wait":
        deadline = clock.now() + wait_s
        while clock.now() < deadline:
            clock.sleep(min(0.5, max(0.0, deadline - clock.now())))
            if not port_listening(host, port):
                return port
        raise PortInUse(
            f"port {port} on {host} still in use by {describe_owner(port)} after "
            f"{wait_s:g} s; autotune did not start it and will not stop it"
        )
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        if not port_listening(host, candidate) and bindable(host, candidate):
            return candidate
    raise PortInUse(f"no free port in {port}..{port + tries} on {host}")


def wait_port_free(host: str, port: int, *, timeout_s: float, clock: Clock) -> bool:
    """Wait up to ``timeout_s`` on ``clock`` until nothing listens on the port; False when something still does."""
    deadline = clock.now() + timeout_s
    while port_listening(host, port, timeout_s=0.2):
        if clock.now() >= deadline:
            return False
        clock.sleep(0.05)
    return True

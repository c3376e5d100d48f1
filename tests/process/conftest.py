from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from autotune.space import BenchmarkSpec, DrafterSpec, IntRange, Prompt, SearchSpec, ServerSpec, Space

FAKE_SERVER = Path(__file__).with_name("fake_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_space(
    mode: str = "healthy",
    *,
    delay: float = 0.2,
    port: int | None = None,
    env=None,
    extra_args=(),
    model_path: str = "/nonexistent/target",
    version: str | None = "0.5.23",
    **server,
) -> Space:
    return Space(
        name="proc",
        server=ServerSpec(
            backend="sglang",
            model_path=model_path,
            version=version,
            launcher=(sys.executable, str(FAKE_SERVER), "--mode", mode, "--delay", str(delay)),
            port=port if port is not None else free_port(),
            env=dict(env or {}),
            extra_args=tuple(extra_args),
            startup_timeout_s=server.pop("startup_timeout_s", 10.0),
            request_timeout_s=server.pop("request_timeout_s", 10.0),
            **server,
        ),
        drafters=(DrafterSpec(name="d", path="/nonexistent/drafter", algorithm="EAGLE3"),),
        search=SearchSpec(knobs={"num_steps": IntRange(1, 4)}),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(3)),
            max_tokens=8,
            warmup_requests=1,
            retries=0,
        ),
    )


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(autouse=True)
def no_leftover_processes():
    before = _descendants()
    yield
    deadline = time.monotonic() + 5
    while (left := _descendants() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"

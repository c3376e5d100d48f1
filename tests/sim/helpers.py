"""Helpers for the simulator tests: a stand-in SGLang backend (argv only), spaces, and server subprocesses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from autotune.config import TrialConfig
from autotune.sim import FIELD_REPORT_PROMPTS, simulated_space
from autotune.space import (
    BenchmarkSpec,
    DrafterSpec,
    Prompt,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    Space,
)

KIMI = "kimi-k25-rtxpro6000"
LLAMA = "llama31-8b-h100"


class StandInBackend:
    """The few lines of the SGLang backend the runner needs: config -> argv (launcher + SGLang flags)."""

    def argv(self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False) -> list[str]:
        argv = [
            *space.server.launcher,
            "--model-path",
            space.server.model_path,
            "--port",
            str(port),
            "--host",
            space.server.host,
        ]
        if not config.is_baseline:
            d = space.drafter(config.drafter or "")
            algo = d.algorithm or "EAGLE3"
            argv += [
                "--speculative-algorithm",
                algo,
                "--speculative-draft-model-path",
                d.path,
                "--speculative-num-steps",
                str(config.knob("num_steps")),
                "--speculative-eagle-topk",
                str(config.knob("topk")),
                "--speculative-num-draft-tokens",
                str(config.knob("num_draft_tokens")),
            ]
        if not config.cuda_graph:
            argv.append("--disable-cuda-graph")
        return argv + list(space.server.extra_args)

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        return dict(space.server.env)


def make_space(
    scenario: str = KIMI,
    drafters: tuple[str, ...] = ("custom-10k", "aq-medai"),
    *,
    max_tokens: int = 1024,
    seed: int = 0,
    retries: int = 2,
    startup_timeout_s: float = 900.0,
    algorithms: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    near_ties: float | None = None,
) -> Space:
    algorithms = algorithms or {}
    space = Space(
        name="test",
        server=ServerSpec(model_path="/models/target", startup_timeout_s=startup_timeout_s, extra_args=extra_args),
        drafters=tuple(DrafterSpec(name=d, path=f"/models/{d}", algorithm=algorithms.get(d)) for d in drafters),
        search=SearchSpec(),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=i, text=t) for i, t in FIELD_REPORT_PROMPTS), max_tokens=max_tokens, retries=retries
        ),
        simulate=SimulateSpec(scenario=scenario, time_scale=100.0, seed=seed, near_ties=near_ties),
    )
    return simulated_space(space)


def spec(drafter: str | None, steps: int = 0, topk: int = 0, ndt: int = 0, cuda_graph: bool = False) -> TrialConfig:
    if drafter is None:
        return TrialConfig.baseline(cuda_graph)
    return TrialConfig.make(drafter, cuda_graph, num_steps=steps, topk=topk, num_draft_tokens=ndt)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimProcess:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: str) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_healthy(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sim exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"sim not healthy within {timeout} s:\n{self.log()}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)


@contextmanager
def sim_process(
    args: list[str],
    tmp_path: os.PathLike[str],
    *,
    scenario: str = KIMI,
    time_scale: float = 100.0,
    load_time: float | None = 0.0,
    launch_index: int | None = 0,
    port: int | None = None,
) -> Iterator[SimProcess]:
    """Start ``python -m autotune.sim`` on ``port`` (default a free one); always stopped (TERM, then KILL), reaped."""
    port = port or free_port()
    argv = [
        sys.executable,
        "-m",
        "autotune.sim",
        "--scenario",
        scenario,
        "--time-scale",
        str(time_scale),
        "--port",
        str(port),
    ]
    if load_time is not None:
        argv += ["--sim-load-time", str(load_time)]
    if launch_index is not None:
        argv += ["--launch-index", str(launch_index)]
    argv += args
    log_path = os.path.join(os.fspath(tmp_path), f"sim-{port}.log")
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield SimProcess(proc, port, log_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


def sse_events(
    url: str, path: str, body: dict, timeout: float = 30.0, client: httpx.Client | None = None
) -> tuple[list[dict | str], list[float]]:
    """POST ``body`` with stream=True; the decoded ``data:`` events ("[DONE]" as a string) and their arrival times
    (seconds since the request was sent; pass a warm ``client`` to keep httpx's own set-up out of them)."""
    events: list[dict | str] = []
    times: list[float] = []
    own = client is None
    c = client or httpx.Client()
    t0 = time.monotonic()
    with c.stream("POST", url + path, json={**body, "stream": True}, timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
            times.append(time.monotonic() - t0)
    if own:
        c.close()
    return events, times


def completion_text(events: list[dict | str]) -> str:
    return "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e.get("choices"))

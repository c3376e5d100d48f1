"""Fault injection on the real process: startup crash, never healthy, OOM above a tree size, request faults."""

from __future__ import annotations

import time

import httpx
import pytest

from .helpers import sim_process

pytestmark = pytest.mark.slow

BASE = ["--model-path", "kimi-k25"]


def spec(n: int) -> list[str]:
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "custom-10k",
        "--speculative-num-steps",
        "4",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        str(n),
    ]


def gen(url: str, client: httpx.Client, n: int = 30) -> httpx.Response:
    return client.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": n, "temperature": 0}, timeout=10)


def stream_into(lines: list[str], url: str, client: httpx.Client) -> None:
    body = {"prompt": "hello", "max_tokens": 60, "temperature": 0, "stream": True}
    with client.stream("POST", url + "/v1/completions", json=body, timeout=10) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                lines.append(line)


def test_crash_during_startup(tmp_path) -> None:
    with sim_process([*BASE, "--fault", "crash-startup"], tmp_path, load_time=100) as sim:
        assert sim.wait_exit(10) == 1
        log = sim.log()
        assert "Traceback" in log and "NCCL error" in log
        assert "fired up" not in log


def test_never_healthy(tmp_path) -> None:
    with sim_process([*BASE, "--fault", "never-healthy"], tmp_path) as sim:
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:  # until it listens
            try:
                httpx.get(sim.url + "/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        deadline = time.monotonic() + 1.0
        codes = set()
        while time.monotonic() < deadline:
            try:
                codes.add(httpx.get(sim.url + "/health", timeout=1).status_code)
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        assert codes == {503}
        assert sim.proc.poll() is None


def test_oom_above_tree_size(tmp_path) -> None:
    with sim_process([*BASE, *spec(32), "--fault", "oom-above:16"], tmp_path) as sim:
        assert sim.wait_exit(10) == 1
        log = sim.log()
        assert "CUDA out of memory" in log and "torch.OutOfMemoryError" in log
    with sim_process([*BASE, *spec(16), "--fault", "oom-above:16"], tmp_path) as sim:
        sim.wait_healthy()


def test_scenario_drafter_faults(tmp_path) -> None:
    hidden = [
        *BASE,
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "wrong-hidden",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    with sim_process(hidden, tmp_path) as sim:
        assert sim.wait_exit(10) == 1
        assert "size mismatch for fc.weight" in sim.log()


def test_request_faults(tmp_path) -> None:
    """Request 2 answers 500, request 3 is cut off mid-stream, the process dies during request 5 (after 4)."""
    faults = ["--fault", "http500:2", "--fault", "truncate:3", "--fault", "crash-after:4"]
    with sim_process([*BASE, *faults], tmp_path, time_scale=400) as sim, httpx.Client() as client:
        sim.wait_healthy()
        r = gen(sim.url, client)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 30
        assert gen(sim.url, client).status_code == 500
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            stream_into(lines, sim.url, client)
        assert lines and "[DONE]" not in "".join(lines)  # some chunks came, then the stream broke off
        assert gen(sim.url, client).status_code == 200  # request 4
        lines.clear()
        with pytest.raises(httpx.TransportError):
            stream_into(lines, sim.url, client)
        assert "[DONE]" not in "".join(lines)
        assert sim.wait_exit(5) == 1
        assert "illegal memory access" in sim.log()


def test_divergent_drafter_changes_text(tmp_path) -> None:
    prompt = {"prompt": "Describe the process of photosynthesis in detail.", "max_tokens": 400, "temperature": 0}
    texts = []
    for flags in (
        BASE,
        [
            *BASE,
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "divergent",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    ):
        with sim_process(flags, tmp_path, time_scale=1000) as sim, httpx.Client() as client:
            sim.wait_healthy()
            texts.append(client.post(sim.url + "/v1/completions", json=prompt, timeout=10).json()["choices"][0]["text"])
    base, broken = texts
    assert base != broken
    common = 0
    while common < min(len(base), len(broken)) and base[common] == broken[common]:
        common += 1
    assert 0 < common < 0.6 * len(base)

"""Calibrate the simulator against the field report: real processes, real HTTP, an independent minimal client.

For each configuration of the reference table this starts ``python -m autotune.sim`` as a process, streams the
field report's 5 prompts (max_tokens 1024, temperature 0) through ``/v1/completions`` with httpx, counts tokens
from ``usage`` and times each request on the monotonic clock, multiplies the wall-clock rates back by the time
scale, and writes a markdown table (target vs measured vs the in-process model's expectation) into
``docs/simulator.md`` between the calibration markers.

    python scripts/calibrate_sim.py [--time-scale 50] [--doc docs/simulator.md] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx

from autotune.sim import FIELD_REPORT_PROMPTS
from autotune.sim.engine import SimEngine
from autotune.sim.launch import parse_launch_args

BEGIN = "<!-- calibration:begin (scripts/calibrate_sim.py writes this table) -->"
END = "<!-- calibration:end -->"
KIMI = "kimi-k25-rtxpro6000"
LLAMA = "llama31-8b-h100"
#: Llama rounds are short (6-15 ms of hardware time): a smaller time scale keeps HTTP overhead negligible
LLAMA_SCALE = 5.0


@dataclass(frozen=True)
class Case:
    label: str
    scenario: str
    flags: tuple[str, ...]
    target: str  # the report's figure, as text
    target_value: float | None
    time_scale: float | None = None  # None: the command line's


def _spec(drafter: str, s: int, k: int, n: int, algo: str = "EAGLE3") -> tuple[str, ...]:
    return (
        "--speculative-algorithm",
        algo,
        "--speculative-draft-model-path",
        drafter,
        "--speculative-num-steps",
        str(s),
        "--speculative-eagle-topk",
        str(k),
        "--speculative-num-draft-tokens",
        str(n),
    )


CASES = (
    Case("Kimi-K2.5 baseline (graphs off)", KIMI, ("--model-path", "kimi-k25", "--disable-cuda-graph"), "90", 90.0),
    Case(
        "custom-10k (3,4,16), graphs off",
        KIMI,
        ("--model-path", "kimi-k25", "--disable-cuda-graph", *_spec("custom-10k", 3, 4, 16)),
        "56.7",
        56.7,
    ),
    Case(
        "custom-10k (4,1,5), graphs off",
        KIMI,
        ("--model-path", "kimi-k25", "--disable-cuda-graph", *_spec("custom-10k", 4, 1, 5)),
        "53.2",
        53.2,
    ),
    Case(
        "aq-medai (4,1,5), graphs off",
        KIMI,
        ("--model-path", "kimi-k25", "--disable-cuda-graph", *_spec("aq-medai", 4, 1, 5)),
        "50.5 (44.4-59.2)",
        50.5,
    ),
    Case(
        "custom-10k under EAGLE (3,4,16), graphs off",
        KIMI,
        ("--model-path", "kimi-k25", "--disable-cuda-graph", *_spec("custom-10k", 3, 4, 16, "EAGLE")),
        "accept len ~1.0",
        None,
    ),
    Case("Kimi-K2.5 baseline, graphs on (what-if)", KIMI, ("--model-path", "kimi-k25"), "~141 (model)", 141.0),
    Case(
        "aq-medai (3,1,4), graphs on (what-if)",
        KIMI,
        ("--model-path", "kimi-k25", *_spec("aq-medai", 3, 1, 4)),
        "~break-even (model)",
        None,
    ),
    Case(
        "Llama-3.1-8B baseline (graphs on)",
        LLAMA,
        (
            "--model-path",
            "llama-3.1-8b-instruct",
        ),
        "158",
        158.0,
        LLAMA_SCALE,
    ),
    Case(
        "Llama-3.1-8B eager baseline",
        LLAMA,
        ("--model-path", "llama-3.1-8b-instruct", "--disable-cuda-graph"),
        "84.8",
        84.8,
        LLAMA_SCALE,
    ),
    Case(
        "Llama EAGLE-3 (5,8,32)",
        LLAMA,
        ("--model-path", "llama-3.1-8b-instruct", *_spec("eagle3-llama31-8b", 5, 8, 32)),
        "362-373",
        363.0,
        LLAMA_SCALE,
    ),
    Case(
        "Llama EAGLE-3 (8,8,64)",
        LLAMA,
        ("--model-path", "llama-3.1-8b-instruct", *_spec("eagle3-llama31-8b", 8, 8, 64)),
        "379",
        379.0,
        LLAMA_SCALE,
    ),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited with code {proc.returncode} during startup")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"simulator not healthy within {timeout} s")


def measure_prompt(client: httpx.Client, url: str, prompt: str, max_tokens: int) -> tuple[int, float, float | None]:
    """(completion tokens from usage, wall seconds, spec accept length) for one streamed completion."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens = None
    accept = None
    done = False
    t0 = time.monotonic()
    t_end = t0
    with client.stream("POST", url + "/v1/completions", json=body, timeout=120.0) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            obj = json.loads(data)
            if obj.get("choices"):
                t_end = time.monotonic()
            if obj.get("usage"):
                tokens = int(obj["usage"]["completion_tokens"])
            ext = obj.get("sglext") or {}
            if ext.get("spec_accept_length") is not None:
                accept = float(ext["spec_accept_length"])
    if not done or tokens is None:
        raise RuntimeError("stream ended without usage / [DONE]")
    return tokens, t_end - t0, accept


@dataclass
class Row:
    case: Case
    tok_per_s: float
    per_prompt: list[float]
    accept: float | None
    expected: float
    time_scale: float


def expected_tok_per_s(argv: list[str], max_tokens: int) -> float:
    engine = SimEngine(parse_launch_args(argv), 0)
    secs = sum(engine.expected_ms(t, max_tokens) for _, t in FIELD_REPORT_PROMPTS) / 1000.0
    return engine.expected_tokens(max_tokens) * len(FIELD_REPORT_PROMPTS) / secs


def run_case(case: Case, time_scale: float, max_tokens: int, seed: int, logdir: str) -> Row:
    port = free_port()
    argv = [
        "--scenario",
        case.scenario,
        "--time-scale",
        str(time_scale),
        "--seed",
        str(seed),
        "--sim-no-noise",
        "--sim-load-time",
        "0",
        "--port",
        str(port),
        *case.flags,
    ]
    url = f"http://127.0.0.1:{port}"
    log_path = os.path.join(logdir, f"{port}.log")
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.sim", *argv], stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_healthy(url, proc, 30.0)
        per, toks, secs, accs = [], 0, 0.0, []
        with httpx.Client() as client:
            for _, text in FIELD_REPORT_PROMPTS:
                n, wall, acc = measure_prompt(client, url, text, max_tokens)
                hw = wall * time_scale
                per.append(n / hw)
                toks += n
                secs += hw
                if acc is not None:
                    accs.append(acc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    return Row(
        case,
        toks / secs,
        per,
        sum(accs) / len(accs) if accs else None,
        expected_tok_per_s(argv, max_tokens),
        time_scale,
    )


def render(rows: list[Row], max_tokens: int, seed: int) -> str:
    out = [
        f"Measured over HTTP by `scripts/calibrate_sim.py` (5 field-report prompts, max_tokens {max_tokens}, "
        f"temperature 0, seed {seed}, no start/request noise; wall-clock rates multiplied back by the time scale).",
        "",
        "| configuration | report / reference | simulated (HTTP) | per prompt | accept len | model expectation "
        "| time scale |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = ", ".join(f"{x:.1f}" for x in r.per_prompt)
        acc = f"{r.accept:.2f}" if r.accept is not None else "-"
        dev = ""
        if r.case.target_value:
            dev = f" ({(r.tok_per_s / r.case.target_value - 1) * 100:+.1f}%)"
        out.append(
            f"| {r.case.label} | {r.case.target} | {r.tok_per_s:.1f}{dev} | {per} | {acc} | "
            f"{r.expected:.1f} | {r.time_scale:g} |"
        )
    return "\n".join(out) + "\n"


def write_doc(path: str, table: str) -> None:
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path}: calibration markers not found ({BEGIN!r} ... {END!r})")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{table}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=20.0, help="simulator time scale (default 20)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--doc", default=os.path.join(os.path.dirname(__file__), "..", "docs", "simulator.md"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ns = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="calibrate-sim-") as logdir:
        for case in CASES:
            row = run_case(case, case.time_scale or ns.time_scale, ns.max_tokens, ns.seed, logdir)
            print(f"{case.label}: {row.tok_per_s:.1f} tok/s (expected {row.expected:.1f})", file=sys.stderr)
            rows.append(row)
    table = render(rows, ns.max_tokens, ns.seed)
    print(table)
    if not ns.no_write:
        write_doc(ns.doc, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

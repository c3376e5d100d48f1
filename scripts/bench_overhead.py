"""What the orchestrator adds per trial, and what the benchmark client can stream and time, against the simulator as
a real process (``python -m autotune.sim`` via ``autotune.sim.simulated_space``).

1. Per-trial overhead: a real study (``autotune.study.Orchestrator``, SQLite storage, ``ProcessRunner``) on the
   llama scenario with the simulator's load time set to zero (``--sim-load-time 0``) and a huge time scale, so what
   is left of a trial's wall time is process start, health polling, port checks, streaming, teardown and storage
   writes. The bare start of the same server process (spawned directly, /health polled every 5 ms) is measured side
   by side and subtracted: overhead = trial wall - bare start - client-measured generation time.
2. Client throughput and timing: ``BenchmarkClient`` (one core) against one simulated server whose speed is set with
   the time scale (baseline: one token per round, the hardest stream: most rounds per token) at several wall
   token rates; timing error = client's seconds vs the simulator's noise-free schedule (``--sim-no-noise``,
   ``--launch-index 0``: the server streams exactly the plan ``SimEngine`` computes in-process).

3. Reference reader: a minimal HTTP/1.1 client on a raw socket (request in one write, TCP_NODELAY, one keep-alive
   connection) reads the same streams, interleaved with the client's requests: what is left of its error is the
   server's and the loopback's, not the client's.

    python scripts/bench_overhead.py                   # writes docs/benchmarks.{md,json} (section "overhead")
    python scripts/bench_overhead.py --trials 3 --rates 2000 20000 --out /tmp/o
    git archive COMMIT autotune | tar -x -C /tmp/old && python scripts/bench_overhead.py --before /tmp/old
                                                       # the same measurements of COMMIT's package first, side by side
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import optuna

ROOT = Path(__file__).resolve().parent.parent
#: the autotune package measured (default: this checkout); ``--before DIR`` runs this script again on another
#: checkout's package (e.g. ``git archive COMMIT autotune``) with this variable set, for before/after figures
PACKAGE_ROOT = Path(os.environ.get("AUTOTUNE_BENCH_PACKAGE") or ROOT)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import replace_section  # noqa: E402

sys.path.insert(0, str(PACKAGE_ROOT))

from autotune.backends.sglang import SGLangBackend  # noqa: E402
from autotune.client import BenchmarkClient  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.process import ProcessRunner  # noqa: E402
from autotune.seam import MonotonicClock  # noqa: E402
from autotune.sim import simulated_space  # noqa: E402
from autotune.sim.engine import SimEngine  # noqa: E402
from autotune.sim.launch import parse_launch_args  # noqa: E402
from autotune.sim.runner import sim_argv  # noqa: E402
from autotune.space import SimulateSpec, Space, load_space  # noqa: E402
from autotune.study import Event, Orchestrator, open_study  # noqa: E402

SPACE = ROOT / "spaces" / "llama-8b-eagle3.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def space_for(time_scale: float, *, max_tokens: int, extra: tuple[str, ...] = (), prompts: int | None = None) -> Space:
    space = load_space(str(SPACE))
    b = space.benchmark
    bench = dataclasses.replace(
        b, max_tokens=max_tokens, prompts=b.prompts[:prompts] if prompts else b.prompts, retries=0
    )
    server = dataclasses.replace(
        space.server,
        port=free_port(),
        extra_args=(*space.server.extra_args, "--sim-load-time", "0", *extra),
        # hardware seconds, divided by the time scale on the wall clock: keep ~100 s of wall time for each
        startup_timeout_s=100.0 * time_scale,
        request_timeout_s=100.0 * time_scale,
    )
    sim = SimulateSpec(scenario="llama31-8b-h100", time_scale=time_scale, seed=0)
    return simulated_space(dataclasses.replace(space, server=server, benchmark=bench, simulate=sim))


# ------------------------------------------------------------------------------------------------ 1. overhead


def bare_start(argv: list[str], port: int) -> float:
    """Wall seconds from spawn to the first 200 from /health, polled every 5 ms; then the process is stopped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with httpx.Client(trust_env=False, timeout=1.0) as http:
            while True:
                try:
                    if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        return time.perf_counter() - t0
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError(f"simulator exited with {proc.returncode}")
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class Timed:
    """Wraps a runner: wall time of launch, warm-up, prompts and close of each session. Right before each launch
    the same server argv is started bare (spawn to first /health 200, then stopped), so each trial's start is
    compared with a bare start of the same config made moments before (paired: process starts on a shared
    2-core machine vary by hundreds of ms between minutes)."""

    def __init__(self, runner: ProcessRunner, backend: SGLangBackend, space: Space) -> None:
        self.runner = runner
        self.backend, self.space = backend, space
        self.simulated = runner.simulated
        self.rows: list[dict[str, float]] = []

    def launch(self, config: TrialConfig) -> Any:
        port = self.space.server.port
        bare = bare_start(self.backend.argv(config, self.space, port=port, simulate=True), port)
        t0 = time.perf_counter()
        session = self.runner.launch(config)
        row = {
            "bare": bare,
            "launch": time.perf_counter() - t0,
            "warmup": 0.0,
            "prompts": 0.0,
            "generation": 0.0,
            "close": 0.0,
        }
        self.rows.append(row)
        return _TimedSession(session, row, self.runner.time_scale)


class _TimedSession:
    def __init__(self, session: Any, row: dict[str, float], scale: float) -> None:
        self.s, self.row, self.scale = session, row, scale
        self.info = session.info

    def warmup(self) -> None:
        t0 = time.perf_counter()
        self.s.warmup()
        self.row["warmup"] += time.perf_counter() - t0

    def run_prompt(self, i: int) -> Any:
        t0 = time.perf_counter()
        r = self.s.run_prompt(i)
        self.row["prompts"] += time.perf_counter() - t0
        self.row["generation"] += r.seconds / self.scale  # the client's own measured wall seconds
        return r

    def run_level(self, level: int) -> Any:
        return self.s.run_level(level)

    def reference(self, index: int, top_n: int) -> None:
        return None  # no reference answers: the overhead measured is the trial's, without the lossless check's

    def close(self) -> None:
        t0 = time.perf_counter()
        self.s.close()
        self.row["closed_at"] = time.perf_counter()
        self.row["close"] += self.row["closed_at"] - t0


class TrialWalls:
    """A listener: the wall time of each trial, from its ``trial-start`` event to its end, less the paired bare start
    ``Timed`` made in it. The end is the ``trial-end`` event (the last thing a trial does), or the stop of the trial's
    server when that came later (packages before issue #12, measured with ``--before``, announced the end of a pruned
    or failed trial before stopping its server)."""

    def __init__(self, timed: Timed) -> None:
        self.timed = timed
        self.trials: list[dict[str, float]] = []

    def __call__(self, ev: Event) -> None:
        if ev.kind == "trial-start":
            self.trials.append({"start": time.perf_counter(), "rows": len(self.timed.rows)})
        elif ev.kind == "trial-end" and self.trials:
            self.trials[-1]["end"] = time.perf_counter()

    def walls(self) -> list[float]:
        """One wall per trial; each launched trial's row gets its ``wall`` too."""
        out = []
        rows = self.timed.rows
        for k, t in enumerate(self.trials):
            n_after = int(self.trials[k + 1]["rows"]) if k + 1 < len(self.trials) else len(rows)
            row = rows[n_after - 1] if n_after > t["rows"] else None  # launched (duplicates are not)
            end = max(t["end"], row.get("closed_at", 0.0)) if row is not None else t["end"]
            wall = end - t["start"]
            if row is not None:
                wall -= row["bare"]
                row["wall"] = wall
            out.append(wall)
        return out


def measure_overhead(n_trials: int, time_scale: float, max_tokens: int, poll: float | None = None) -> dict[str, Any]:
    space = space_for(time_scale, max_tokens=max_tokens)
    space = dataclasses.replace(space, budget=dataclasses.replace(space.budget, n_trials=n_trials))
    backend = SGLangBackend()
    with tempfile.TemporaryDirectory() as tmp:
        runner = ProcessRunner(
            space,
            backend,
            log_dir=Path(tmp) / "logs",
            clock=MonotonicClock(),
            time_scale=time_scale,
            simulated=True,
            record_path=Path(tmp) / "pids.json",
        )
        if poll is not None:
            runner.poll_interval_s = poll
        timed = Timed(runner, backend, space)
        study = open_study(space, f"sqlite:///{tmp}/study.db", "overhead", seed=0, simulated=True)
        trial_walls = TrialWalls(timed)
        orch = Orchestrator(space, backend, timed, study, listener=trial_walls)
        t0 = time.perf_counter()
        orch.search(n_trials)
        search_wall = time.perf_counter() - t0
        n_measured = len(timed.rows)
        walls = trial_walls.walls()
    per_trial = [
        {
            **r,
            "overhead": r["wall"] - r["bare"] - r["generation"],
            "launch_beyond_bare": r["launch"] - r["bare"],
            "streaming_beyond_generation": r["warmup"] + r["prompts"] - r["generation"],
        }
        for r in timed.rows
    ]
    # the loop's own time between trials (sampler, storage reads) is the rest of the search wall (bare starts out)
    loop_rest = search_wall - sum(walls) - sum(r["bare"] for r in timed.rows)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in per_trial)

    return {
        "poll_interval_s": poll if poll is not None else ProcessRunner.poll_interval_s,
        "trials_launched": n_measured,
        "trials_total": len(walls),
        "time_scale": time_scale,
        "max_tokens": max_tokens,
        "bare_start_median_s": statistics.median(r["bare"] for r in timed.rows),
        "median_s": {
            k: med(k)
            for k in (
                "launch",
                "launch_beyond_bare",
                "warmup",
                "prompts",
                "generation",
                "streaming_beyond_generation",
                "close",
                "overhead",
            )
        },
        "trial_wall_median_s": statistics.median(walls),
        "between_trials_per_trial_s": loop_rest / max(len(walls), 1),
        "overhead_per_trial_median_s": med("overhead") + loop_rest / max(len(walls), 1),
        "search_wall_s": search_wall,
    }


# ------------------------------------------------------------------------------------------------ 2. client


class _E2EBackend(SGLangBackend):
    """SGLang's parsing, plus a note of the server's own ``meta_info.e2e_latency`` from the final chunk."""

    e2e_latency: float | None = None

    def parse_chunk(self, obj: dict[str, Any]) -> Any:
        meta = obj.get("meta_info") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and meta.get("e2e_latency") is not None:
            self.e2e_latency = float(meta["e2e_latency"])
        return super().parse_chunk(obj)


class RawReader:
    """Reference reader: HTTP/1.1 on one keep-alive raw socket with TCP_NODELAY, each request in one write; times
    the last SSE event before ``[DONE]`` (perf_counter, like the client's clock)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("the server closed the connection")
        self.buf += data

    def measure(self, path: str, body: dict[str, Any]) -> dict[str, float]:
        raw = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n"
        ).encode()
        t0 = time.perf_counter()
        self.sock.sendall(head + raw)
        while b"\r\n\r\n" not in self.buf:
            self._more()
        first_byte = time.perf_counter() - t0
        status, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if b" 200 " not in status.split(b"\r\n", 1)[0] or b"chunked" not in status.lower():
            raise RuntimeError(f"unexpected response head {status[:200]!r}")
        last = None
        while True:
            while b"\r\n" not in self.buf:
                self._more()
            size_line, rest = self.buf.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(rest) < size + 2:
                self._more()
                size_line, rest = self.buf.split(b"\r\n", 1)
            now = time.perf_counter()
            chunk, self.buf = rest[:size], rest[size + 2 :]
            if size == 0:
                break
            if any(e.startswith(b"data:") and e.strip() != b"data: [DONE]" for e in chunk.split(b"\n\n")):
                last = now
        if last is None:
            raise RuntimeError("no data events")
        return {"seconds": last - t0, "first_byte_s": first_byte}


def measure_client(rate: float, max_tokens: int, requests: int) -> dict[str, Any]:
    """The client against a baseline server streaming at ~``rate`` tok/s (wall), and the reference reader on the
    same server, request by request in turn."""
    hw_rate = 158.2  # the llama scenario's baseline tok/s (graphs on), simulated hardware
    scale = rate / hw_rate
    space = space_for(scale, max_tokens=max_tokens, extra=("--sim-no-noise", "--launch-index", "0"), prompts=5)
    backend = _E2EBackend()
    cfg = TrialConfig.baseline(True)
    argv = backend.argv(cfg, space, port=space.server.port, simulate=True)
    engine = SimEngine(parse_launch_args(sim_argv(argv)), 0)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rows, raw_rows = [], []
    try:
        client = BenchmarkClient.for_space(space, backend, f"http://127.0.0.1:{space.server.port}")
        deadline = time.monotonic() + 60
        while client.status("/health", timeout_s=1.0) != 200:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("simulator did not start")
            time.sleep(0.01)
        prompts = space.benchmark.prompts
        client.measure(0, prompts[0].text)  # warm-up (request 1)
        reader = RawReader(space.server.port)
        index = 2
        for n in range(requests):
            p = prompts[n % len(prompts)]
            # the client
            gen = engine.generate(p.text, max_tokens, temperature=0.0, request_index=index)
            index += 1
            scheduled = gen.plan.e2e_ms / 1000.0 / scale
            backend.e2e_latency = None
            c0 = time.process_time()
            w0 = time.perf_counter()
            r = client.measure(n % len(prompts), p.text)
            wall = time.perf_counter() - w0
            cpu = time.process_time() - c0
            rows.append(
                {
                    "tokens": r.completion_tokens,
                    "client_s": r.seconds,
                    "scheduled_s": scheduled,
                    "error": r.seconds / scheduled - 1.0,
                    "fixed_ms": (r.seconds - scheduled) * 1000.0,
                    "decode_error": (r.seconds - (r.ttft_s or 0.0)) / (scheduled - gen.plan.ttft_ms / 1000.0 / scale)
                    - 1.0,
                    "error_vs_server": r.seconds / backend.e2e_latency - 1.0 if backend.e2e_latency else None,
                    "server_lag": backend.e2e_latency / scheduled - 1.0 if backend.e2e_latency else None,
                    "cpu_share": cpu / wall if wall > 0 else 0.0,
                }
            )
            # the reference reader, same prompt, same request body
            gen = engine.generate(p.text, max_tokens, temperature=0.0, request_index=index)
            index += 1
            scheduled = gen.plan.e2e_ms / 1000.0 / scale
            path, body = backend.request(
                p.text, max_tokens=max_tokens, temperature=0.0, api=space.benchmark.api, model=space.server.model_path
            )
            rr = reader.measure(path, body)
            raw_rows.append({"error": rr["seconds"] / scheduled - 1.0, "fixed_ms": (rr["seconds"] - scheduled) * 1e3})
        reader.close()
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    errs = [r["error"] for r in rows]
    tok_s = [r["tokens"] / r["client_s"] for r in rows]
    return {
        "target_tok_per_s": rate,
        "time_scale": scale,
        "requests": len(rows),
        "max_tokens": max_tokens,
        "measured_tok_per_s_median": statistics.median(tok_s),
        "scheduled_tok_per_s_median": statistics.median(r["tokens"] / r["scheduled_s"] for r in rows),
        "timing_error_median": statistics.median(errs),
        "timing_error_max_abs": max(abs(e) for e in errs),
        "excess_ms_median": statistics.median(r["fixed_ms"] for r in rows),
        "decode_timing_error_median": statistics.median(r["decode_error"] for r in rows),
        "decode_timing_error_max_abs": max(abs(r["decode_error"]) for r in rows),
        "error_vs_server_e2e_median": statistics.median(r["error_vs_server"] for r in rows),
        "error_vs_server_e2e_max_abs": max(abs(r["error_vs_server"]) for r in rows),
        "server_lag_median": statistics.median(r["server_lag"] for r in rows),
        "client_cpu_share_median": statistics.median(r["cpu_share"] for r in rows),
        "reference_error_median": statistics.median(r["error"] for r in raw_rows),
        "reference_error_max_abs": max(abs(r["error"]) for r in raw_rows),
        "reference_excess_ms_median": statistics.median(r["fixed_ms"] for r in raw_rows),
    }


# ------------------------------------------------------------------------------------------------ output


def _ms(x: float) -> str:
    return f"{x * 1000:.0f} ms"


def _pc(x: float) -> str:
    return f"{100 * x:+.2f}%"


def markdown(res: dict[str, Any]) -> str:
    runs = [("after", res)]
    if res.get("before"):
        runs.insert(0, ("before", res["before"]))
    cols = " | ".join(f"{k} ({r['package']})" for k, r in runs)
    o = res["overhead"]
    lines = [
        "## Orchestrator overhead and client accuracy (scripts/bench_overhead.py)",
        "",
        f"Produced by `{res['command']}` on {res['date']} ({res['machine']}), {res['wall_s']:.0f} s of machine time. "
        "Real processes and real HTTP: `ProcessRunner` starting `python -m autotune.sim` (llama scenario, load time "
        "0, time scale "
        f"{o['time_scale']:g}), `BenchmarkClient` streaming, Optuna on SQLite; medians."
        + (
            " *before* = the same script on the package of the commit named (its `autotune/` extracted with "
            "`git archive`), run first in the same invocation; *after* = this checkout, right after it."
            if len(runs) > 1
            else ""
        ),
        "",
        f"### Per trial ({o['trials_launched']} launched trials of {o['trials_total']}, max_tokens {o['max_tokens']})",
        "",
        f"| phase (median wall) | {cols} |",
        "|---|" + "---|" * len(runs),
    ]

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(r) for _, r in runs) + " |")

    row(
        "bare start of the same server argv right before each launch (spawn to first /health 200, polled every 5 ms; "
        "not overhead)",
        lambda r: _ms(r["overhead"]["bare_start_median_s"]),
    )
    row(
        "launch by ProcessRunner (port check, spawn, health polling, /server_info)",
        lambda r: _ms(r["overhead"]["median_s"]["launch"]),
    )
    row("of which beyond the paired bare start", lambda r: _ms(r["overhead"]["median_s"]["launch_beyond_bare"]))
    row(
        "warm-up + prompts (wall) / client-measured generation",
        lambda r: (
            f"{_ms(r['overhead']['median_s']['warmup'] + r['overhead']['median_s']['prompts'])} / "
            f"{_ms(r['overhead']['median_s']['generation'])}"
        ),
    )
    row("teardown (TERM, wait for exit, port free)", lambda r: _ms(r["overhead"]["median_s"]["close"]))
    row("trial wall (objective, less the paired bare start)", lambda r: _ms(r["overhead"]["trial_wall_median_s"]))
    row(
        "between trials (sampler, storage reads/writes outside the objective), per trial",
        lambda r: _ms(r["overhead"]["between_trials_per_trial_s"]),
    )
    row(
        "**overhead per trial** = trial wall - bare start - generation + between-trials (target < 500 ms)",
        lambda r: f"**{_ms(r['overhead']['overhead_per_trial_median_s'])}**",
    )
    lines += [
        "",
        f"### Client timing error (one core, baseline stream, noise-free schedule, {res['client'][0]['requests']} "
        f"requests per rate and reader, max_tokens {res['client'][0]['max_tokens']})",
        "",
        "| target tok/s | run | client tok/s | client vs schedule: median / max abs | excess ms | "
        "first-to-last-token vs schedule | server's e2e_latency vs schedule | client vs server's e2e_latency | "
        "reference reader vs schedule: median / max abs (excess ms) | client CPU share |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(res["client"]):
        for label, r in runs:
            c = r["client"][i]
            ref = (
                f"{_pc(c['reference_error_median'])} / {100 * c['reference_error_max_abs']:.2f}% "
                f"({c['reference_excess_ms_median']:.1f})"
                if "reference_error_median" in c
                else "-"
            )
            lines.append(
                f"| {c['target_tok_per_s']:,.0f} | {label} | {c['measured_tok_per_s_median']:,.0f} | "
                f"{_pc(c['timing_error_median'])} / {100 * c['timing_error_max_abs']:.2f}% | "
                f"{c['excess_ms_median']:.1f} | {_pc(c['decode_timing_error_median'])} | "
                f"{_pc(c['server_lag_median'])} | {_pc(c['error_vs_server_e2e_median'])} | {ref} | "
                f"{100 * c['client_cpu_share_median']:.0f}% |"
            )
    lines += [
        "",
        "Timing error = measured seconds (request sent to the last token) / the simulator's scheduled duration - 1; "
        "it includes the HTTP round trip and the simulator's own streaming lag (rounds due within 2 ms go out as one "
        "chunk at the last one's time). Reference reader = a raw-socket HTTP/1.1 reader (request in one write, "
        "TCP_NODELAY, one keep-alive connection), interleaved request by request with the client on the same server. "
        "Target: under 1% at 20,000 tok/s.",
        "",
    ]
    return "\n".join(lines)


def _package_label(root: Path) -> str:
    """The commit of a git checkout, or what a ``--before`` directory's ``COMMIT`` file says, else its path."""
    marker = root / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "autotune"], capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return str(root)


def measure_all(args: argparse.Namespace) -> dict[str, Any]:
    import autotune

    where = Path(autotune.__file__).resolve().parent.parent
    if where != PACKAGE_ROOT.resolve():
        raise RuntimeError(f"measuring the package in {where}, not in {PACKAGE_ROOT}")
    return {
        "package": _package_label(PACKAGE_ROOT),
        "overhead": measure_overhead(args.trials, args.time_scale, args.max_tokens),
        "client": [measure_client(r, args.max_tokens, args.requests) for r in args.rates],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=10, help="search trials for the overhead measurement")
    p.add_argument("--time-scale", type=float, default=10000.0)
    p.add_argument("--rates", type=float, nargs="+", default=[2000, 5000, 20000, 50000])
    p.add_argument("--requests", type=int, default=10, help="measured requests per rate")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--out", default=str(ROOT / "docs"))
    p.add_argument(
        "--before",
        metavar="DIR",
        help="first measure the autotune package in DIR (DIR/autotune; a file DIR/COMMIT names it) the same way",
    )
    p.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)  # the --before child
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    t0 = time.perf_counter()
    if args.json_only:
        print(json.dumps(measure_all(args)))
        return 0
    before = None
    if args.before:
        child = [a for a in (argv if argv is not None else sys.argv[1:])]
        i = child.index("--before")
        del child[i : i + 2]
        env = {**os.environ, "AUTOTUNE_BENCH_PACKAGE": str(Path(args.before).resolve())}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env["AUTOTUNE_BENCH_PACKAGE"], env.get("PYTHONPATH")]))
        # cwd too: the simulator runs as ``python -m autotune.sim``, which imports from the working directory first
        out = subprocess.run(
            [sys.executable, __file__, *child, "--json-only"],
            env=env,
            cwd=env["AUTOTUNE_BENCH_PACKAGE"],
            capture_output=True,
            text=True,
            check=True,
        )
        before = json.loads(out.stdout.strip().splitlines()[-1])
    res = {
        "command": "python scripts/bench_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        **measure_all(args),
        "before": before,
    }
    res["wall_s"] = time.perf_counter() - t0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath = out_dir / "benchmarks.json"
    data = json.loads(jpath.read_text()) if jpath.exists() else {}
    data["overhead"] = res
    jpath.write_text(json.dumps(data, indent=1) + "\n")
    replace_section(out_dir / "benchmarks.md", "overhead", markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

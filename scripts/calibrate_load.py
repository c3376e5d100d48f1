"""Calibrate the simulator under load: per load level, the baseline's aggregate tok/s and the speedup of the best
config, in-process (the model's closed loop, no noise) and over real concurrent HTTP streams for a few points.

In-process: ``ModelSession.run_level`` (continuous batching, each stream sends its next request when its last
one ended) for the baseline and a grid of configs (chains of every length, the deep trees), the field report's
5 prompts, max_tokens 256, temperature 0, ``--max-running-requests`` / ``--cuda-graph-max-bs`` at the level,
``--sim-no-noise``. HTTP: ``python -m autotune.sim`` processes measured by ``ProcessSession.run_level`` (real
threads, real sockets, token counts from usage) at ``--time-scale``.

Writes a markdown table into ``docs/simulator.md`` between the load-calibration markers.

    python scripts/calibrate_load.py [--time-scale 5] [--http-levels 1 8] [--doc docs/simulator.md] [--no-write]
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
from pathlib import Path

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.seam import VirtualClock
from autotune.sim import FIELD_REPORT_PROMPTS, ModelRunner, simulated_space
from autotune.sim.scenario import SCENARIO_DIR, ScenarioLoader, read_scenario, scenario_loader
from autotune.space import BenchmarkSpec, DrafterSpec, Prompt, SearchSpec, ServerSpec, SimulateSpec, Space

BEGIN = "<!-- load-calibration:begin (scripts/calibrate_load.py writes this table) -->"
END = "<!-- load-calibration:end -->"
LEVELS = (1, 8, 32, 64, 128, 256)
SCENARIOS = {
    "llama31-8b-h100": ("eagle3-llama31-8b", True),
    "kimi-k25-rtxpro6000": ("custom-10k", True),
    "bench-moe-load-h100": ("eagle3-a3b", True),  # scripts/bench_scenarios/ (in-process only: not shipped)
}
BENCH_DIR = Path(__file__).resolve().parent / "bench_scenarios"


def scenarios() -> ScenarioLoader:
    extra = {}
    for path in sorted(BENCH_DIR.glob("*.scenario.yaml")):
        sc = read_scenario(str(path), dirs=[str(BENCH_DIR), SCENARIO_DIR])
        extra[sc.name] = sc
    return scenario_loader(extra)


TREES = ((5, 8, 32), (6, 8, 64), (3, 4, 16))


def _space(scenario: str, drafter: str, level: int, *, port: int = 30000, scale: float = 5.0) -> Space:
    space = Space(
        name="calibrate-load",
        server=ServerSpec(
            model_path="/unused",
            port=port,
            extra_args=("--sim-no-noise", "--sim-load-time", "0"),
            startup_timeout_s=120.0,
        ),
        drafters=(DrafterSpec(name=drafter, path="/unused"),),
        search=SearchSpec(),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=i, text=t) for i, t in FIELD_REPORT_PROMPTS),
            max_tokens=256,
            warmup_requests=1,
            concurrency=(1, level) if level > 1 else (1,),
        ),
        simulate=SimulateSpec(scenario=scenario, time_scale=scale, seed=0),
    )
    return simulated_space(space, scenarios=scenarios())


def configs(drafter: str, cuda_graph: bool) -> list[TrialConfig]:
    out = [TrialConfig.make(drafter, cuda_graph, num_steps=s, topk=1, num_draft_tokens=s + 1) for s in range(1, 8)]
    out += [TrialConfig.make(drafter, cuda_graph, num_steps=s, topk=k, num_draft_tokens=n) for s, k, n in TREES]
    return out


def _short(c: TrialConfig) -> str:
    return f"({c.knob('num_steps')},{c.knob('topk')},{c.knob('num_draft_tokens')})"


def in_process(scenario: str, drafter: str, cuda_graph: bool, level: int) -> dict:
    space = _space(scenario, drafter, level)
    runner = ModelRunner(space, SGLangBackend(), VirtualClock(), seed=0, scenarios=scenarios())

    def tps(cfg: TrialConfig) -> float:
        s = runner.launch(cfg)
        try:
            return s.run_level(level).tok_per_s
        finally:
            s.close()

    base = tps(TrialConfig.baseline(cuda_graph))
    rows = [(tps(c) / base, c) for c in configs(drafter, cuda_graph)]
    best = max(rows, key=lambda r: r[0])
    chains = [r for r in rows if r[1].knob("topk") == 1]
    chain = max(chains, key=lambda r: r[0])
    return {"base": base, "best": best, "chain": chain}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(scenario: str, drafter: str, cuda_graph: bool, level: int, cfg: TrialConfig, scale: float) -> float:
    from autotune.process import ProcessRunner

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in (TrialConfig.baseline(cuda_graph), cfg):
            space = _space(scenario, drafter, level, port=free_port(), scale=scale)
            runner = ProcessRunner(
                space,
                SGLangBackend(),
                log_dir=f"{tmp}/logs",
                time_scale=scale,
                simulated=True,
                record_path=f"{tmp}/pids.json",
            )
            with runner.launch(c) as session:
                if level == 1:
                    session.warmup()
                    rs = [session.run_prompt(i) for i in range(len(space.benchmark.prompts))]
                    out.append(sum(r.completion_tokens for r in rs) / sum(r.seconds for r in rs))
                else:
                    out.append(session.run_level(level).tok_per_s)
    return out[1] / out[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=5.0)
    ap.add_argument("--http-levels", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--doc", default="docs/simulator.md")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    lines = [
        "Measured by `scripts/calibrate_load.py` (5 field-report prompts, max_tokens 256, temperature 0, no noise; "
        "each level C sends max(5, 2C) requests from C streams at once; `--max-running-requests` and "
        "`--cuda-graph-max-bs` at the level). Speedup = aggregate tok/s over the baseline's at the same level, "
        "CUDA graphs on. Grid: chains (S,1,S+1) for S = 1..7 and the trees "
        + ", ".join(f"({s},{k},{n})" for s, k, n in TREES)
        + ".",
        "",
        "| scenario | streams | baseline tok/s | best config | speedup | best chain | speedup | HTTP (best chain) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario, (drafter, cg) in SCENARIOS.items():
        for level in LEVELS:
            r = in_process(scenario, drafter, cg, level)
            (bs, bc), (cs, cc) = r["best"], r["chain"]
            h = "-"
            if level in args.http_levels and not scenario.startswith("bench-"):
                h = f"{http(scenario, drafter, cg, level, cc, args.time_scale):.3f}x (scale {args.time_scale:g})"
            cells = [scenario, str(level), f"{r['base']:.0f}", _short(bc), f"{bs:.3f}x", _short(cc), f"{cs:.3f}x", h]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    if not args.no_write:
        with open(args.doc, encoding="utf-8") as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            print(f"{args.doc}: no load-calibration markers", file=sys.stderr)
            return 1
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(args.doc, "w", encoding="utf-8") as f:
            f.write(head + BEGIN + "\n" + table + "\n" + END + tail)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Continuous batching in the simulator (autotune.sim.batch): the pure scheduler, the batch cost model, the
in-process load levels, and real concurrent HTTP streams against the simulated server."""

from __future__ import annotations

import pytest

from autotune.config import TrialConfig
from autotune.seam import VirtualClock
from autotune.sim.acceptance import SpecShape
from autotune.sim.batch import SPECULATIVE_MAX_RUNNING, closed_loop
from autotune.sim.engine import SimEngine
from autotune.sim.launch import parse_launch_args
from autotune.sim.runner import ModelRunner
from autotune.sim.scenario import load_scenario
from autotune.sim.timing import t_cycle, t_cycle_batch

from .helpers import LLAMA, StandInBackend, make_space

DRAFTER = "eagle3-llama31-8b"
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFTER]


def _engine(*flags: str) -> SimEngine:
    sc = load_scenario(LLAMA)
    return SimEngine(parse_launch_args(["--scenario", LLAMA, "--model-path", sc.target_dir, *flags]), 7)


@pytest.mark.parametrize("shape", [None, SpecShape(3, 1, 4), SpecShape(5, 8, 32), SpecShape(8, 8, 64)])
@pytest.mark.parametrize("scenario", ["llama31-8b-h100", "kimi-k25-rtxpro6000"])
def test_one_sequence_costs_the_single_stream_cycle(scenario, shape):
    sc = load_scenario(scenario)
    for cg in (True, False):
        hw = sc.hardware(cg)
        assert t_cycle_batch(hw, shape, 1, 700.0) == pytest.approx(t_cycle(hw, shape), rel=1e-12)


def test_a_request_alone_takes_its_plan_times():
    e = _engine(
        *SPEC, "--speculative-num-steps", "5", "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "32"
    )
    gen = e.generate("Write a Python function for merge sort", 300)
    b = e.batcher()
    b.add(e.seq(gen))
    t, times = 0.0, []
    while (step := b.step()) is not None:
        t += step.ms
        times.append(t)
    assert times[0] == pytest.approx(gen.plan.ttft_ms, rel=1e-12)
    assert times[1:] == pytest.approx(gen.plan.times_ms.tolist(), rel=1e-12)


def test_steps_get_dearer_with_batch_and_graphs_stop_at_their_max_batch():
    sc = load_scenario(LLAMA)
    hw = sc.hardware(True)
    shape = SpecShape(4, 1, 5)
    costs = [t_cycle_batch(hw, shape, b, 600.0) for b in (1, 8, 64, 256)]
    assert costs == sorted(costs) and costs[-1] > 3 * costs[0]
    e = _engine("--cuda-graph-max-bs", "4")
    b = e.batcher()
    assert b._hw(4) is sc.graphs_on and b._hw(5) is sc.graphs_off


def _level_tps(runner: ModelRunner, cfg: TrialConfig, level: int) -> float:
    session = runner.launch(cfg)
    try:
        return session.run_level(level).tok_per_s
    finally:
        session.close()


def test_speculation_gain_shrinks_with_load_and_turns_into_a_loss():
    """Calibration (docs/simulator.md): Llama-3.1-8B + EAGLE-3 ~2.4x at 1 stream, a short chain still wins at 64,
    and nothing wins at 256 streams (with the running-request cap and graph batch raised to the level)."""
    space = make_space(
        LLAMA, (DRAFTER,), max_tokens=256, extra_args=("--max-running-requests", "256", "--cuda-graph-max-bs", "256")
    )
    runner = ModelRunner(space, StandInBackend(), VirtualClock(), seed=0)
    base = TrialConfig.baseline(True)
    deep = TrialConfig.make(DRAFTER, True, num_steps=6, topk=8, num_draft_tokens=32)
    chain = TrialConfig.make(DRAFTER, True, num_steps=3, topk=1, num_draft_tokens=4)
    ratio = {}
    for level in (1, 64, 256):
        b = _level_tps(runner, base, level)
        ratio[level] = {"deep": _level_tps(runner, deep, level) / b, "chain": _level_tps(runner, chain, level) / b}
    assert ratio[1]["deep"] > 2.0 and ratio[1]["deep"] > ratio[1]["chain"]
    assert ratio[64]["chain"] > 1.05 and ratio[64]["deep"] < ratio[64]["chain"]
    assert max(ratio[256].values()) < 1.0


def test_speculative_servers_run_48_requests_at_once_unless_told():
    e = _engine(
        *SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"
    )
    gens = [e.generate(f"prompt {i}", 64) for i in range(80)]
    b = e.batcher()
    peak = 0

    def submit(i):
        return e.seq(gens[i])

    orig = b.step

    def step():
        nonlocal peak
        s = orig()
        peak = max(peak, len(b.running))
        return s

    b.step = step  # type: ignore[method-assign]
    done, _ = closed_loop(b, submit, 80, 80)
    assert len(done) == 80 and peak == SPECULATIVE_MAX_RUNNING
    e2 = _engine(
        *SPEC,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--max-running-requests",
        "80",
    )
    assert e2.batcher().max_running == 80

"""End to end: ProcessRunner + SGLangBackend + BenchmarkClient against the simulator (``python -m autotune.sim``)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig, summarize
from autotune.errors import ServerDied, ServerExited, StartupTimeout
from autotune.process import ProcessRunner
from autotune.process.server import port_listening
from autotune.space import (
    BenchmarkSpec,
    Choices,
    DrafterSpec,
    IntRange,
    Prompt,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    Space,
)

from .conftest import free_port

sim = pytest.importorskip("autotune.sim")

pytestmark = pytest.mark.slow

# At large time scales the simulator's per-chunk wall overheads (scaled back up) dominate short token times,
# so this test runs the simulator slowly enough for hardware figures to match the scenario.
SCALE = 10.0
DRAFTER = "eagle3-llama31-8b"


def sim_space(*extra: str, startup_timeout_s: float = 600.0) -> Space:
    space = Space(
        name="e2e",
        server=ServerSpec(
            backend="sglang",
            model_path="/unused",
            port=free_port(),
            extra_args=("--sim-load-time", "20", *extra),
            startup_timeout_s=startup_timeout_s,
            request_timeout_s=600.0,
        ),
        drafters=(DrafterSpec(name=DRAFTER, path="/unused"),),
        search=SearchSpec(
            cuda_graph=(True, False),
            knobs={"num_steps": IntRange(1, 6), "topk": Choices((1, 2, 4)), "num_draft_tokens": IntRange(2, 16)},
        ),
        benchmark=BenchmarkSpec(
            prompts=(
                Prompt(id="code", text="Write a Python function that merges two sorted lists.", category="code"),
                Prompt(id="chat", text="Tell me about the history of Rome.", category="chat"),
            ),
            max_tokens=256,
            warmup_requests=1,
            retries=0,
        ),
        simulate=SimulateSpec(scenario="llama31-8b-h100", time_scale=SCALE, seed=0),
    )
    return sim.simulated_space(space)


def runner_for(space: Space, tmp_path) -> ProcessRunner:
    r = ProcessRunner(
        space,
        SGLangBackend(),
        log_dir=tmp_path / "logs",
        time_scale=SCALE,
        simulated=True,
        record_path=tmp_path / "e2e.pids.json",
    )
    r.term_timeout_s = 5.0
    return r


def test_baseline_and_eagle3_against_simulator(tmp_path):
    space = sim_space()
    runner = runner_for(space, tmp_path)
    results = {}
    for cfg in (
        TrialConfig.baseline(True),
        TrialConfig.make(DRAFTER, True, num_steps=5, topk=4, num_draft_tokens=8),
    ):
        with runner.launch(cfg) as session:
            assert session.info.argv[: len(space.server.launcher)] == list(space.server.launcher)
            eff = session.info.effective
            assert eff["cuda_graph"] is True
            if cfg.is_baseline:
                assert not eff["speculative_algorithm"]
            else:
                assert eff["speculative_algorithm"] == "EAGLE3"
                assert (eff["num_steps"], eff["topk"], eff["num_draft_tokens"]) == (5, 4, 8)
                assert SGLangBackend().check_effective(cfg, eff) == []
            # --sim-load-time 20 hardware seconds, plus the interpreter's start-up (also scaled by SCALE)
            assert session.info.startup_s >= 15
            session.warmup()
            prs = [session.run_prompt(i) for i in range(2)]
        assert not port_listening("127.0.0.1", session.port)
        for r in prs:
            assert r.completion_tokens > 0 and r.seconds > 0 and r.text
        results[cfg.is_baseline] = summarize(prs)
    base, spec = results[True], results[False]
    assert 100 < base["tok_per_s"] < 250  # hardware tok/s (~158 in the scenario), not the sim's wall clock
    assert base["accept_length"] is None
    assert spec["accept_length"] is not None and spec["accept_length"] > 1.5
    assert spec["tok_per_s"] > base["tok_per_s"]


def test_graphs_off_reads_back(tmp_path):
    space = sim_space()
    with runner_for(space, tmp_path).launch(TrialConfig.baseline(False)) as session:
        assert session.info.effective["cuda_graph"] is False
        assert "--disable-decode-cuda-graph" in session.info.argv


@pytest.mark.parametrize(
    ("fault", "timeout_s", "error"),
    [("crash-startup", 300.0, ServerExited), ("never-healthy", 40.0, StartupTimeout)],
)
def test_startup_faults(tmp_path, fault, timeout_s, error):
    space = sim_space("--fault", fault, startup_timeout_s=timeout_s)
    with pytest.raises(error) as ei:
        runner_for(space, tmp_path).launch(TrialConfig.baseline(True))
    assert ei.value.log_path


def test_crash_during_measurement_is_server_died(tmp_path):
    space = sim_space("--fault", "crash-after:1")
    with runner_for(space, tmp_path).launch(TrialConfig.baseline(True)) as session:
        with pytest.raises(ServerDied):
            for i in range(4):
                session.run_prompt(i % 2)


def test_oom_above_is_server_oom(tmp_path):
    from autotune.errors import ServerOOM

    space = sim_space("--fault", "oom-above:8")
    runner = runner_for(space, tmp_path)
    with pytest.raises(ServerOOM):
        runner.launch(TrialConfig.make(DRAFTER, True, num_steps=5, topk=4, num_draft_tokens=16))


def test_simulated_space_launcher_is_used(tmp_path):
    space = sim_space()
    assert dataclasses.replace(space).server.launcher[1:3] == ("-m", "autotune.sim")


def test_load_levels_over_real_concurrent_http_streams(tmp_path):
    """benchmark.concurrency [1, 4]: one server start, level 4 runs 4 real HTTP streams at once (continuous
    batching in the simulator); aggregate tok/s grows well beyond one stream's, token counts come from usage."""
    space = sim_space()
    space = dataclasses.replace(space, benchmark=dataclasses.replace(space.benchmark, concurrency=(1, 4)))
    runner = runner_for(space, tmp_path)
    cfg = TrialConfig.make(DRAFTER, True, num_steps=3, topk=1, num_draft_tokens=4)
    with runner.launch(cfg) as session:
        assert session.info.argv[session.info.argv.index("--max-running-requests") + 1] == "4"
        session.warmup()
        one = [session.run_prompt(i) for i in range(2)]
        lv = session.run_level(4)
    assert lv.level == 4 and lv.failed == 0
    assert len(lv.requests) == 8 and {r.index for r in lv.requests} == {0, 1}
    assert all(r.completion_tokens == 256 for r in lv.requests)
    single = summarize(one)["tok_per_s"]
    assert lv.tok_per_s > 2.5 * single
    s = lv.summary()
    assert s.itl_p99_ms >= s.itl_p50_ms > 0 and s.ttft_p99_ms >= s.ttft_p50_ms > 0
    # each stream gets less than the level's aggregate; that each is slower than a lone stream is the simulator's
    # batch model (tests/sim/test_batch.py, noise-free): timed here over HTTP it is ~3.5% slower when the machine
    # is quiet, and beside CI's other tests a lone stream timed at a busy moment ran slower than them (220 vs 228)
    assert 0 < s.stream_tok_per_s < lv.tok_per_s / 2

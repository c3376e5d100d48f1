"""ModelRunner: the simulator in-process on a VirtualClock."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from autotune.config import TrialConfig, summarize
from autotune.errors import BenchmarkError, ServerDied, ServerExited, ServerOOM, SpaceError, StartupTimeout
from autotune.seam import VirtualClock
from autotune.sim import load_scenario, scenario_names, simulated_space
from autotune.sim.runner import ModelRunner
from autotune.space import DrafterSpec, SimulateSpec

from .helpers import KIMI, LLAMA, StandInBackend, make_space, spec


def runner(space=None, seed: int = 0) -> tuple[ModelRunner, VirtualClock]:
    clock = VirtualClock()
    return ModelRunner(space or make_space(), StandInBackend(), clock, seed=seed), clock


def run_all(r: ModelRunner, config: TrialConfig) -> dict:
    s = r.launch(config)
    s.warmup()
    res = [s.run_prompt(i) for i in range(len(r.space.benchmark.prompts))]
    s.close()
    return summarize(res)


def test_scenarios_listed_and_simulated_space() -> None:
    assert {KIMI, LLAMA} <= set(scenario_names())
    sp = make_space()
    sc = load_scenario(KIMI)
    assert sp.server.model_path == sc.target_dir
    assert sp.drafter("aq-medai").path == sc.drafters["aq-medai"].dir
    assert sp.server.launcher == (
        sys.executable,
        "-m",
        "autotune.sim",
        "--scenario",
        KIMI,
        "--time-scale",
        "100.0",
        "--seed",
        "0",
    )
    bad = dataclasses.replace(sp, drafters=(DrafterSpec("mystery", "/x"),))
    with pytest.raises(SpaceError) as e:
        simulated_space(bad)
    assert "mystery" in str(e.value) and "aq-medai" in str(e.value)
    with pytest.raises(SpaceError):
        simulated_space(dataclasses.replace(sp, simulate=SimulateSpec(scenario="nope")))


def test_launch_charges_startup_and_reports_effective() -> None:
    r, clock = runner()
    s = r.launch(spec("custom-10k", 4, 1, 5))
    assert clock.charged["startup"] == pytest.approx(420 + 45)
    assert s.info.simulated and s.info.startup_s == pytest.approx(465)
    assert s.info.effective["speculative_num_draft_tokens"] == 5
    assert s.info.effective["disable_cuda_graph"] is True
    s.warmup()
    assert 0 < clock.charged["warmup"] < 3
    res = s.run_prompt(1)
    assert res.completion_tokens == 1024 and res.finish_reason == "length"
    assert clock.charged["generate"] == pytest.approx(res.seconds)
    assert 1.5 < res.accept_length < 3.5
    assert 0 < res.ttft_s < 0.1


def test_figures_match_the_field_report() -> None:
    r, _ = runner()
    base = run_all(r, spec(None))
    assert base["tok_per_s"] == pytest.approx(90, rel=0.06)
    assert base["accept_length"] is None
    aq = run_all(r, spec("aq-medai", 4, 1, 5))
    assert aq["tok_per_s"] == pytest.approx(50.5, rel=0.08)
    per = aq["per_prompt_tok_per_s"]
    assert max(per) / min(per) - 1 >= 0.10
    assert r.true_tok_per_s(spec("custom-10k", 3, 4, 16)) == pytest.approx(56.7, rel=0.08)
    assert r.true_tok_per_s(spec("custom-10k", 4, 1, 5)) == pytest.approx(53.2, rel=0.08)


def test_text_is_lossless_across_configs() -> None:
    r, _ = runner()
    texts = []
    for cfg in (spec(None), spec("aq-medai", 4, 1, 5), spec("custom-10k", 3, 4, 16, True)):
        s = r.launch(cfg)
        texts.append(s.run_prompt(2).text)
    assert texts[0] == texts[1] == texts[2]
    assert len(texts[0]) > 1024


def test_noise_per_launch_and_true_value() -> None:
    r, _ = runner(make_space(max_tokens=256))
    cfg = spec("custom-10k", 3, 4, 16)
    rates = [run_all(r, cfg)["tok_per_s"] for _ in range(60)]
    true = r.true_tok_per_s(cfg)
    assert np.std(np.log(rates)) == pytest.approx(0.025, rel=0.35)
    assert np.mean(rates) == pytest.approx(true, rel=0.012)
    assert len(set(rates)) == 60
    # a different runner seed gives different starts; the same seed the same
    r2, _ = runner(make_space(max_tokens=256))
    assert [run_all(r2, cfg)["tok_per_s"] for _ in range(3)] == rates[:3]


def test_llama_best_tree_beats_baseline_twice() -> None:
    r, _ = runner(make_space(LLAMA, ("eagle3-llama31-8b",)))
    base = r.true_tok_per_s(spec(None, cuda_graph=True))
    assert base == pytest.approx(158, rel=0.02)
    best = max(r.true_tok_per_s(spec("eagle3-llama31-8b", s, 8, n, True)) for s, n in ((5, 32), (6, 48), (8, 64)))
    assert best > 2 * base
    assert r.true_tok_per_s(spec(None)) == pytest.approx(84.8, rel=0.02)


def test_eagle3_drafter_under_eagle_accepts_nothing() -> None:
    sp = make_space(algorithms={"custom-10k": "EAGLE"})
    r, _ = runner(sp)
    s = r.launch(spec("custom-10k", 3, 4, 16))
    assert s.info.effective["speculative_algorithm"] == "EAGLE"
    res = s.run_prompt(0)
    assert res.accept_length < 1.1


def test_launch_failures_raise_and_charge() -> None:
    r, clock = runner(make_space(drafters=("custom-10k", "wrong-hidden", "eagle1-legacy")))
    with pytest.raises(ServerExited) as e:
        r.launch(spec("custom-10k", 3, 4, 40))
    assert "too large" in e.value.log_tail and e.value.returncode == 1
    assert not isinstance(e.value, ServerOOM)
    with pytest.raises(ServerExited) as e:
        r.launch(spec("wrong-hidden", 3, 1, 4))
    assert "size mismatch" in e.value.log_tail
    with pytest.raises(ServerExited) as e:
        r.launch(spec("eagle1-legacy", 3, 1, 4))  # the stand-in backend passes EAGLE3 unless told otherwise
    assert "shapes cannot be multiplied" in e.value.log_tail
    assert clock.charged["startup"] == pytest.approx(12 + 420 + 420)


def test_eagle1_drafter_runs_under_eagle_and_crashes_under_eagle3() -> None:
    r, _ = runner(make_space(drafters=("eagle1-legacy",), algorithms={"eagle1-legacy": "EAGLE"}))
    s = r.launch(spec("eagle1-legacy", 3, 1, 4))
    assert s.run_prompt(0).accept_length > 1.3
    r, _ = runner(make_space(drafters=("eagle1-legacy",), algorithms={"eagle1-legacy": "EAGLE3"}))
    with pytest.raises(ServerExited) as e:
        r.launch(spec("eagle1-legacy", 3, 1, 4))
    assert "shapes cannot be multiplied" in e.value.log_tail


def test_faults_in_process() -> None:
    r, clock = runner(make_space(extra_args=("--fault", "oom-above:16")))
    r.launch(spec("custom-10k", 3, 4, 16))
    with pytest.raises(ServerOOM) as e:
        r.launch(spec("custom-10k", 3, 4, 17))
    assert "CUDA out of memory" in e.value.log_tail
    r, clock = runner(make_space(extra_args=("--fault", "never-healthy"), startup_timeout_s=600))
    with pytest.raises(StartupTimeout):
        r.launch(spec(None))
    assert clock.charged["startup"] == pytest.approx(600)
    r, clock = runner(make_space(startup_timeout_s=300))
    with pytest.raises(StartupTimeout):
        r.launch(spec(None))  # Kimi loads for 420 s
    r, _ = runner(make_space(extra_args=("--fault", "crash-startup")))
    with pytest.raises(ServerExited) as e:
        r.launch(spec(None))
    assert "NCCL" in e.value.log_tail
    # request faults: retried like the HTTP client does, or fatal
    r, _ = runner(make_space(extra_args=("--fault", "http500:2", "--fault", "truncate:3"), retries=2))
    s = r.launch(spec(None))
    s.warmup()  # request 1
    assert s.run_prompt(0).completion_tokens == 1024  # requests 2 (500), 3 (truncated), 4 (ok)
    r, _ = runner(make_space(extra_args=("--fault", "http500:2", "--fault", "http500:3"), retries=1))
    s = r.launch(spec(None))
    s.warmup()
    with pytest.raises(BenchmarkError):
        s.run_prompt(0)
    r, _ = runner(make_space(extra_args=("--fault", "crash-after:2")))
    s = r.launch(spec(None))
    s.warmup()
    s.run_prompt(0)
    with pytest.raises(ServerDied):
        s.run_prompt(1)
    with pytest.raises(ServerDied):
        s.run_prompt(2)


def test_200_trials_charge_the_virtual_clock() -> None:
    """Each simulated start and its prompts are charged to the virtual clock (the sim's speed is a benchmark's,
    scripts/bench_overhead.py, never a wall-clock assertion here)."""
    r, clock = runner()
    configs = [spec("custom-10k", 3, 4, 16), spec("aq-medai", 4, 1, 5), spec(None), spec("aq-medai", 5, 2, 12, True)]
    for i in range(200):
        run_all(r, configs[i % 4])
    assert clock.now() > 200 * 420


def test_through_the_real_sglang_backend() -> None:
    from autotune.backends.sglang import SGLangBackend

    space = make_space(drafters=("custom-10k", "aq-medai", "eagle1-legacy"))
    backend = SGLangBackend()
    clock = VirtualClock()
    r = ModelRunner(space, backend, clock)
    cfg = spec("aq-medai", 4, 1, 5)
    s = r.launch(cfg)
    assert s.info.argv[1:3] == ["-m", "autotune.sim"]
    eff = backend.read_effective({"server_args": s.info.effective})
    assert (eff["speculative_algorithm"], eff["num_steps"], eff["topk"], eff["num_draft_tokens"]) == ("EAGLE3", 4, 1, 5)
    assert eff["cuda_graph"] is False
    assert backend.check_effective(cfg, eff) == []
    s.warmup()
    res = [s.run_prompt(i) for i in range(5)]
    assert summarize(res)["tok_per_s"] == pytest.approx(50.5, rel=0.08)
    # the backend derives EAGLE for the EAGLE-1 stand-in (no Eagle3 architecture): it starts and accepts
    s = r.launch(spec("eagle1-legacy", 3, 1, 4))
    assert s.info.effective["speculative_algorithm"] == "EAGLE"
    assert s.run_prompt(0).accept_length > 1.3
    # graphs on, baseline
    s = r.launch(spec(None, cuda_graph=True))
    assert backend.read_effective({"server_args": s.info.effective})["cuda_graph"] is True
    assert summarize([s.run_prompt(0)])["tok_per_s"] == pytest.approx(141, rel=0.06)

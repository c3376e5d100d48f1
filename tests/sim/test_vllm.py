"""The simulator playing vLLM 0.33.0 (``--engine vllm``): ``vllm serve``'s argv and its speculative rules, its
OpenAI endpoints and its Prometheus spec-decode counters, read by autotune's vLLM backend."""

from __future__ import annotations

import json

import httpx
import pytest

from autotune.backends.streams import metric_total, parse_prometheus
from autotune.backends.vllm import VLLMBackend
from autotune.sim import FIELD_REPORT_PROMPTS, parse_launch_args
from autotune.sim.engine import SimEngine
from autotune.sim.launch import SimLaunchError

from .helpers import KIMI, sim_process, sse_events

DSV3 = "deepseek-v3-mtp-h200"


def vllm(spec: dict | None, *extra: str, scenario: str = KIMI, model: str = "kimi-k25"):
    argv = ["--engine", "vllm", "--scenario", scenario, model, *extra]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    return parse_launch_args(argv)


@pytest.mark.parametrize(
    ("spec", "scenario", "model", "method", "drafter"),
    [
        (
            {"method": "eagle3", "model": "aq-medai", "num_speculative_tokens": 3},
            KIMI,
            "kimi-k25",
            "EAGLE3",
            "aq-medai",
        ),
        (
            {"method": "eagle", "model": "custom-10k", "num_speculative_tokens": 3},
            KIMI,
            "kimi-k25",
            "EAGLE",
            "custom-10k",
        ),
        ({"method": "ngram", "num_speculative_tokens": 3}, KIMI, "kimi-k25", "NGRAM", None),
        ({"method": "mtp", "num_speculative_tokens": 3}, DSV3, "deepseek-v3", "MTP", "mtp"),
    ],
)
def test_each_method_runs_as_a_chain_of_k_drafted_tokens(spec, scenario, model, method, drafter) -> None:
    args = vllm(spec, scenario=scenario, model=model)
    assert args.engine == "vllm" and args.method == method
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert (args.drafter.name if args.drafter else None) == drafter
    assert args.server_args()["speculative_config"]["method"] == spec["method"]
    assert args.cuda_graph and args.port == 8000 and args.enable_metrics


def test_draft_model_runs_the_standalone_model() -> None:
    args = parse_launch_args(
        [
            "--engine=vllm",
            "--scenario",
            "llama31-8b-h100-methods",
            "llama-3.1-8b-instruct",
            "--enforce-eager",
            "--max-num-seqs",
            "8",
            "--speculative-config",
            json.dumps({"method": "draft_model", "model": "llama32-1b", "num_speculative_tokens": 2}),
        ]
    )
    assert args.method == "STANDALONE" and args.drafter is not None and args.drafter.kind == "standalone"
    assert not args.cuda_graph and args.effective_max_running == 8
    assert args.server_args()["enforce_eager"] is True


def test_ngram_takes_vllms_prompt_lookup_defaults_and_checks_them() -> None:
    args = vllm({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4})
    assert args.speculative_config is not None
    assert (args.speculative_config["prompt_lookup_min"], args.speculative_config["prompt_lookup_max"]) == (4, 4)
    assert vllm({"method": "ngram", "num_speculative_tokens": 2}).speculative_config["prompt_lookup_min"] == 5
    with pytest.raises(SimLaunchError, match="prompt_lookup_min=4 must be <= prompt_lookup_max=2"):
        vllm({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})


@pytest.mark.parametrize(
    ("spec", "scenario", "message"),
    [
        # SGLang's EAGLE-1 format: vLLM's registry has no EagleLlamaForCausalLMEagle
        (
            {"method": "eagle", "model": "eagle1-legacy", "num_speculative_tokens": 2},
            KIMI,
            "Model architectures ['LlamaForCausalLMEagle'] are not supported for now.",
        ),
        ({"method": "mtp", "num_speculative_tokens": 1}, "llama31-8b-h100", "Unsupported speculative method: 'mtp'"),
        ({"method": "eagle3", "num_speculative_tokens": 2}, KIMI, "without speculative model"),
        ({"method": "eagle3", "model": "aq-medai"}, KIMI, "num_speculative_tokens must be provided"),
        ({"method": "eagle3", "model": "aq-medai", "num_speculative_tokens": 0}, KIMI, "greater than zero"),
        ({"method": "suffix", "num_speculative_tokens": 2}, KIMI, "'suffix' is not simulated"),
    ],
)
def test_a_launch_vllm_refuses_fails_with_its_message(spec, scenario, message) -> None:
    from autotune.sim import load_scenario

    with pytest.raises(SimLaunchError) as e:
        vllm(spec, scenario=scenario, model=load_scenario(scenario).target_name)
    assert message in e.value.log and e.value.returncode == 1


def test_a_speculative_config_that_is_not_json_is_a_usage_error() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(["--engine", "vllm", "--scenario", KIMI, "kimi-k25", "--speculative-config", "{method:"])
    assert e.value.returncode == 2 and "argument --speculative-config" in e.value.log


def test_an_unknown_engine_is_a_usage_error() -> None:
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args(["--engine", "trt", "--scenario", KIMI, "kimi-k25"])
    assert e.value.returncode == 2 and "--engine must be one of sglang, vllm but got 'trt'" in str(e.value)


def test_per_batch_size_tokens_pick_k_by_the_running_batch_as_vllm_looks_it_up() -> None:
    # vLLM's build_dynamic_sd_schedule_lookup: a range's K (capped by num_speculative_tokens); a gap or the tail
    # carries the previous range's K on
    sched = [[1, 2, 6], [3, 8, 2], [17, 32, 0]]
    args = vllm({"method": "eagle3", "model": "aq-medai", "num_speculative_tokens": 4, **_pbs(sched)})
    controller = SimEngine(args, 0).adaptive
    assert controller is not None
    got = {b: controller.steps(b) for b in (1, 2, 3, 8, 9, 16, 17, 32, 200)}
    assert got == {1: 4, 2: 4, 3: 2, 8: 2, 9: 2, 16: 2, 17: 0, 32: 0, 200: 0}


def _pbs(schedule: list[list[int]]) -> dict:
    return {"num_speculative_tokens_per_batch_size": schedule}


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([[2, 4, 3]], "The first batch-size range must start at 1"),
        ([[1, 4, 3], [4, 8, 2]], "non-overlapping and sorted"),
        ([[1, 4]], "3-item sequence"),
        ([[1, 4, -1]], "values must be >= 0"),
        ([], "must be a non-empty list"),
    ],
)
def test_a_schedule_vllm_refuses_fails_with_its_message(schedule, message) -> None:
    with pytest.raises(SimLaunchError, match=message):
        vllm({"method": "eagle3", "model": "aq-medai", "num_speculative_tokens": 3, **_pbs(schedule)})


@pytest.mark.slow
def test_the_http_server_serves_vllms_endpoints_and_counters(tmp_path) -> None:
    spec = {"method": "eagle3", "model": "aq-medai", "num_speculative_tokens": 3}
    argv = ["--engine", "vllm", "kimi-k25", "--speculative-config", json.dumps(spec)]
    backend = VLLMBackend()
    with sim_process(argv, tmp_path) as sim:
        sim.wait_healthy()
        assert httpx.get(sim.url + "/version", timeout=2).json() == {"version": "0.33.0"}
        assert httpx.get(sim.url + "/server_info", timeout=2).status_code == 404
        assert httpx.post(sim.url + "/generate", json={"text": "x"}, timeout=2).status_code == 404
        before = parse_prometheus(httpx.get(sim.url + "/metrics", timeout=2).text)
        assert before['vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi-k25"}'] == 0.0
        body = {"prompt": FIELD_REPORT_PROMPTS[1][1], "max_tokens": 200, "temperature": 0}
        events, _ = sse_events(sim.url, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
        assert events[-1] == "[DONE]" and not any("sglext" in e for e in events if isinstance(e, dict))
        usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
        assert usage[-1]["completion_tokens"] == 200
        after = parse_prometheus(httpx.get(sim.url + "/metrics", timeout=2).text)
    accept = backend.acceptance_from_metrics(before, after)
    positions = backend.positions_from_metrics(before, after)

    def delta(name: str) -> float:
        return (metric_total(after, name) or 0.0) - (metric_total(before, name) or 0.0)

    rate = delta("vllm:spec_decode_num_accepted_tokens_total") / delta("vllm:spec_decode_num_draft_tokens_total")
    assert accept is not None and 1.5 < accept <= 4.0
    assert positions is not None and len(positions.accepted) == 3
    assert positions.accepted[0] >= positions.accepted[1] >= positions.accepted[2]
    # the counters agree with each other: 1 + accepted/drafts, accepted/(3 x drafts)
    drafts = positions.drafts
    assert accept == pytest.approx(1 + sum(positions.accepted) / drafts)
    assert rate == pytest.approx(sum(positions.accepted) / (3 * drafts))


@pytest.mark.slow
def test_an_eagle3_head_launched_as_eagle_accepts_nothing_and_says_nothing(tmp_path) -> None:
    spec = {"method": "eagle", "model": "custom-10k", "num_speculative_tokens": 3}
    argv = ["--engine", "vllm", "kimi-k25", "--speculative-config", json.dumps(spec)]
    with sim_process(argv, tmp_path) as sim:
        sim.wait_healthy()
        before = parse_prometheus(httpx.get(sim.url + "/metrics", timeout=2).text)
        body = {"prompt": FIELD_REPORT_PROMPTS[1][1], "max_tokens": 64, "temperature": 0}
        sse_events(sim.url, "/v1/completions", body)
        after = parse_prometheus(httpx.get(sim.url + "/metrics", timeout=2).text)
        log = sim.log()
    assert VLLMBackend().acceptance_from_metrics(before, after) == 1.0  # drafts made, none accepted
    assert "WARNING" not in log and "ERROR" not in log

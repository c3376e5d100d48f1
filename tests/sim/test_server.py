"""The HTTP server as a real process: endpoints, shapes, streaming, determinism, metrics, shutdown."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

from autotune.sim import FIELD_REPORT_PROMPTS

from .helpers import KIMI, completion_text, sim_process, sse_events

pytestmark = pytest.mark.slow

PROMPT = FIELD_REPORT_PROMPTS[1][1]
SPEC = [
    "--model-path",
    "kimi-k25",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "aq-medai",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "16",
    "--disable-cuda-graph",
    "--enable-metrics",
]


def test_loading_then_healthy_info_and_metrics(tmp_path) -> None:
    # 100 hardware seconds of loading at time scale 200: 0.5 s of 503s
    with sim_process(SPEC, tmp_path, time_scale=200, load_time=100) as sim:
        deadline = time.monotonic() + 10
        codes = []
        while time.monotonic() < deadline:
            try:
                codes.append(httpx.get(sim.url + "/health", timeout=1).status_code)
                if codes[-1] == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        assert 503 in codes and codes[-1] == 200
        assert httpx.get(sim.url + "/health_generate", timeout=1).status_code == 200
        assert httpx.get(sim.url + "/ready", timeout=1).status_code == 200
        info = httpx.get(sim.url + "/server_info", timeout=1).json()
        sa = info["server_args"]
        assert (
            sa["speculative_algorithm"],
            sa["speculative_num_steps"],
            sa["speculative_eagle_topk"],
            sa["speculative_num_draft_tokens"],
            sa["disable_cuda_graph"],
        ) == ("EAGLE3", 3, 4, 16, True)
        assert sa["speculative_draft_model_path"] == "aq-medai"
        assert info["version"] and info["sim"] == {
            "scenario": KIMI,
            "time_scale": 200.0,
            "seed": 0,
            "launch_index": 0,
            "faults": [],
            "drafter": "aq-medai",
        }
        assert httpx.get(sim.url + "/get_server_info", timeout=1).json()["server_args"] == sa

        # native /generate, streamed
        events, _ = sse_events(
            sim.url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 200, "temperature": 0}}
        )
        assert events[-1] == "[DONE]"
        chunks = [e for e in events if isinstance(e, dict)]
        final = chunks[-1]["meta_info"]
        assert final["completion_tokens"] == 200 and final["finish_reason"]["type"] == "length"
        assert final["prompt_tokens"] > 5 and final["e2e_latency"] > 0
        # one chunk per round, except that rounds due within COALESCE_S wall seconds share a chunk at high scales
        # (the first token from prefill counts as one round)
        assert len(chunks) <= final["spec_verify_ct"] <= 200
        assert final["spec_accept_length"] == pytest.approx(200 / final["spec_verify_ct"])
        assert final["spec_accept_rate"] == pytest.approx(final["spec_accept_length"] / 16)
        assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts == sorted(counts) and max(b - a for a, b in zip(counts, counts[1:], strict=False)) >= 2
        assert all(chunks[i + 1]["text"].startswith(chunks[i]["text"]) for i in range(len(chunks) - 1))  # cumulative
        generate_text = chunks[-1]["text"]

        # non-streaming /generate
        one = httpx.post(
            sim.url + "/generate",
            json={"text": PROMPT, "sampling_params": {"max_new_tokens": 200, "temperature": 0}},
            timeout=10,
        ).json()
        assert one["text"] == generate_text and one["meta_info"]["completion_tokens"] == 200

        # OpenAI completions with usage
        events, _ = sse_events(
            sim.url,
            "/v1/completions",
            {"prompt": PROMPT, "max_tokens": 200, "temperature": 0, "stream_options": {"include_usage": True}},
        )
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 200
        assert usage["sglext"]["spec_verify_ct"] >= 200 / 4
        last_choice = events[-3]
        assert last_choice["choices"][0]["finish_reason"] == "length" and "sglext" in last_choice
        assert completion_text(events) == generate_text

        # chat completions
        events, _ = sse_events(
            sim.url,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 50, "temperature": 0},
        )
        content = "".join(e["choices"][0]["delta"]["content"] for e in events if isinstance(e, dict))
        assert content == generate_text[: len(content)] and len(content) > 50

        # metrics and cumulative accept length
        metrics = httpx.get(sim.url + "/metrics", timeout=1).text
        values = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("sglang:")
        }
        assert values["sglang:spec_num_steps"] == 3 and values["sglang:spec_num_draft_tokens"] == 16
        assert values["sglang:generation_tokens_total"] == 200 * 3 + 50
        assert values["sglang:spec_accept_length"] == pytest.approx(
            values["sglang:generation_tokens_total"] / values["sglang:spec_verify_calls_total"]
        )
        assert 1.5 < values["sglang:spec_accept_length"] < 4
        assert values["sglang:gen_throughput"] > 0  # some decode batch log interval has passed
        assert "# TYPE sglang:spec_verify_calls_total counter" in metrics
        state = httpx.get(sim.url + "/server_info", timeout=1).json()["internal_states"][0]
        assert state["avg_spec_accept_length"] == pytest.approx(values["sglang:spec_accept_length"])
        log = sim.log()
        assert "The server is fired up and ready to roll!" in log
        assert "Decode batch" in log and "accept len:" in log and "gen throughput (token/s):" in log


def test_text_is_identical_across_configs_and_deterministic(tmp_path) -> None:
    texts = []
    for flags in (["--model-path", "kimi-k25"], SPEC):
        with sim_process(flags, tmp_path, time_scale=400) as sim:
            sim.wait_healthy()
            for _ in range(2):
                events, _ = sse_events(
                    sim.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 300, "temperature": 0}
                )
                texts.append(completion_text(events))
            short, _ = sse_events(sim.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 0})
            assert texts[-1].startswith(completion_text(short))
            hot1, _ = sse_events(sim.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 1})
            hot2, _ = sse_events(sim.url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 1})
            assert completion_text(hot1) != completion_text(hot2)
    assert len(set(texts)) == 1 and len(texts[0]) > 300


def test_chunks_arrive_on_time(tmp_path) -> None:
    """The stream follows the model's round times (monotonic deadlines) at this time scale."""
    from autotune.sim.engine import SimEngine
    from autotune.sim.launch import parse_launch_args

    scale = 5.0
    argv = ["--scenario", KIMI, "--time-scale", str(scale), "--launch-index", "0", "--sim-load-time", "0", *SPEC]
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 200, "temperature": 0}}
    with sim_process(SPEC, tmp_path, time_scale=scale) as sim, httpx.Client() as client:
        sim.wait_healthy()
        sse_events(sim.url, "/generate", {**body, "sampling_params": {"max_new_tokens": 2}}, client=client)  # warm
        events, times = sse_events(sim.url, "/generate", body, client=client)
    plan = SimEngine(parse_launch_args(argv), 0).generate(PROMPT, 200, request_index=2).plan
    expected = [plan.ttft_ms, *plan.times_ms.tolist()]
    got = [t * 1000 * scale for t in times[:-1]]  # hardware ms; [DONE] excluded
    assert len(got) == len(expected)
    assert got[-1] == pytest.approx(expected[-1], rel=0.10)  # request latency included
    # chunks keep to their times (give or take the request's latency): half within 50 hardware ms (10 wall ms at
    # this scale), 95% within 400; wide margins, since CI machines are shared and noisy
    offset = sorted(g - e for g, e in zip(got, expected, strict=True))[len(got) // 2]
    dev = sorted(abs(g - e - offset) for g, e in zip(got, expected, strict=True))
    assert dev[len(dev) // 2] < 50 and dev[int(len(dev) * 0.95)] < 400


def test_sigterm_exits_zero_and_port_is_reusable(tmp_path) -> None:
    with sim_process(["--model-path", "kimi-k25"], tmp_path) as sim:
        sim.wait_healthy()
        port = sim.port
        # a long stream in flight must not hold the shutdown
        with httpx.stream(
            "POST",
            sim.url + "/v1/completions",
            json={"prompt": PROMPT, "max_tokens": 100000, "temperature": 0, "stream": True},
            timeout=5,
        ) as r:
            next(r.iter_lines())
            t0 = time.monotonic()
            sim.proc.send_signal(signal.SIGTERM)
            assert sim.wait_exit(5) == 0
            assert time.monotonic() - t0 < 2
    with sim_process(["--model-path", "kimi-k25"], tmp_path, port=port) as again:
        again.wait_healthy()
        assert json.loads(httpx.get(again.url + "/server_info", timeout=1).text)["server_args"]["port"] == port


def test_startup_refusal_exits_nonzero_with_sglang_text(tmp_path) -> None:
    with sim_process(
        [
            "--model-path",
            "kimi-k25",
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "custom-10k",
            "--speculative-num-steps",
            "2",
            "--speculative-eagle-topk",
            "2",
            "--speculative-num-draft-tokens",
            "9",
        ],
        tmp_path,
    ) as sim:
        assert sim.wait_exit(10) == 1
        assert "too large" in sim.log()


def test_topk1_rewrite_visible_in_server_info(tmp_path) -> None:
    flags = [
        "--model-path",
        "kimi-k25",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "custom-10k",
        "--speculative-num-steps",
        "4",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "16",
    ]
    with sim_process(flags, tmp_path) as sim:
        sim.wait_healthy()
        sa = httpx.get(sim.url + "/server_info", timeout=1).json()["server_args"]
        assert sa["speculative_num_draft_tokens"] == 5
        assert "adjusted to speculative_num_steps+1" in sim.log()

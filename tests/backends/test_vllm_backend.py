"""vLLM backend: argv, rules, Optuna encoding, /metrics acceptance (recorded samples). No live vLLM here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import pytest

from autotune.backends import get_backend
from autotune.backends.streams import parse_openai_chunk, parse_prometheus
from autotune.backends.vllm import VLLMBackend
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.space import BenchmarkSpec, Choices, DrafterSpec, IntRange, SearchSpec, ServerSpec, Space

SAMPLES = Path(__file__).with_name("samples")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_space(knobs=None, launcher=(), extra_args=()) -> Space:
    return Space(
        name="v",
        server=ServerSpec(
            backend="vllm",
            model_path="meta-llama/Llama-3.1-8B-Instruct",
            launcher=tuple(launcher),
            extra_args=tuple(extra_args),
        ),
        drafters=(
            DrafterSpec("e3", "/models/eagle3-llama", algorithm="EAGLE3"),
            DrafterSpec("e1", "/models/eagle-llama", algorithm="EAGLE"),
            DrafterSpec("small", "/models/llama-1b", algorithm="draft_model"),
        ),
        search=SearchSpec(
            cuda_graph=(True, False),
            knobs=knobs
            if knobs is not None
            else {
                "method": Choices(("eagle", "eagle3", "draft_model", "ngram")),
                "num_speculative_tokens": IntRange(1, 8),
            },
        ),
        benchmark=BenchmarkSpec(),
    )


def spec_json(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_registry_builds_vllm():
    assert isinstance(get_backend("vllm"), VLLMBackend)


def test_argv_baseline():
    argv = VLLMBackend().argv(TrialConfig.baseline(True), make_space(), port=8000)
    assert argv == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "127.0.0.1", "--port", "8000"]
    assert VLLMBackend().argv(TrialConfig.baseline(False), make_space(), port=8000)[-1] == "--enforce-eager"


@pytest.mark.parametrize(
    ("drafter", "knobs", "expected"),
    [
        (
            "e3",
            {"method": "eagle3", "num_speculative_tokens": 3},
            {
                "method": "eagle3",
                "model": "/models/eagle3-llama",
                "num_speculative_tokens": 3,
                "draft_tensor_parallel_size": 1,
            },
        ),
        (
            "e1",
            {"method": "eagle", "num_speculative_tokens": 5},
            {
                "method": "eagle",
                "model": "/models/eagle-llama",
                "num_speculative_tokens": 5,
                "draft_tensor_parallel_size": 1,
            },
        ),
        (
            "small",
            {"method": "draft_model", "num_speculative_tokens": 4},
            {
                "method": "draft_model",
                "model": "/models/llama-1b",
                "num_speculative_tokens": 4,
                "draft_tensor_parallel_size": 1,
            },
        ),
        (
            "e3",
            {"method": "ngram", "num_speculative_tokens": 4},
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1},
        ),
        ("e3", {"method": "mtp", "num_speculative_tokens": 1}, {"method": "mtp", "num_speculative_tokens": 1}),
        (
            "e3",
            {"num_speculative_tokens": 2},
            {
                "method": "eagle3",
                "model": "/models/eagle3-llama",
                "num_speculative_tokens": 2,
                "draft_tensor_parallel_size": 1,
            },
        ),
    ],
)
def test_speculative_config_is_one_json_argv_element(drafter, knobs, expected):
    argv = VLLMBackend().argv(TrialConfig.make(drafter, True, **knobs), make_space(), port=1)
    assert spec_json(argv) == expected
    assert sum(a == "--speculative-config" for a in argv) == 1
    assert "--enforce-eager" not in argv


def test_launcher_and_extra_args_verbatim():
    launcher = (sys.executable, "-m", "vllm.entrypoints.cli.main", "serve")
    extra = ("--tensor-parallel-size", "2", "--served-model-name", "$(whoami); x")
    argv = VLLMBackend().argv(
        TrialConfig.make("e3", False, method="eagle3", num_speculative_tokens=3),
        make_space(launcher=launcher, extra_args=extra),
        port=9,
    )
    assert argv[:4] == list(launcher) and argv[-4:] == list(extra)
    assert "--enforce-eager" in argv and all(isinstance(a, str) for a in argv)


@pytest.mark.parametrize(
    ("drafter", "knobs", "reason"),
    [
        ("e3", {"method": "eagle", "num_speculative_tokens": 3}, "would run it wrongly"),
        ("e1", {"method": "eagle3", "num_speculative_tokens": 3}, "would run it wrongly"),
        ("e3", {"method": "medusa", "num_speculative_tokens": 3}, "method must be one of"),
        ("e3", {"method": "eagle3", "num_speculative_tokens": 0}, "at least 1"),
        ("e3", {"method": "eagle3"}, "at least 1"),
        ("e3", {"method": "eagle3", "num_speculative_tokens": 3, "topk": 2}, "unknown vLLM knobs"),
        ("zzz", {"method": "eagle3", "num_speculative_tokens": 3}, "not in the space"),
    ],
)
def test_resolve_infeasible(drafter, knobs, reason):
    with pytest.raises(InfeasibleConfig, match=reason):
        VLLMBackend().resolve(TrialConfig.make(drafter, True, **knobs), make_space())


@pytest.mark.parametrize(
    "knobs",
    [
        {"method": Choices(("eagle", "eagle3", "draft_model", "ngram")), "num_speculative_tokens": IntRange(1, 8)},
        {"num_speculative_tokens": Choices((1, 2, 4))},
    ],
)
def test_suggest_only_feasible(knobs):
    space = make_space(knobs)
    backend = VLLMBackend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    dists: dict = {}
    for _ in range(120):
        trial = study.ask()
        cfg = backend.suggest(trial, space)
        assert backend.resolve(cfg, space) == cfg
        assert backend.params(cfg, space) == trial.params
        for name, dist in trial.distributions.items():
            assert dists.setdefault(name, dist) == dist
        study.tell(trial, 1.0)


def test_metrics_acceptance_from_recorded_samples():
    before = parse_prometheus((SAMPLES / "vllm_metrics_before.txt").read_text())
    after = parse_prometheus((SAMPLES / "vllm_metrics_after.txt").read_text())
    b = VLLMBackend()
    assert b.acceptance_from_metrics(before, after) == pytest.approx(1 + 266 / 128)
    assert b.acceptance_from_metrics(before, before) is None  # no drafts in between
    assert b.acceptance_from_metrics({}, {}) is None  # no speculation metrics (baseline server)


def test_completions_stream_sample_parses():
    chunks = []
    for line in (SAMPLES / "vllm_completions_stream.txt").read_text().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(VLLMBackend().parse_chunk(json.loads(line[6:])))
    assert "".join(c.text or "" for c in chunks) == " The quick brown fox jumps over the"
    assert chunks[3].finish_reason == "length" and not chunks[3].final
    assert chunks[-1].final and chunks[-1].completion_tokens == 7 and chunks[-1].prompt_tokens == 9
    assert not any(c.cumulative for c in chunks)


def test_openai_request_shape():
    path, body = VLLMBackend().request("hi", max_tokens=32, temperature=0.0, model="m")
    assert path == "/v1/completions"
    assert body == {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 32,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_chunk_delta():
    c = parse_openai_chunk({"choices": [{"delta": {"content": "yo"}, "finish_reason": "stop"}]})
    assert c.text == "yo" and c.finish_reason == "stop" and not c.final

"""SGLang backend: argv tables, resolve rules, the Optuna encoding, defaults, reading the server back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.backends import get_backend
from autotune.backends.sglang import SGLangBackend
from autotune.backends.sglang_methods import (
    LEGACY,
    PER_PHASE,
    cuda_graph_spelling,
    feasibility_reason,
    flag_spelling_from_help,
    parse_version,
    tree_bound,
)
from autotune.backends.streams import parse_generate_chunk
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig, ValidationFailed
from autotune.space import BenchmarkSpec, Choices, DrafterSpec, IntRange, SearchSpec, ServerSpec, Space

SAMPLES = Path(__file__).with_name("samples")
DUMP = Path(__file__).with_name("dump_argv.py")

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_space(
    *,
    knobs=None,
    version: str | None = "0.5.23",
    launcher=(),
    extra_args=(),
    cuda_graph=(True, False),
    drafters=None,
    model_path="/models/target",
    search_drafters=(),
) -> Space:
    return Space(
        name="t",
        server=ServerSpec(
            model_path=model_path, version=version, launcher=tuple(launcher), extra_args=tuple(extra_args), port=30000
        ),
        drafters=drafters
        or (
            DrafterSpec("e3", "/models/e3", algorithm="EAGLE3"),
            DrafterSpec("e1", "/models/e1", algorithm="eagle"),
        ),
        search=SearchSpec(
            drafters=tuple(search_drafters),
            cuda_graph=tuple(cuda_graph),
            knobs=knobs
            if knobs is not None
            else {"num_steps": IntRange(1, 6), "topk": Choices((1, 2, 4, 8)), "num_draft_tokens": IntRange(2, 32)},
        ),
        benchmark=BenchmarkSpec(),
    )


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# -- argv ------------------------------------------------------------------------------------------------


def test_registry_builds_sglang():
    assert isinstance(get_backend("sglang"), SGLangBackend)


def test_argv_baseline_graphs_on():
    argv = SGLangBackend().argv(TrialConfig.baseline(True), make_space(), port=31000)
    assert argv == [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/target",
        "--host",
        "127.0.0.1",
        "--port",
        "31000",
        "--enable-metrics",
    ]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.4.9", ["--disable-cuda-graph"]),
        ("0.5.22", ["--disable-cuda-graph"]),
        # 0.5.23 deprecates --disable-cuda-graph (server_args.py: DeprecatedStoreTrueAction)
        ("0.5.23", ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
        ("0.5.23.post1", ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
        (None, ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
        ("0.5.24", ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
        ("0.6.0rc1", ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
        ("v1.0", ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]),
    ],
)
@pytest.mark.parametrize("drafter", [None, "e3"])
def test_cuda_graph_off_spelling_by_version(version, expected, drafter):
    space = make_space(version=version)
    cfg = (
        TrialConfig.baseline(False)
        if drafter is None
        else TrialConfig.make(drafter, False, num_steps=2, topk=2, num_draft_tokens=4)
    )
    argv = SGLangBackend().argv(cfg, space, port=1)
    graph_flags = [a for a in argv if "cuda-graph" in a]
    assert graph_flags == expected
    on = SGLangBackend().argv(TrialConfig(cfg.drafter, True, cfg.knobs), space, port=1)
    assert not [a for a in on if "cuda-graph" in a]


@pytest.mark.parametrize("spelling", [LEGACY, PER_PHASE])
def test_spelling_override_beats_version(spelling):
    argv = SGLangBackend(cuda_graph_spelling=spelling).argv(TrialConfig.baseline(False), make_space(), port=1)
    want = ["--disable-cuda-graph"] if spelling == LEGACY else ["--disable-decode-cuda-graph"]
    assert [a for a in argv if "cuda-graph" in a][: len(want)] == want


def test_bad_spelling_rejected():
    with pytest.raises(ValueError, match="cuda_graph_spelling"):
        SGLangBackend(cuda_graph_spelling="old")


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({"num_steps": 3, "topk": 1, "num_draft_tokens": 4}, ("3", "1", "4")),
        ({"num_steps": 3, "topk": 1, "num_draft_tokens": 9}, ("3", "1", "4")),  # forced to steps+1
        ({"num_steps": 5, "topk": 1}, ("5", "1", "6")),
        ({"num_steps": 5, "topk": 4, "num_draft_tokens": 8}, ("5", "4", "8")),
        ({"num_steps": 1, "topk": 2, "num_draft_tokens": 3}, ("1", "2", "3")),
    ],
)
def test_all_three_knobs_always_passed(knobs, expected):
    argv = SGLangBackend().argv(TrialConfig.make("e3", True, **knobs), make_space(), port=1)
    assert (
        flag(argv, "--speculative-num-steps"),
        flag(argv, "--speculative-eagle-topk"),
        flag(argv, "--speculative-num-draft-tokens"),
    ) == expected
    assert flag(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag(argv, "--speculative-draft-model-path") == "/models/e3"
    assert all(isinstance(a, str) for a in argv)


def test_forced_algorithm_upper_cased():
    argv = SGLangBackend().argv(
        TrialConfig.make("e1", True, num_steps=2, topk=1, num_draft_tokens=3), make_space(), port=1
    )
    assert flag(argv, "--speculative-algorithm") == "EAGLE"


@pytest.mark.parametrize(
    ("config", "algorithm"),
    [
        ({"architectures": ["LlamaForCausalLMEagle3"]}, "EAGLE3"),
        ({"architectures": ["Eagle3DeepseekV2ForCausalLM"]}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLMEagle"]}, "EAGLE"),
        (
            {"architectures": ["LlamaForCausalLM"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}},
            "EAGLE3",
        ),
    ],
)
def test_algorithm_from_checkpoint(tmp_path, config, algorithm):
    (tmp_path / "config.json").write_text(json.dumps(config))
    space = make_space(drafters=(DrafterSpec("x", str(tmp_path)),))
    argv = SGLangBackend().argv(TrialConfig.make("x", True, num_steps=2, topk=1), space, port=1)
    assert flag(argv, "--speculative-algorithm") == algorithm


def test_undeterminable_algorithm_is_a_user_error(tmp_path):
    space = make_space(drafters=(DrafterSpec("x", str(tmp_path / "missing")),))
    with pytest.raises(ValidationFailed):
        SGLangBackend().argv(TrialConfig.make("x", True, num_steps=2, topk=1), space, port=1)


def test_launcher_and_extra_args_verbatim():
    launcher = ("/venv/bin/python", "-m", "autotune.sim", "--scenario", "s", "--time-scale", "50")
    extra = ("--tp-size", "8", "--mem-fraction-static", "0.82", "--chat-template", "a b {{ c }}")
    argv = SGLangBackend().argv(
        TrialConfig.make("e3", True, num_steps=2, topk=1), make_space(launcher=launcher, extra_args=extra), port=7
    )
    assert argv[: len(launcher)] == list(launcher)
    assert argv[-len(extra) :] == list(extra)
    assert argv[argv.index("--enable-metrics") + 1 :] == list(extra)


def test_shell_syntax_is_one_literal_argv_element_at_a_real_child(tmp_path):
    nasty = "$(rm -rf /); echo hi `id` > /tmp/x | cat && true"
    out = tmp_path / "argv.json"
    space = make_space(
        launcher=(sys.executable, str(DUMP), str(out)),
        extra_args=("--served-model-name", nasty, "--tokenizer-path", "a b"),
        model_path=f"/models/{nasty}",
    )
    argv = SGLangBackend().argv(TrialConfig.make("e3", False, num_steps=3, topk=1), space, port=5)
    subprocess.run(argv, check=True, timeout=30)
    seen = json.loads(out.read_text())
    assert seen == argv[3:]
    assert flag(seen, "--served-model-name") == nasty
    assert flag(seen, "--model-path") == f"/models/{nasty}"
    assert flag(seen, "--tokenizer-path") == "a b"


# -- resolve ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "effective"),
    [
        ({"num_steps": 3, "topk": 1, "num_draft_tokens": 2}, (3, 1, 4)),
        ({"num_steps": 1, "topk": 1}, (1, 1, 2)),
        ({"num_steps": 2, "topk": 2, "num_draft_tokens": 7}, (2, 2, 7)),  # 2 + 1*4 = 6 candidates + root
        ({"num_steps": 5, "topk": 8, "num_draft_tokens": 32}, (5, 8, 32)),
    ],
)
def test_resolve_effective(knobs, effective):
    eff = SGLangBackend().resolve(TrialConfig.make("e3", True, **knobs), make_space())
    assert (eff.knob("num_steps"), eff.knob("topk"), eff.knob("num_draft_tokens")) == effective


@pytest.mark.parametrize(
    ("knobs", "reason"),
    [
        ({"num_steps": 2, "topk": 2, "num_draft_tokens": 8}, "exceeds the draft tree"),
        ({"num_steps": 1, "topk": 4, "num_draft_tokens": 6}, "exceeds the draft tree"),
        ({"num_steps": 3, "topk": 2, "num_draft_tokens": 1}, "at least 2"),
        ({"num_steps": 0, "topk": 1}, "num_steps must be at least 1"),
        ({"num_steps": 2, "topk": 0, "num_draft_tokens": 3}, "topk must be at least 1"),
        ({"topk": 2, "num_draft_tokens": 3}, "required"),
        ({"num_steps": 2, "num_draft_tokens": 3}, "required"),
        ({"num_steps": 2, "topk": 2}, "num_draft_tokens is required"),
        ({"num_steps": 2, "topk": 2, "num_draft_tokens": 3, "algorithm": "EAGLE"}, "unknown SGLang knobs"),
    ],
)
def test_resolve_infeasible(knobs, reason):
    with pytest.raises(InfeasibleConfig, match=reason):
        SGLangBackend().resolve(TrialConfig.make("e3", True, **knobs), make_space())


def test_resolve_unknown_drafter_and_baseline():
    with pytest.raises(InfeasibleConfig, match="not in the space"):
        SGLangBackend().resolve(TrialConfig.make("nope", True, num_steps=2, topk=1), make_space())
    assert SGLangBackend().resolve(TrialConfig.baseline(False), make_space()) == TrialConfig.baseline(False)


def test_infeasible_never_built_into_argv():
    with pytest.raises(InfeasibleConfig):
        SGLangBackend().argv(
            TrialConfig.make("e3", True, num_steps=1, topk=8, num_draft_tokens=20), make_space(), port=1
        )


def test_tree_bound_table():
    assert tree_bound(1, 1) == 2 and tree_bound(3, 1) == 4
    assert tree_bound(2, 2) == 7 and tree_bound(5, 4) == 69
    assert feasibility_reason(5, 4, 8) is None


# -- Optuna encoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampler",
    [
        lambda: optuna.samplers.RandomSampler(seed=1),
        lambda: optuna.samplers.TPESampler(seed=1, multivariate=True, group=True, n_startup_trials=10),
    ],
)
@pytest.mark.parametrize(
    "knobs",
    [
        {"num_steps": IntRange(1, 6), "topk": Choices((1, 2, 4, 8)), "num_draft_tokens": IntRange(2, 32)},
        {"num_steps": IntRange(1, 3), "topk": IntRange(1, 4), "num_draft_tokens": Choices((4, 8, 16))},
        {"num_steps": Choices((2, 4)), "topk": Choices((4,)), "num_draft_tokens": IntRange(8, 24, step=4)},
    ],
)
def test_suggest_reaches_only_feasible_unrewritten_configs(sampler, knobs):
    space = make_space(knobs=knobs)
    backend = SGLangBackend()
    study = optuna.create_study(sampler=sampler())
    distributions: dict[str, optuna.distributions.BaseDistribution] = {}
    seen_drafters = set()
    for i in range(100):
        trial = study.ask()
        cfg = backend.suggest(trial, space)
        seen_drafters.add(cfg.drafter)
        assert backend.resolve(cfg, space) == cfg, "suggested a config SGLang would reject or rewrite"
        params = dict(trial.params)
        assert not cfg.is_baseline  # baselines are enqueued by the study, never sampled
        assert params["num_steps"] == cfg.knob("num_steps")
        ndt_params = [k for k in params if k.startswith("num_draft_tokens")]
        if cfg.knob("topk") == 1:
            assert ndt_params == []
            assert cfg.knob("num_draft_tokens") == cfg.knob("num_steps") + 1
        else:
            assert len(ndt_params) == 1 and params[ndt_params[0]] == cfg.knob("num_draft_tokens")
        assert backend.params(cfg, space) == params
        for name, dist in trial.distributions.items():
            assert distributions.setdefault(name, dist) == dist, f"{name} changed distribution"
        study.tell(trial, float(i % 7))
    assert seen_drafters == {"e3", "e1"}


def test_suggest_drafters_subset_and_cuda_graph_choices():
    space = make_space(search_drafters=("e1",), cuda_graph=(False,))
    backend = SGLangBackend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    cfgs = [backend.suggest(t, space) for t in (study.ask() for _ in range(40))]
    assert {c.drafter for c in cfgs} == {"e1"}
    assert {c.cuda_graph for c in cfgs} == {False}


def test_enqueued_params_reproduce_the_config():
    space = make_space()
    backend = SGLangBackend()
    wanted = [
        TrialConfig.make("e3", True, num_steps=1, topk=2, num_draft_tokens=3),
        TrialConfig.make("e1", False, num_steps=5, topk=4, num_draft_tokens=8),
        TrialConfig.make("e3", True, num_steps=3, topk=1, num_draft_tokens=4),
    ]
    study = optuna.create_study()
    for cfg in wanted:
        study.enqueue_trial(backend.params(cfg, space))
    got = [backend.suggest(study.ask(), space) for _ in wanted]
    assert got == wanted
    assert backend.params(TrialConfig.baseline(False), space) == {"cuda_graph": False}


def test_unsearched_knob_stays_at_sglang_auto_value():
    space = make_space(knobs={"num_steps": IntRange(2, 4)})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        cfg = SGLangBackend().suggest(study.ask(), space)
        assert cfg.knob("topk") == 1 and cfg.knob("num_draft_tokens") == cfg.knob("num_steps") + 1


# -- defaults --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "knobs", "expected"),
    [
        ("LlamaForCausalLM", None, (5, 4, 8)),
        ("DeepseekV3ForCausalLM", None, (3, 1, 4)),
        ("KimiK25ForConditionalGeneration", None, (3, 1, 4)),
        (None, None, (3, 1, 4)),
        (
            "LlamaForCausalLM",
            {"num_steps": IntRange(1, 3), "topk": Choices((1, 2, 4)), "num_draft_tokens": IntRange(2, 6)},
            (3, 4, 6),
        ),
        (
            "LlamaForCausalLM",
            {"num_steps": IntRange(1, 3), "topk": Choices((1,)), "num_draft_tokens": IntRange(2, 6)},
            (3, 1, 4),
        ),
        (
            "DeepseekV3ForCausalLM",
            {"num_steps": IntRange(4, 6), "topk": Choices((2, 4)), "num_draft_tokens": IntRange(8, 16)},
            (4, 2, 8),
        ),
    ],
)
def test_defaults_follow_target_and_clip_to_space(tmp_path, arch, knobs, expected):
    if arch:
        (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch]}))
    space = make_space(knobs=knobs, model_path=str(tmp_path))
    defaults = SGLangBackend().defaults(space)
    assert [d.drafter for d in defaults] == ["e3", "e1"]
    for d in defaults:
        assert (d.knob("num_steps"), d.knob("topk"), d.knob("num_draft_tokens")) == expected
        assert d.cuda_graph is True
        assert SGLangBackend().resolve(d, space) == d


# -- reading the server ----------------------------------------------------------------------------------


def test_read_effective_from_recorded_server_info():
    info = json.loads((SAMPLES / "sglang_server_info.json").read_text())
    eff = SGLangBackend().read_effective(info)
    assert eff == {
        "speculative_algorithm": "EAGLE3",
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
        "cuda_graph": True,
        "version": "0.5.23",
        "avg_spec_accept_length": 2.71,
    }
    cfg = TrialConfig.make("e3", True, num_steps=3, topk=1, num_draft_tokens=4)
    assert SGLangBackend().check_effective(cfg, eff) == []
    rewritten = TrialConfig.make("e3", False, num_steps=3, topk=1, num_draft_tokens=9)
    problems = SGLangBackend().check_effective(rewritten, eff)
    assert any("num_draft_tokens" in p for p in problems) and any("cuda_graph" in p for p in problems)


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({"disable_cuda_graph": True}, False),
        ({"disable_cuda_graph": False, "disable_decode_cuda_graph": True}, False),
        ({"disable_decode_cuda_graph": False, "disable_prefill_cuda_graph": False}, True),
        ({"cuda_graph_backend_decode": "disabled"}, False),
        ({}, None),
    ],
)
def test_read_effective_cuda_graph_state(fields, state):
    eff = SGLangBackend().read_effective({"speculative_algorithm": None, **fields})
    assert eff["cuda_graph"] is state and eff["speculative_algorithm"] is None


def test_read_effective_nested_server_args():
    eff = SGLangBackend().read_effective({"server_args": {"speculative_num_steps": 2}, "version": "x"})
    assert eff["num_steps"] == 2 and eff["version"] == "x"


def test_generate_stream_sample_parses():
    backend = SGLangBackend()
    chunks = []
    for line in (SAMPLES / "sglang_generate_stream.txt").read_text().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(backend.parse_chunk(json.loads(line[6:])))
    assert [c.completion_tokens for c in chunks] == [4, 11, 15, 16]
    assert all(c.cumulative for c in chunks)
    assert [c.final for c in chunks] == [False, False, False, True]
    last = chunks[-1]
    assert last.finish_reason == "length" and last.accept_length == pytest.approx(2.6667)
    assert last.text.endswith("return n\n") and last.prompt_tokens == 21
    assert all(c.accept_length is None for c in chunks[:-1])


def test_generate_chunk_accept_from_verify_count_and_baseline():
    meta = {"completion_tokens": 12, "finish_reason": {"type": "stop", "matched": 2}, "spec_verify_ct": 4}
    assert parse_generate_chunk({"text": "x", "meta_info": meta}).accept_length == 3.0
    base = {"completion_tokens": 12, "finish_reason": {"type": "length"}}
    c = parse_generate_chunk({"text": "x", "meta_info": base})
    assert c.accept_length is None and c.final and c.finish_reason == "length"
    assert parse_generate_chunk({"error": {"message": "boom"}}).error == "boom"


def test_request_shapes():
    path, body = SGLangBackend().request("hi", max_tokens=64, temperature=0.0)
    assert path == "/generate"
    assert body == {"text": "hi", "sampling_params": {"max_new_tokens": 64, "temperature": 0.0}, "stream": True}
    path, body = SGLangBackend().request("hi", max_tokens=64, temperature=0.0, api="chat", model="m")
    assert path == "/v1/chat/completions" and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_incremental_output_flag_makes_chunks_deltas():
    backend = SGLangBackend()
    parse = backend.chunk_parser(make_space(extra_args=("--incremental-streaming-output",)))
    assert not parse({"text": "a", "meta_info": {}}).cumulative


def test_chunk_parsing_carries_no_state_from_argv():
    backend = SGLangBackend()
    backend.argv(TrialConfig.baseline(), make_space(extra_args=("--incremental-streaming-output",)), port=1)
    assert backend.parse_chunk({"text": "a", "meta_info": {}}).cumulative  # SGLang's default stream form
    assert backend.chunk_parser(make_space()) == backend.parse_chunk
    assert backend.chunk_parser(make_space())({"text": "a", "meta_info": {}}).cumulative


def test_the_client_of_a_launch_reads_its_stream_form():
    from autotune.client import BenchmarkClient

    space = make_space(extra_args=("--incremental-streaming-output",))
    with BenchmarkClient.for_space(space, SGLangBackend(), "http://127.0.0.1:1") as client:
        assert not client.parse_chunk({"text": "a", "meta_info": {}}).cumulative
    with BenchmarkClient.for_space(make_space(), SGLangBackend(), "http://127.0.0.1:1") as client:
        assert client.parse_chunk({"text": "a", "meta_info": {}}).cumulative


def test_info_paths():
    b = SGLangBackend()
    assert b.info_path == "/server_info" and b.info_fallback_paths == ("/get_server_info",)
    assert b.health_path == "/health"


@pytest.mark.parametrize(
    ("text", "spelling"),
    [
        ("  --disable-cuda-graph  Disable cuda graph.\n  --cuda-graph-max-bs", LEGACY),
        (
            "  --disable-cuda-graph (deprecated)\n  --disable-decode-cuda-graph\n  --disable-prefill-cuda-graph",
            PER_PHASE,
        ),
        ("usage: launch_server [-h]", None),
    ],
)
def test_flag_spelling_from_help(text, spelling):
    assert flag_spelling_from_help(text) == spelling


def test_probe_reads_help_of_launcher(tmp_path):
    script = tmp_path / "help.py"
    script.write_text("print('  --disable-decode-cuda-graph\\n  --disable-prefill-cuda-graph')\n")
    backend = SGLangBackend()
    backend.probe(make_space(launcher=(sys.executable, str(script)), version=None))
    assert backend.cuda_graph_spelling == PER_PHASE
    argv = backend.argv(TrialConfig.baseline(False), make_space(version="0.4.0"), port=1)
    assert "--disable-decode-cuda-graph" in argv


def test_probe_times_out_and_keeps_spelling(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time; time.sleep(60)\n")
    backend = SGLangBackend()
    backend.probe(make_space(launcher=(sys.executable, str(script))), timeout_s=0.5)
    assert backend.cuda_graph_spelling is None


def test_version_helpers():
    assert parse_version("0.5.23.post1") == (0, 5, 23)
    assert cuda_graph_spelling("0.5.22") == LEGACY and cuda_graph_spelling("0.5.23") == PER_PHASE
    with pytest.raises(ValueError):
        parse_version("dev")

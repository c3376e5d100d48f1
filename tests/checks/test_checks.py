"""Static drafter/target checks, on checkpoint directories made in tmp_path with realistic config.json files."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from autotune.backends import check_space
from autotune.checks import Problem, derive_algorithm, estimate_tokens, resolved_algorithm
from autotune.errors import ValidationFailed
from autotune.space import BenchmarkSpec, DrafterSpec, Prompt, SearchSpec, ServerSpec, Space

KIMI_TARGET = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
}
KIMI_EAGLE3 = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 7168,
    "num_hidden_layers": 1,
    "vocab_size": 163840,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 131072,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
}
KIMI_EAGLE3_DEEPSEEK = {**KIMI_EAGLE3, "architectures": ["Eagle3DeepseekV2ForCausalLM"]}
KIMI_EAGLE1 = {
    "architectures": ["LlamaForCausalLMEagle"],
    "hidden_size": 7168,
    "num_hidden_layers": 1,
    "vocab_size": 163840,
    "max_position_embeddings": 131072,
}


def write_checkpoint(path: Path, config: dict[str, Any] | None, weights: dict[str, Any] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    for name, tensors in (weights or {}).items():
        if name.endswith(".index.json"):
            (path / name).write_text(
                json.dumps({"metadata": {}, "weight_map": {t: "model.safetensors" for t in tensors}})
            )
        elif name.endswith(".safetensors"):
            header = json.dumps({t: {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]} for t in tensors}).encode()
            (path / name).write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
        else:
            (path / name).write_bytes(b"\x80\x02pickle")
    return path


def make_space(
    tmp_path: Path,
    drafters: dict[str, dict[str, Any] | None],
    *,
    target: dict[str, Any] | None = KIMI_TARGET,
    algorithms: dict[str, str] | None = None,
    weights: dict[str, dict[str, Any]] | None = None,
    prompts: tuple[str, ...] = ("Explain general relativity.",),
    max_tokens: int = 1024,
    backend: str = "sglang",
) -> Space:
    target_dir = tmp_path / "target"
    if target is not None:
        write_checkpoint(target_dir, target)
    specs = []
    for name, cfg in drafters.items():
        d = tmp_path / "drafters" / name
        if cfg is not None:
            write_checkpoint(d, cfg, (weights or {}).get(name))
        specs.append(DrafterSpec(name=name, path=str(d), algorithm=(algorithms or {}).get(name)))
    return Space(
        name="t",
        server=ServerSpec(backend=backend, model_path=str(target_dir)),
        drafters=tuple(specs),
        search=SearchSpec(drafters=tuple(drafters)),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(f"p{i}", t) for i, t in enumerate(prompts)), max_tokens=max_tokens
        ),
    )


def errors(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems if p.severity == "error"]


def warnings(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems if p.severity == "warning"]


D2T_WEIGHTS = {"model.safetensors": ["fc.weight", "midlayer.self_attn.q_proj.weight", "d2t", "t2d"]}


# -- derive_algorithm ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, expected",
    [
        (KIMI_EAGLE3, "EAGLE3"),
        (KIMI_EAGLE3_DEEPSEEK, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLMEagle3"]}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLM"], "eagle_config": {"use_aux_hidden_state": True}}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLM"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLM"], "eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 32000, "vocab_size": 128256}, "EAGLE3"),
        ({"architectures": ["LlamaForCausalLM"], "num_aux_hidden_states": 3}, "EAGLE3"),
        (KIMI_EAGLE1, "EAGLE"),
        ({"architectures": ["Qwen2ForCausalLMEagle"], "hidden_size": 3584}, "EAGLE"),
        ({"architectures": ["LlamaForCausalLMEagle"], "draft_vocab_size": 32000, "vocab_size": 32000}, "EAGLE"),
        ({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048}, None),
        ({"architectures": ["LlamaForCausalLM"], "eagle_config": {"use_aux_hidden_state": False}}, None),
        ({}, None),
        ({"architectures": "LlamaForCausalLMEagle3"}, "EAGLE3"),
        ({"architectures": [None, 3]}, None),
    ],
)
def test_derive_algorithm(config: dict[str, Any], expected: str | None):
    assert derive_algorithm(config) == expected


# -- the field report's trap -----------------------------------------------------------------------------------


def test_eagle3_checkpoint_forced_to_eagle_is_an_error_naming_the_flag(tmp_path: Path):
    space = make_space(tmp_path, {"custom-10k": KIMI_EAGLE3}, algorithms={"custom-10k": "EAGLE"})
    problems = check_space(space)
    assert errors(problems) == [
        "drafter custom-10k: is an EAGLE-3 checkpoint (architectures: LlamaForCausalLMEagle3; "
        "eagle_config.use_aux_hidden_state: true; eagle_config.eagle_aux_hidden_state_layer_ids: [2, 30, 58]; "
        "draft_vocab_size 32000 < vocab_size 163840) but algorithm EAGLE was forced: SGLang would skip its fc "
        "fusion layer and accept nothing; use --speculative-algorithm EAGLE3 (set algorithm: EAGLE3 or leave it out)"
    ]
    (p,) = [p for p in problems if p.is_error]
    assert p.drafter == "custom-10k" and p.field == "drafters[0].algorithm"
    assert p.file == str(tmp_path / "drafters" / "custom-10k" / "config.json")


def test_nextn_is_eagle_and_also_caught(tmp_path: Path):
    space = make_space(tmp_path, {"d": KIMI_EAGLE3_DEEPSEEK}, algorithms={"d": "NEXTN"})
    (msg,) = errors(check_space(space))
    assert "architectures: Eagle3DeepseekV2ForCausalLM" in msg and "NEXTN is EAGLE" in msg
    assert "use --speculative-algorithm EAGLE3" in msg


def test_eagle3_checkpoint_forced_to_standalone(tmp_path: Path):
    space = make_space(tmp_path, {"d": KIMI_EAGLE3}, algorithms={"d": "STANDALONE"})
    (msg,) = errors(check_space(space))
    assert "algorithm STANDALONE was forced" in msg and "use --speculative-algorithm EAGLE3" in msg


def test_eagle1_checkpoint_forced_to_eagle3(tmp_path: Path):
    space = make_space(tmp_path, {"legacy": KIMI_EAGLE1}, algorithms={"legacy": "EAGLE3"})
    (msg,) = errors(check_space(space))
    assert msg.startswith("drafter legacy: is an EAGLE (1/2) checkpoint (architectures: LlamaForCausalLMEagle;")
    assert "use --speculative-algorithm EAGLE" in msg and "EAGLE3 was forced" in msg


def test_vllm_names_its_own_flag(tmp_path: Path):
    space = make_space(tmp_path, {"d": KIMI_EAGLE3}, algorithms={"d": "EAGLE"}, backend="vllm")
    (msg,) = errors(check_space(space))
    assert '--speculative-config \'{"method": "eagle3", ...}\'' in msg


@pytest.mark.parametrize("forced", [None, "EAGLE3", "eagle3"])
def test_consistent_eagle3_drafter_passes(tmp_path: Path, forced: str | None):
    algorithms = {"custom-10k": forced.upper()} if forced else None
    space = make_space(
        tmp_path, {"custom-10k": KIMI_EAGLE3}, algorithms=algorithms, weights={"custom-10k": D2T_WEIGHTS}
    )
    assert check_space(space) == []


def test_consistent_eagle1_drafter_passes(tmp_path: Path):
    for forced in (None, "EAGLE", "NEXTN"):
        space = make_space(tmp_path, {"legacy": KIMI_EAGLE1}, algorithms={"legacy": forced} if forced else None)
        assert check_space(space) == [], forced


# -- undeterminable algorithm -----------------------------------------------------------------------------------


def test_undeterminable_algorithm_needs_algorithm(tmp_path: Path):
    plain = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "max_position_embeddings": 131072}
    space = make_space(tmp_path, {"small": plain})
    (p,) = check_space(space)
    assert p.severity == "error" and p.field == "drafters[0].algorithm"
    assert p.message == (
        "drafter small: cannot tell from its config.json (architectures: LlamaForCausalLM) whether it is an EAGLE-3 "
        "or EAGLE checkpoint; set algorithm: EAGLE3, EAGLE or STANDALONE for it in the space"
    )
    with pytest.raises(ValidationFailed, match="set algorithm: EAGLE3, EAGLE or STANDALONE"):
        resolved_algorithm(space, "small")


def test_standalone_plain_model_is_not_shape_checked(tmp_path: Path):
    plain = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "max_position_embeddings": 131072}
    space = make_space(tmp_path, {"small": plain}, algorithms={"small": "STANDALONE"})
    assert check_space(space) == []
    assert resolved_algorithm(space, "small") == "STANDALONE"


# -- resolved_algorithm -----------------------------------------------------------------------------------------


def test_resolved_algorithm(tmp_path: Path):
    space = make_space(
        tmp_path, {"e3": KIMI_EAGLE3, "e1": KIMI_EAGLE1, "forced": KIMI_EAGLE3}, algorithms={"forced": "EAGLE3"}
    )
    assert resolved_algorithm(space, "e3") == "EAGLE3"
    assert resolved_algorithm(space, "e1") == "EAGLE"
    assert resolved_algorithm(space, "forced") == "EAGLE3"
    with pytest.raises(ValidationFailed, match="no drafter named 'nope'"):
        resolved_algorithm(space, "nope")


def test_resolved_algorithm_without_config(tmp_path: Path):
    space = make_space(tmp_path, {"gone": None})
    with pytest.raises(
        ValidationFailed, match=r"drafter gone: cannot derive its algorithm: .*config.json does not exist"
    ):
        resolved_algorithm(space, "gone")
    forced = dataclasses.replace(space, drafters=(dataclasses.replace(space.drafters[0], algorithm="EAGLE3"),))
    assert resolved_algorithm(forced, "gone") == "EAGLE3"  # forced wins without reading anything


# -- files -----------------------------------------------------------------------------------------------------


def test_missing_drafter_directory(tmp_path: Path):
    space = make_space(tmp_path, {"gone": None})
    (p,) = [p for p in check_space(space) if p.is_error]
    assert p.message == f"drafter gone: checkpoint directory {tmp_path / 'drafters' / 'gone'} does not exist"
    assert p.field == "drafters[0].path"


def test_missing_config_json(tmp_path: Path):
    space = make_space(tmp_path, {"empty": None})
    (tmp_path / "drafters" / "empty").mkdir(parents=True)
    (msg,) = errors(check_space(space))
    config = tmp_path / "drafters" / "empty" / "config.json"
    assert msg == f"drafter empty: cannot read its config.json: {config} does not exist"


def test_invalid_config_json(tmp_path: Path):
    space = make_space(tmp_path, {"broken": None})
    write_checkpoint(tmp_path / "drafters" / "broken", None)
    (tmp_path / "drafters" / "broken" / "config.json").write_text("{not json")
    (msg,) = errors(check_space(space))
    assert "config.json is not valid JSON" in msg


def test_drafter_path_is_a_file(tmp_path: Path):
    space = make_space(tmp_path, {"f": None})
    (tmp_path / "drafters").mkdir()
    (tmp_path / "drafters" / "f").write_text("")
    (msg,) = errors(check_space(space))
    assert "is not a directory" in msg


def test_hub_id_drafter(tmp_path: Path):
    space = make_space(tmp_path, {}, target=KIMI_TARGET)
    hub = DrafterSpec(name="hub", path="AQ-MedAI/Kimi-K2-Instruct-eagle3")
    (p,) = check_space(dataclasses.replace(space, drafters=(hub,), search=SearchSpec(drafters=("hub",))))
    assert p.severity == "error" and "a hub id?" in p.message and "download the checkpoint" in p.message
    forced = dataclasses.replace(hub, algorithm="EAGLE3")
    (p,) = check_space(dataclasses.replace(space, drafters=(forced,), search=SearchSpec(drafters=("hub",))))
    assert p.severity == "warning" and "the forced algorithm EAGLE3 is trusted" in p.message


def test_missing_target_config_is_a_warning_and_skips_shape_checks(tmp_path: Path):
    wrong = {**KIMI_EAGLE3, "hidden_size": 4096}
    space = make_space(tmp_path, {"d": wrong}, target=None, weights={"d": D2T_WEIGHTS})
    (p,) = check_space(space)
    assert p.severity == "warning" and p.field == "server.model_path"
    assert p.message.startswith("target config.json not readable (")
    assert "hub id" in p.message


def test_only_searched_drafters_are_checked(tmp_path: Path):
    space = make_space(tmp_path, {"good": KIMI_EAGLE3, "gone": None}, weights={"good": D2T_WEIGHTS})
    assert errors(check_space(space))
    only_good = dataclasses.replace(space, search=SearchSpec(drafters=("good",)))
    assert check_space(only_good) == []


# -- shapes -----------------------------------------------------------------------------------------------------


def test_hidden_size_mismatch(tmp_path: Path):
    space = make_space(tmp_path, {"w": {**KIMI_EAGLE3, "hidden_size": 4096}}, weights={"w": D2T_WEIGHTS})
    assert errors(check_space(space)) == [
        "drafter w: hidden_size 4096 does not match the target's hidden_size 7168: it was trained for a different model"
    ]


def test_target_hidden_size_takes_precedence(tmp_path: Path):
    # a drafter whose own width differs but which was trained on the target's hidden states
    cfg = {**KIMI_EAGLE3, "hidden_size": 4096, "target_hidden_size": 7168}
    assert check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS})) == []
    cfg = {**KIMI_EAGLE3, "target_hidden_size": 5120}
    (msg,) = errors(check_space(make_space(tmp_path, {"e": cfg}, weights={"e": D2T_WEIGHTS})))
    assert msg.startswith("drafter e: target_hidden_size 5120 does not match the target's hidden_size 7168")


def test_eagle1_hidden_size_is_checked_too(tmp_path: Path):
    space = make_space(tmp_path, {"legacy": {**KIMI_EAGLE1, "hidden_size": 5120}})
    (msg,) = errors(check_space(space))
    assert "hidden_size 5120 does not match" in msg


def test_aux_layer_out_of_range(tmp_path: Path):
    cfg = {
        **KIMI_EAGLE3,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 39, 77], "use_aux_hidden_state": True},
    }
    (msg,) = errors(check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS})))
    assert msg == (
        "drafter d: eagle_config.eagle_aux_hidden_state_layer_ids [2, 39, 77] names layer(s) 77 but the target has "
        "61 layers (0..60): it was trained for a different model"
    )


def test_aux_layer_ids_at_the_top_level(tmp_path: Path):
    cfg = {k: v for k, v in KIMI_EAGLE3.items() if k != "eagle_config"}
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 30, 61]
    (msg,) = errors(check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS})))
    assert msg.startswith("drafter d: eagle_aux_hidden_state_layer_ids [2, 30, 61] names layer(s) 61")


def test_aux_layers_of_the_last_valid_layer_pass(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 30, 60]}}
    assert check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS})) == []


def test_malformed_aux_layer_ids(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": "2,30,58"}}
    (msg,) = errors(check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS})))
    assert "should be a list of layer numbers, got '2,30,58'" in msg


def test_multimodal_target_text_config(tmp_path: Path):
    # Kimi-K2.5 style: the language model's settings under text_config
    target = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {**KIMI_TARGET, "num_hidden_layers": 30},
    }
    (msg,) = errors(check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, target=target, weights={"d": D2T_WEIGHTS})))
    assert "names layer(s) 30, 58 but the target has 30 layers" in msg


# -- vocabulary and d2t -----------------------------------------------------------------------------------------


def test_d2t_in_safetensors_index(tmp_path: Path):
    ok = {"model.safetensors.index.json": ["fc.weight", "d2t", "t2d"]}
    assert check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, weights={"d": ok})) == []
    prefixed = {"model.safetensors.index.json": ["model.fc.weight", "model.d2t"]}
    assert check_space(make_space(tmp_path, {"p": KIMI_EAGLE3}, weights={"p": prefixed})) == []


def test_missing_d2t_in_safetensors_index(tmp_path: Path):
    bad = {"model.safetensors.index.json": ["fc.weight", "lm_head.weight"]}
    (p,) = check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, weights={"d": bad}))
    assert p.severity == "error" and p.file.endswith("model.safetensors.index.json")
    assert "draft_vocab_size 32000 < vocab_size 163840 needs a d2t tensor in the weights" in p.message
    assert "lists none" in p.message


def test_missing_d2t_in_safetensors_header(tmp_path: Path):
    bad = {"model.safetensors": ["fc.weight", "lm_head.weight"]}
    (msg,) = errors(check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, weights={"d": bad})))
    assert "the safetensors files in" in msg and "have none" in msg


def test_unreadable_safetensors_header_is_a_warning(tmp_path: Path):
    space = make_space(tmp_path, {"d": KIMI_EAGLE3})
    (tmp_path / "drafters" / "d" / "model.safetensors").write_bytes(b"\xff" * 4)
    (p,) = check_space(space)
    assert p.severity == "warning" and "is not readable; not verified" in p.message


def test_pytorch_weights_cannot_be_verified(tmp_path: Path):
    (p,) = check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, weights={"d": {"pytorch_model.bin": []}}))
    assert p.severity == "warning"
    assert p.message.endswith("it cannot be verified without loading pytorch_model.bin (PyTorch pickles are not read)")


def test_no_weights_is_an_honest_warning(tmp_path: Path):
    (p,) = check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}))
    assert p.severity == "warning" and p.drafter == "d"
    assert "no weight files in" in p.message and "so it cannot be verified" in p.message


def test_full_draft_vocab_needs_no_d2t(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "draft_vocab_size": 163840}
    assert check_space(make_space(tmp_path, {"d": cfg})) == []


def test_draft_vocab_larger_than_vocab(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "draft_vocab_size": 200000}
    (msg,) = errors(check_space(make_space(tmp_path, {"d": cfg})))
    assert msg == "drafter d: draft_vocab_size 200000 is larger than the vocabulary (163840)"


def test_vocab_mismatch_with_target_is_a_warning(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "vocab_size": 128256}
    problems = check_space(make_space(tmp_path, {"d": cfg}, weights={"d": D2T_WEIGHTS}))
    assert errors(problems) == []
    (msg,) = warnings(problems)
    assert "vocab_size 128256 differs from the target's vocab_size 163840" in msg


# -- context length ---------------------------------------------------------------------------------------------


def test_estimate_tokens():
    assert estimate_tokens("") == 0
    assert estimate_tokens("one two three four") == 6  # words * 1.3 = 5.2
    assert estimate_tokens("x" * 400) == 100  # chars / 4


def test_short_context_drafter(tmp_path: Path):
    cfg = {**KIMI_EAGLE3, "max_position_embeddings": 2048}
    long_prompt = " ".join(["word"] * 1000)  # ~1300 tokens
    space = make_space(tmp_path, {"short": cfg}, prompts=("short one", long_prompt), weights={"short": D2T_WEIGHTS})
    (p,) = check_space(space)
    assert p.severity == "error" and p.field == "drafters[0].path"
    assert p.message == (
        "drafter short: max_position_embeddings 2048 is less than the longest prompt (~1300 tokens, estimated) + "
        "benchmark.max_tokens 1024 = 2324: positions past 2048 degrade or fail"
    )
    ok = make_space(tmp_path, {"short": cfg}, prompts=("short one",), weights={"short": D2T_WEIGHTS})
    assert check_space(ok) == []


def test_short_context_target(tmp_path: Path):
    target = {**KIMI_TARGET, "max_position_embeddings": 1024}
    (p,) = check_space(make_space(tmp_path, {"d": KIMI_EAGLE3}, target=target, weights={"d": D2T_WEIGHTS}))
    assert p.severity == "error" and p.drafter is None and p.field == "server.model_path"
    assert p.message.startswith("the target: max_position_embeddings 1024 is less than the longest prompt")


# -- llama.cpp --------------------------------------------------------------------------------------------------


def test_llamacpp_drafters_are_files(tmp_path: Path):
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    space = Space(
        name="t",
        server=ServerSpec(backend="llamacpp", model_path=str(tmp_path / "target.gguf")),
        drafters=(DrafterSpec("draft", str(draft)), DrafterSpec("gone", str(tmp_path / "gone.gguf"))),
        search=SearchSpec(drafters=("draft", "gone")),
        benchmark=BenchmarkSpec(prompts=(Prompt("p0", "hi"),)),
    )
    assert errors(check_space(space)) == [f"drafter gone: model file {tmp_path / 'gone.gguf'} does not exist"]


def test_problem_str_is_the_message():
    p = Problem("error", "drafter x: broken", "x", "drafters[0].path")
    assert str(p) == "drafter x: broken" and p.is_error


# -- the shipped spaces on the simulator's stand-in checkpoints ----------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["eagle3.yaml", "llama-8b-eagle3.yaml"])
def test_shipped_spaces_pass_on_the_simulators_checkpoints(name: str):
    from autotune.sim import simulated_space
    from autotune.space import load_space

    space = simulated_space(load_space(REPO / "spaces" / name))
    problems = check_space(space)
    assert errors(problems) == []
    # the stand-ins carry no weights: the d2t table is honestly reported as unverified
    assert all("cannot be verified" in w for w in warnings(problems))
    assert {resolved_algorithm(space, d.name) for d in space.drafters} == {"EAGLE3"}

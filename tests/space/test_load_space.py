"""Valid space files: the shipped ones, defaults, every value form, prompts files, redaction."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.errors import SpaceError
from autotune.redact import redact_env
from autotune.servers import knob_domains
from autotune.space import (
    BenchmarkSpec,
    BudgetSpec,
    Choices,
    FloatRange,
    IntRange,
    Prompt,
    SearchSpec,
    ServerSpec,
    Space,
    VerdictSpec,
    load_space,
)
from autotune.space.model import PruningSpec

REPO = Path(__file__).resolve().parents[2]
SPACES = sorted((REPO / "spaces").glob("*.yaml"))

MINIMAL = """\
name: t
server: {model_path: /models/m}
drafters: [{name: d1, path: /models/d1}]
benchmark: {prompts: [hello]}
"""


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_shipped_spaces_load(path: Path):
    space = load_space(path)
    assert isinstance(space, Space)
    assert space.path == str(path)
    assert set(space.search.knobs) <= set(knob_domains(space.server.backend))
    assert space.benchmark.prompts


@pytest.mark.parametrize("name", ["eagle3.yaml", "llama-8b-eagle3.yaml"])
def test_our_spaces_use_the_field_report_benchmark(name: str):
    space = load_space(REPO / "spaces" / name)
    assert [p.id for p in space.benchmark.prompts] == [
        "general-relativity",
        "merge-sort",
        "climate-change",
        "photosynthesis",
        "ml-vs-programming",
    ]
    assert space.benchmark.max_tokens == 1024 and space.benchmark.temperature == 0.0
    assert space.simulate is not None


def test_field_report_space():
    space = load_space(REPO / "spaces" / "eagle3.yaml")
    assert space.server.backend == "sglang" and space.server.version == "0.5.23"
    assert space.server.extra_args == ("--tp-size", "8", "--trust-remote-code")
    assert [d.name for d in space.drafters] == ["custom-10k", "aq-medai"]
    assert space.search.drafters == ("custom-10k", "aq-medai")
    assert space.search.cuda_graph == (False, True)
    assert space.search.knobs == {
        "num_steps": IntRange(1, 6),
        "topk": Choices((1, 2, 4)),
        "num_draft_tokens": IntRange(2, 16),
    }
    assert [p.category for p in space.benchmark.prompts].count("code") == 1
    assert space.pruning == PruningSpec(enabled=True, confidence=0.95, min_prompts=2)
    assert space.budget.n_trials == 40
    assert space.simulate.scenario == "kimi-k25-rtxpro6000"


def test_llama_space():
    space = load_space(REPO / "spaces" / "llama-8b-eagle3.yaml")
    assert [d.name for d in space.drafters] == ["eagle3-llama31-8b"]
    assert space.search.cuda_graph == (True,)
    assert space.search.knobs["num_draft_tokens"] == IntRange(2, 64)
    assert space.search.knobs["topk"] == Choices((1, 2, 4, 8))
    assert space.simulate.scenario == "llama31-8b-h100"


def test_defaults(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL))
    assert space.server == ServerSpec(model_path="/models/m")
    assert space.search == SearchSpec(drafters=("d1",))
    assert space.benchmark == BenchmarkSpec(prompts=(Prompt("p0", "hello"),))
    assert space.pruning == PruningSpec() and space.budget == BudgetSpec() and space.verdict == VerdictSpec()
    assert space.simulate is None and space.storage is None
    assert space.storage_url() == "sqlite:///studies/t.db"
    assert space.drafter("d1").algorithm is None


def test_every_server_key(tmp_path: Path):
    text = MINIMAL.replace(
        "server: {model_path: /models/m}",
        """server:
  backend: vllm
  model_path: meta-llama/Llama-3.1-8B-Instruct
  version: "0.11"
  launcher: [/opt/venv/bin/python, -m, vllm.entrypoints.cli.main]
  host: 0.0.0.0
  port: 8000
  extra_args: [--max-model-len, 8192, --gpu-memory-utilization, 0.9]
  env: {HF_TOKEN: hf_abc, OMP_NUM_THREADS: 8, RATIO: 0.5}
  startup_timeout_s: 120.5
  request_timeout_s: 30
  port_busy: next
  port_wait_s: 5""",
    )
    s = load_space(write(tmp_path, text)).server
    assert s.backend == "vllm" and s.version == "0.11" and s.port == 8000 and s.host == "0.0.0.0"
    assert s.launcher == ("/opt/venv/bin/python", "-m", "vllm.entrypoints.cli.main")
    assert s.extra_args == ("--max-model-len", "8192", "--gpu-memory-utilization", "0.9")  # numbers -> str
    assert s.env == {"HF_TOKEN": "hf_abc", "OMP_NUM_THREADS": "8", "RATIO": "0.5"}
    assert s.startup_timeout_s == 120.5 and s.request_timeout_s == 30.0 and isinstance(s.request_timeout_s, float)
    assert s.port_busy == "next" and s.port_wait_s == 5.0


@pytest.mark.parametrize(
    "search, knobs",
    [
        ("num_steps: 3", {"num_steps": Choices((3,))}),
        ("num_steps: [1, 3]", {"num_steps": Choices((1, 3))}),
        ("num_steps: {low: 1, high: 8, step: 2}", {"num_steps": IntRange(1, 8, step=2)}),
        ("num_steps: {low: 1, high: 8, log: true}", {"num_steps": IntRange(1, 8, log=True)}),
        ("num_draft_tokens: {low: 4, high: 4}", {"num_draft_tokens": IntRange(4, 4)}),
    ],
)
def test_param_forms(tmp_path: Path, search: str, knobs: dict):
    space = load_space(write(tmp_path, MINIMAL + f"search:\n  {search}\n"))
    assert space.search.knobs == knobs


def test_float_range_and_string_choices_for_llamacpp(tmp_path: Path):
    text = MINIMAL.replace("{model_path: /models/m}", "{backend: llamacpp, model_path: /models/m.gguf}") + (
        "search:\n"
        "  spec_type: [draft-simple, ngram-simple]\n"
        "  draft_p_min: {low: 0, high: 0.9}\n"
        "  draft_n_max: {low: 2, high: 16, log: true}\n"
        "  draft_n_min: 0\n"
    )
    knobs = load_space(write(tmp_path, text)).search.knobs
    assert knobs["spec_type"] == Choices(("draft-simple", "ngram-simple"))
    assert knobs["draft_p_min"] == FloatRange(0.0, 0.9)
    assert knobs["draft_n_max"] == IntRange(2, 16, log=True)
    assert knobs["draft_n_min"] == Choices((0,))


@pytest.mark.parametrize(
    "text, message",
    [
        ("  draft_p_min: {low: 0, high: 1.5}", "search.draft_p_min.high: expected a number between 0 and 1, got 1.5"),
        ("  spec_type: {low: 1, high: 2}", "search.spec_type: expected a list of choices (ranges are only for"),
        ("  draft_p_min: {low: 0, high: 0.5, step: 0.1}", "search.draft_p_min.step: unknown key 'step'"),
        ("  draft_n_max: [2, 2]", "search.draft_n_max[1]: 2 is listed twice"),
    ],
)
def test_llamacpp_knob_errors(tmp_path: Path, text: str, message: str):
    space = MINIMAL.replace("{model_path: /models/m}", "{backend: llamacpp, model_path: /m.gguf}") + "search:\n" + text
    with pytest.raises(SpaceError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_space(write(tmp_path, space + "\n"))


def test_single_bool_cuda_graph_and_single_drafter_name(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL + "search: {cuda_graph: false, drafters: d1}\n"))
    assert space.search.cuda_graph == (False,)
    assert space.search.drafters == ("d1",)


def test_algorithm_is_upper_cased(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL.replace("path: /models/d1}", "path: /models/d1, algorithm: eagle3}")))
    assert space.drafter("d1").algorithm == "EAGLE3"


def test_prompt_ids_default_to_position(tmp_path: Path):
    text = MINIMAL.replace("[hello]", "[one, {text: two, category: code}, {id: third, text: three}]")
    prompts = load_space(write(tmp_path, text)).benchmark.prompts
    assert prompts == (Prompt("p0", "one"), Prompt("p1", "two", "code"), Prompt("third", "three"))


def test_prompts_file_plain_text(tmp_path: Path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.txt").write_text("first prompt\n\n  \nsecond prompt\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    # relative to the space file's folder, not the working directory
    space = load_space(write(sub, MINIMAL.replace("prompts: [hello]", "prompts_file: ../prompts/p.txt")))
    assert space.benchmark.prompts == (Prompt("p0", "first prompt"), Prompt("p1", "second prompt"))
    assert space.benchmark.prompts_file == str((tmp_path / "prompts" / "p.txt").resolve())


def test_prompts_file_jsonl(tmp_path: Path):
    rows = [{"id": "a", "text": "alpha", "category": "code"}, "beta", {"text": "gamma"}]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    space = load_space(write(tmp_path, MINIMAL.replace("prompts: [hello]", "prompts_file: p.jsonl")))
    assert space.benchmark.prompts == (Prompt("a", "alpha", "code"), Prompt("p1", "beta"), Prompt("p2", "gamma"))


@pytest.mark.parametrize("name", ["p.yaml", "p.yml"])
def test_prompts_file_yaml(tmp_path: Path, name: str):
    (tmp_path / name).write_text("- {id: a, text: alpha, category: math}\n- beta\n")
    space = load_space(write(tmp_path, MINIMAL.replace("prompts: [hello]", f"prompts_file: {name}")))
    assert space.benchmark.prompts == (Prompt("a", "alpha", "math"), Prompt("p1", "beta"))


def test_prompts_file_errors_name_the_prompts_file_and_line(tmp_path: Path):
    (tmp_path / "p.jsonl").write_text('{"text": "ok"}\n{"txt": "typo"}\n')
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, MINIMAL.replace("prompts: [hello]", "prompts_file: p.jsonl")))
    assert info.value.path == str((tmp_path / "p.jsonl").resolve())
    assert info.value.line == 2 and info.value.field == "[1].txt"

    (tmp_path / "p.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(SpaceError, match=r"p.jsonl:2: invalid JSON"):
        load_space(tmp_path / "space.yaml")

    (tmp_path / "p.yaml").write_text("- a\n- {text: b, id: p0}\n")
    with pytest.raises(SpaceError, match=r"p.yaml:2: \[1\].id: duplicate prompt id 'p0' \(first at line 1\)"):
        load_space(write(tmp_path, MINIMAL.replace("prompts: [hello]", "prompts_file: p.yaml")))


def test_prompts_file_that_is_a_directory(tmp_path: Path):
    (tmp_path / "p").mkdir()
    with pytest.raises(SpaceError, match="is not a file"):
        load_space(write(tmp_path, MINIMAL.replace("prompts: [hello]", "prompts_file: p")))


def test_utf8_bom_and_unicode_prompts(tmp_path: Path):
    path = tmp_path / "space.yaml"
    path.write_bytes("\ufeff".encode() + MINIMAL.replace("hello", "café — 東京").encode())
    assert load_space(path).benchmark.prompts[0].text == "café — 東京"


def test_anchors_without_aliases_are_harmless(tmp_path: Path):
    assert load_space(write(tmp_path, MINIMAL.replace("name: t", "name: &n t"))).name == "t"


def test_yaml_on_off_are_booleans(tmp_path: Path):
    assert load_space(write(tmp_path, MINIMAL + "search: {cuda_graph: [off, on]}\n")).search.cuda_graph == (
        False,
        True,
    )


@pytest.mark.parametrize("value", ["1e400", ".inf", "-.inf"])
def test_infinite_numbers_are_refused(tmp_path: Path, value: str):
    with pytest.raises(SpaceError, match="server.startup_timeout_s: expected a number > 0"):
        load_space(
            write(tmp_path, MINIMAL.replace("model_path: /models/m", f"model_path: /m, startup_timeout_s: {value}"))
        )


def test_search_without_knobs_and_null_sections(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL + "search:\nsimulate:\nstorage:\n"))
    assert space.search.knobs == {} and space.simulate is None and space.storage is None


def test_simulate_defaults(tmp_path: Path):
    space = load_space(write(tmp_path, MINIMAL + "simulate: {scenario: llama31-8b-h100}\n"))
    assert space.simulate.scenario == "llama31-8b-h100" and space.simulate.seed == 0
    assert math.isclose(space.simulate.time_scale, 50.0)


def test_storage_url(tmp_path: Path):
    url = "postgresql://autotune@db/autotune"
    space = load_space(write(tmp_path, MINIMAL + f"storage: {url}\n"))
    assert space.storage == url and space.storage_url() == url


@pytest.mark.parametrize(
    "flag",
    ["--speculative-num-steps", "--port", "--port=8000", "--model-path", "--disable-cuda-graph", "--host"],
)
def test_flags_autotune_sets_are_refused_in_extra_args(tmp_path: Path, flag: str):
    text = MINIMAL.replace("{model_path: /models/m}", f"{{model_path: /m, extra_args: [--tp-size, '2', {flag}]}}")
    with pytest.raises(SpaceError, match=r"server.extra_args\[2\]: .* is set by autotune itself"):
        load_space(write(tmp_path, text))


def test_similar_but_different_flags_are_allowed(tmp_path: Path):
    text = MINIMAL.replace("{model_path: /models/m}", "{model_path: /m, extra_args: [--model-loader-extra-config, x]}")
    assert load_space(write(tmp_path, text)).server.extra_args == ("--model-loader-extra-config", "x")


def test_redact_env():
    env = {
        "HF_TOKEN": "hf_secret",
        "OPENAI_API_KEY": "sk-1",
        "my_secret_thing": "x",
        "DB_PASSWORD": "pw",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_LOG_LEVEL": "info",
    }
    assert redact_env(env) == {
        "HF_TOKEN": "***",
        "OPENAI_API_KEY": "***",
        "my_secret_thing": "***",
        "DB_PASSWORD": "***",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_LOG_LEVEL": "info",
    }
    assert env["HF_TOKEN"] == "hf_secret"  # a copy


def test_secret_env_is_allowed_in_a_space(tmp_path: Path):
    text = MINIMAL.replace("{model_path: /models/m}", "{model_path: /m, env: {HF_TOKEN: hf_abc}}")
    space = load_space(write(tmp_path, text))
    assert space.server.env == {"HF_TOKEN": "hf_abc"}
    assert redact_env(space.server.env) == {"HF_TOKEN": "***"}

"""vLLM drafters refused before launch: a drafter whose ``config.json`` architectures vLLM 0.33.0 does not load under
its method (``autotune.backends.vllm_drafters``; SGLang's EAGLE-1 format ``LlamaForCausalLMEagle`` under ``eagle``)
is an error of ``autotune validate`` / ``autotune study`` (exit 2, nothing written or launched) and an infeasible
config at resolve. tests/servers/test_vllm_parser.py asks vLLM's own code the same questions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.backends import check_space
from autotune.backends.vllm import VLLMBackend
from autotune.backends.vllm_drafters import ACCEPTED, architecture_problem, renamed
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "autotune" / "sim" / "scenarios" / "llama31-8b-h100" / "target"
HEAD = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1, "vocab_size": 128256}


def _drafter(tmp_path: Path, name: str, archs: list[str], **extra: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**HEAD, "architectures": archs, **extra}))
    return d


def _space(tmp_path: Path, drafters: dict[str, tuple[Path, str | None]], methods: str | None = None) -> Path:
    lines = [
        "name: vllm-drafters",
        f"server: {{backend: vllm, model_path: {LLAMA}, version: '0.33.0'}}",
        "drafters:",
    ]
    for name, (path, algo) in drafters.items():
        lines.append(f"  - {{name: {name}, path: {path}" + (f", algorithm: {algo}}}" if algo else "}"))
    lines.append("search:")
    lines.append(methods or "  num_speculative_tokens: [2, 3]")
    lines += ["benchmark:", "  prompts: [{id: a, text: hello there}]", "  max_tokens: 32"]
    p = tmp_path / "space.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("method", "archs", "ok"),
    [
        ("eagle", ["LlamaForCausalLM"], True),  # vLLM's EAGLE-1 format (yuhuili/EAGLE-LLaMA3.1-Instruct-8B)
        ("eagle", ["LlamaForCausalLMEagle"], False),  # SGLang's EAGLE-1 format
        ("eagle", ["Qwen2ForCausalLM"], False),  # no EagleQwen2ForCausalLM in vLLM 0.33.0
        ("eagle", ["Qwen2ForCausalLM", "EagleLlamaForCausalLM"], True),  # one loadable is enough
        ("eagle3", ["LlamaForCausalLMEagle3"], True),  # SGLang's EAGLE-3 format
        ("eagle3", ["Eagle3LlamaForCausalLM"], True),
        ("eagle3", ["LlamaForCausalLM"], True),  # -> Eagle3LlamaForCausalLM
        ("eagle3", ["LlamaForCausalLMEagle"], False),
        ("eagle3", ["Qwen2ForCausalLM"], False),
        ("draft_model", ["LlamaForCausalLMEagle"], True),  # not this check's: draft models are not checked
    ],
)
def test_architecture_problem(tmp_path, method, archs, ok):
    d = _drafter(tmp_path, "d", archs)
    why = architecture_problem(method, "d", str(d))
    assert (why is None) == ok, why
    if not ok:
        assert "\n" not in why
        assert f"drafter d ({d / 'config.json'})" in why and f"under method {method}" in why
        assert "vLLM 0.33.0" in why and "LlamaForCausalLM" in why  # what it accepts


@pytest.mark.parametrize(
    "extra",
    [{"model_type": "eagle"}, {"speculators_config": {"algorithm": "eagle"}}, {"auto_map": {"AutoModel": "m.M"}}],
)
def test_formats_vllm_reads_otherwise_are_not_judged(tmp_path, extra):
    d = _drafter(tmp_path, "d", ["LlamaForCausalLMEagle"], **extra)
    assert architecture_problem("eagle", "d", str(d)) is None


def test_unreadable_or_remote_configs_are_not_judged(tmp_path):
    assert architecture_problem("eagle", "d", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B") is None
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text("{not json")
    assert architecture_problem("eagle", "x", str(tmp_path / "x")) is None


def test_the_tables_follow_the_renaming_rule():
    for method, archs in ACCEPTED.items():
        for a in archs:
            assert renamed(method, a) in ACCEPTED["eagle"] | ACCEPTED["eagle3"] | {f"Eagle{a}", f"Eagle3{a}"}
    assert renamed("eagle", "LlamaForCausalLMEagle") == "EagleLlamaForCausalLMEagle"
    assert renamed("eagle3", "LlamaForCausalLMEagle3") == "LlamaForCausalLMEagle3"


def test_validate_refuses_an_sglang_eagle1_head(tmp_path):
    bad = _drafter(tmp_path, "sglang-eagle1", ["LlamaForCausalLMEagle"])
    good = _drafter(tmp_path, "vllm-eagle1", ["LlamaForCausalLM"])
    space = load_space(_space(tmp_path, {"sglang-eagle1": (bad, "EAGLE"), "vllm-eagle1": (good, "EAGLE")}))
    errors = [p for p in check_space(space) if p.is_error]
    assert [p.drafter for p in errors] == ["sglang-eagle1"]
    assert errors[0].field == "drafters[0].path" and "LlamaForCausalLMEagle" in errors[0].message
    b = VLLMBackend()
    with pytest.raises(InfeasibleConfig, match="not loaded by vLLM 0.33.0 under method eagle"):
        b.resolve(TrialConfig.make("sglang-eagle1", method="eagle", num_speculative_tokens=3), space)
    assert b.resolve(TrialConfig.make("vllm-eagle1", method="eagle", num_speculative_tokens=3), space)


def test_a_method_space_checks_each_method_its_drafter_runs(tmp_path):
    bad = _drafter(tmp_path, "e1", ["LlamaForCausalLMEagle"])
    methods = "  methods:\n    eagle: {drafters: [e1], num_speculative_tokens: [2]}\n    ngram: {}"
    space = load_space(_space(tmp_path, {"e1": (bad, "EAGLE")}, methods))
    (err,) = [p for p in check_space(space) if p.is_error]
    assert "under method eagle" in err.message


def test_study_exits_2_and_launches_nothing(tmp_path):
    bad = _drafter(tmp_path, "sglang-eagle1", ["LlamaForCausalLMEagle"])
    space = _space(tmp_path, {"sglang-eagle1": (bad, "EAGLE")})
    studies = tmp_path / "studies"
    run = subprocess.run(
        [sys.executable, "-m", "autotune", "study", str(space), "--studies-dir", str(studies)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "not loaded by vLLM 0.33.0 under method eagle" in run.stdout + run.stderr
    assert not studies.exists() or not any(studies.iterdir())

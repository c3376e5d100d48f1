"""The exported launch command starts with the launcher the space names, or a plain one a deployment host has:
never the tuning machine's own interpreter path or cached build."""

from __future__ import annotations

import sys

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.sglang import SGLangBackend
from autotune.backends.vllm import VLLMBackend
from autotune.config import TrialConfig
from autotune.export_bundle import launch_argv
from autotune.space import BenchmarkSpec, DrafterSpec, Prompt, SearchSpec, ServerSpec, Space


def _space(backend: str, launcher: tuple[str, ...] = (), model: str = "/models/target") -> Space:
    return Space(
        name="t",
        server=ServerSpec(backend=backend, model_path=model, launcher=launcher, version="0.5.23"),
        drafters=(DrafterSpec(name="d", path="/models/d", algorithm="EAGLE3"),),
        search=SearchSpec(),
        benchmark=BenchmarkSpec(prompts=(Prompt(id="p", text="hello"),)),
    )


def test_sglang_tunes_with_this_interpreter_and_deploys_with_plain_python3():
    space = _space("sglang")
    b = SGLangBackend()
    here = b.argv(TrialConfig.baseline(), space, port=30000)
    assert here[:3] == [sys.executable, "-m", "sglang.launch_server"]
    there = launch_argv(space, b, TrialConfig.baseline())
    assert there[:3] == ["python3", "-m", "sglang.launch_server"] and there[3:] == here[3:]


def test_a_launcher_the_space_names_is_kept_in_the_export():
    space = _space("sglang", launcher=("/opt/venv/bin/python", "-m", "sglang.launch_server"))
    assert launch_argv(space, SGLangBackend(), TrialConfig.baseline())[:3] == list(space.server.launcher)


def test_llama_cpp_deploys_plain_llama_server_not_the_cached_build(tmp_path, monkeypatch):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'usage: --spec-draft-n-max N  --no-ui'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AUTOTUNE_LLAMA_SERVER", str(fake))  # this machine's build, found by find_llama_server
    space = _space("llamacpp", model="/models/t.gguf")
    b = LlamaCppBackend(spelling={})
    assert b.argv(TrialConfig.baseline(), space, port=1)[0] == str(fake)
    assert launch_argv(space, b, TrialConfig.baseline())[0] == "llama-server"


def test_vllm_deploys_vllm_serve():
    space = _space("vllm")
    assert launch_argv(space, VLLMBackend(), TrialConfig.baseline())[:2] == ["vllm", "serve"]

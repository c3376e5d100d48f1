"""Each server's own export format, as the backends declare it (``Backend.export_format``): which formats fit a
study of each server, the order messages list them, the suggested one, and a format that does not fit refused with
the ones that do."""

from __future__ import annotations

import pytest

from autotune import export_formats
from autotune.backends import get_backend

GENERIC = ["command", "yaml", "json", "env", "compose", "k8s"]


@pytest.mark.parametrize(
    "name, names, fitting, suggested",
    [
        # an SGLang study (HF checkpoints) may be translated to vLLM where faithful (checked per config)
        ("sglang", ["sglang", *GENERIC, "vllm"], ["sglang", *GENERIC, "vllm"], "sglang"),
        # llama.cpp's GGUF files load on no other server
        ("llamacpp", [*GENERIC, "sglang", "vllm"], GENERIC, "command"),
        # SGLang takes no other server's study
        ("vllm", ["vllm", *GENERIC, "sglang"], ["vllm", *GENERIC], "vllm"),
    ],
)
def test_formats_of_each_backend(name, names, fitting, suggested):
    b = get_backend(name)
    assert export_formats.format_names(b) == names
    assert export_formats.fitting_formats(b) == fitting
    assert export_formats.suggested_format(b) == suggested
    listed = ", ".join(fitting)
    assert export_formats.format_problem(b, "helm") == f"--format helm: unknown format; expected one of {listed}"
    for f in fitting:
        assert export_formats.format_problem(b, f) is None


def test_a_gguf_study_is_not_exported_as_a_vllm_launch():
    assert export_formats.format_problem(get_backend("llamacpp"), "vllm") == (
        "--format vllm: it launches vLLM, which cannot load this llama.cpp study's checkpoints; formats that fit: "
        "command, yaml, json, env, compose, k8s"
    )


@pytest.mark.parametrize("name, fitting", [("llamacpp", GENERIC), ("vllm", ["vllm", *GENERIC])])
def test_another_servers_launch_command_is_refused(name, fitting):
    ran = get_backend(name).display_name
    assert export_formats.format_problem(get_backend(name), "sglang") == (
        f"--format sglang: it launches SGLang, which takes no other server's study; this study ran {ran}; "
        f"formats that fit: {', '.join(fitting)}"
    )

"""Each server's own export format, as the backends declare it (``Backend.export_format``) and export lists it."""

from __future__ import annotations

import pytest

from autotune import export
from autotune.backends import get_backend

GENERIC = ["command", "yaml", "json", "env", "compose", "k8s"]


@pytest.mark.parametrize(
    "name, names, suggested",
    [
        ("sglang", ["sglang", *GENERIC, "vllm"], "sglang"),
        ("llamacpp", [*GENERIC, "sglang", "vllm"], "command"),
        ("vllm", ["vllm", *GENERIC, "sglang"], "command"),  # vLLM's format is a config fragment, not its command
    ],
)
def test_formats_of_each_backend(name, names, suggested):
    b = get_backend(name)
    assert export.format_names(b) == names
    assert export.suggested_format(b) == suggested
    assert export.format_problem(b, "helm") == f"--format helm: unknown format; expected one of {', '.join(names)}"
    assert export.format_problem(b, "vllm") is None  # a schedule fragment any study fills
    assert all(export.renders_schedule(f) for f in ("sglang", "vllm", "command", "yaml", "json"))
    assert not any(export.renders_schedule(f) for f in ("env", "compose", "k8s"))


@pytest.mark.parametrize("name", ["llamacpp", "vllm"])
def test_another_servers_launch_command_is_refused(name):
    assert export.format_problem(get_backend(name), "sglang") == (
        f"--format sglang needs an SGLang space; this one's backend is {name!r} (use --format command)"
    )

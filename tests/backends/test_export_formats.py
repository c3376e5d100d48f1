"""Each server's own export format, as the backends declare it (``Backend.export_format``): which formats fit a
study of each server, the order messages list them, the suggested one, and a format that does not fit refused with
the ones that do."""

from __future__ import annotations

import pytest

from autotune import export_formats
from autotune.backends import get_backend
from autotune.verdict import Verdict
from tests.study.conftest import recommending

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


@pytest.mark.parametrize(
    "path, hub",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", True),
        ("Qwen/Qwen2.5-0.5B-Instruct", True),
        ("/models/Llama-3.1-8B-Instruct", False),  # absolute: a local directory
        ("studies/llamacpp-models/target.gguf", False),  # a relative path, not org/name
        ("models/target.gguf", False),  # a GGUF file: llama.cpp reads it from disk
        ("./org/name", False),
        ("local/model", False),  # exists in the working directory (made below)
        ("Llama-3.1-8B-Instruct", False),
    ],
)
def test_a_hub_id_is_org_name_and_no_local_path(path, hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local" / "model").mkdir(parents=True)
    assert export_formats.is_hub_id(path) is hub


@pytest.mark.parametrize(
    "name, entrypoint", [("sglang", ()), ("vllm", ("vllm", "serve")), ("llamacpp", ("/app/llama-server",))]
)
def test_each_backend_names_its_default_images_entrypoint(name, entrypoint):
    """As the images' Dockerfiles set it (tests/servers/as_run.py keeps them, read from the projects' files)."""
    from tests.servers.as_run import image_of

    b = get_backend(name)
    assert b.image_entrypoint == entrypoint
    for image in b.images:
        assert tuple(image_of(image.format(version="1.2.3"))[0]) == entrypoint


def test_without_a_measured_start_up_the_startup_probe_allows_the_spaces_startup_timeout():
    import yaml

    from autotune import export
    from autotune.space import load_space
    from tests.cli.helpers import REPO

    space = load_space(str(REPO / "spaces" / "eagle3.yaml"))  # server.startup_timeout_s: 1800
    result = recommending({"drafter": None, "cuda_graph": True}, "hand-made", Verdict.BASELINE_WINS, "test", trial=0)
    text = export.export(space, get_backend("sglang"), result, "k8s").text
    (c,) = [d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"][
        "containers"
    ]
    probe = c["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 1800
    assert "the space's server.startup_timeout_s, 1800 s: no start-up was measured" in text

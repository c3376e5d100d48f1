"""Exports that deploy as written: a load study's schedule exported with ``-o`` writes the adaptive config beside
the script and names it there (a script bash accepts, and that finds its file from any working directory),
compose and Kubernetes carry the file too (a volume, a ConfigMap) and listen where a container is reached; the
vLLM format is a full ``vllm serve`` command; a format that does not fit the study is exit 2 with the ones that
do; a server the simulator does not play is refused by ``--simulate`` before anything is written."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune.backends.sglang_methods import ADAPTIVE_FILE
from autotune.export_bundle import read_provenance

from .helpers import REPO, autotune, report, space_file

FAKE_PYTHON3 = """#!/bin/sh
# stands in for the deployment host's python3: records the argv it was started with
printf '%s\\n' "$@" > "$ARGV_OUT"
"""


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """A short simulated load study of the shipped load space with chains only (topk 1: what SGLang adapts and
    what translates to vLLM), so that the schedule turns speculation on."""
    tmp = tmp_path_factory.mktemp("load")
    space = space_file(tmp, base="llama-8b-load.yaml", search={"topk": [1]})
    studies = tmp / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "8", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    return space, studies, tmp


def _export(load, fmt, *extra, rc=0):
    space, studies, _tmp = load
    r = autotune("export", str(space), "--simulate", "--format", fmt, "--studies-dir", str(studies), *extra)
    assert r.returncode == rc, r.stderr
    return r


def _adaptive(text: str) -> dict:
    from autotune.backends.sglang import adaptive_config

    p = read_provenance(text)
    levels = [{"level": x["level"], "draft": x["draft"]} for x in p["schedule"]]
    return json.loads(json.dumps(adaptive_config({"levels": levels})))


@pytest.mark.parametrize("fmt", ["sglang", "command"])
def test_o_writes_a_script_bash_accepts_and_the_adaptive_config_beside_it(load, fmt, tmp_path):
    out = tmp_path / "deploy" / "launch.sh"
    out.parent.mkdir()
    r = _export(load, fmt, "-o", str(out))
    assert r.stdout == "" and f"wrote {out} ({fmt}), {out.parent / ADAPTIVE_FILE}" in r.stderr
    text = out.read_text()
    assert subprocess.run(["bash", "-n", str(out)], capture_output=True, text=True).returncode == 0
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["launch.sh", ADAPTIVE_FILE])
    written = json.loads((out.parent / ADAPTIVE_FILE).read_text())
    assert written == _adaptive(text)
    # no JSON as a command: every line is a comment or the one launch command
    lines = text.strip().splitlines()
    assert all(line.startswith("#") for line in lines[:-1])
    assert f'--speculative-adaptive-config "$(dirname "$0")"/{ADAPTIVE_FILE}' in lines[-1]
    assert "method EAGLE3 [SIMULATED]" in text
    # run it, from another directory, with a stand-in python3: the server is started with the file's real path
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    argv_out = tmp_path / "argv.txt"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_OUT": str(argv_out), "HOME": os.environ.get("HOME", "/")}
    subprocess.run(["bash", str(out)], cwd=tmp_path, env=env, check=True, timeout=30)
    argv = argv_out.read_text().splitlines()
    assert argv[:2] == ["-m", "sglang.launch_server"] and "--speculative-adaptive" in argv
    path = Path(argv[argv.index("--speculative-adaptive-config") + 1])
    assert path.resolve() == (out.parent / ADAPTIVE_FILE).resolve() and path.is_file()
    assert argv[argv.index("--max-running-requests") + 1] == "256"


def test_an_export_that_cannot_write_every_file_writes_none(load, tmp_path):
    """-o FILE writes FILE and the files beside it all or none: where the adaptive config cannot be written (a
    folder of that name is there), exit 2 naming it, and neither the script nor a temporary file is left."""
    (tmp_path / ADAPTIVE_FILE).mkdir()
    out = tmp_path / "launch.sh"
    r = _export(load, "sglang", "-o", str(out), rc=2)
    assert r.stderr.strip().splitlines() == [
        f"autotune: error: -o {out}: cannot write {tmp_path / ADAPTIVE_FILE}: it is a directory; nothing was written"
    ]
    assert [p.name for p in tmp_path.iterdir()] == [ADAPTIVE_FILE] and not any((tmp_path / ADAPTIVE_FILE).iterdir())


def test_compose_and_k8s_carry_the_adaptive_config_and_listen_on_every_interface(load, tmp_path):
    compose = tmp_path / "docker-compose.yaml"
    _export(load, "compose", "-o", str(compose))
    assert (tmp_path / ADAPTIVE_FILE).is_file()
    doc = yaml.safe_load(compose.read_text())
    ((_name, svc),) = doc["services"].items()
    argv = svc["command"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and svc["ports"] == ["127.0.0.1:30000:30000"]
    assert argv[argv.index("--speculative-adaptive-config") + 1] == f"/autotune/files/{ADAPTIVE_FILE}"
    assert f"./{ADAPTIVE_FILE}:/autotune/files/{ADAPTIVE_FILE}:ro" in svc["volumes"]
    assert doc["x-autotune"]["method"] == "EAGLE3"

    text = _export(load, "k8s").stdout
    config_map, deployment, service = yaml.safe_load_all(text)
    assert config_map["kind"] == "ConfigMap" and deployment["kind"] == "Deployment" and service["kind"] == "Service"
    assert json.loads(config_map["data"][ADAPTIVE_FILE]) == _adaptive(text)
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    args = c["args"]
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--speculative-adaptive-config") + 1] == f"/autotune/files/{ADAPTIVE_FILE}"
    assert {"name": "files", "mountPath": "/autotune/files", "readOnly": True} in c["volumeMounts"]
    assert {"name": "files", "configMap": {"name": config_map["metadata"]["name"]}} in (
        deployment["spec"]["template"]["spec"]["volumes"]
    )
    assert read_provenance(text)["method"] == "EAGLE3"

    for fmt in ("yaml", "json"):  # the file by its plain name, its text in launch.files
        b = yaml.safe_load(_export(load, fmt).stdout)
        argv = b["launch"]["argv"]
        assert argv[argv.index("--speculative-adaptive-config") + 1] == ADAPTIVE_FILE
        assert json.loads(b["launch"]["files"][ADAPTIVE_FILE]) == _adaptive(json.dumps(b))
        assert b["schedule"]["levels"] and b["provenance"]["method"] == "EAGLE3"


def test_the_vllm_export_is_a_full_vllm_serve_command_with_the_schedule_and_provenance(load, tmp_path):
    space, _studies, _tmp = load
    out = tmp_path / "vllm.sh"
    _export(load, "vllm", "-o", str(out))
    text = out.read_text()
    assert subprocess.run(["bash", "-n", str(out)], capture_output=True).returncode == 0
    lines = text.strip().splitlines()
    assert all(line.startswith("#") for line in lines[:-1])
    argv = shlex.split(lines[-1])
    assert argv[:4] == ["CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "/models/Llama-3.1-8B-Instruct"]
    assert argv[argv.index("--max-num-seqs") + 1] == "256" and argv[argv.index("--dtype") + 1] == "bfloat16"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["model"] == "/models/EAGLE3-LLaMA3.1-Instruct-8B"
    ranges = spec["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and ranges[-1][1] == 256
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert spec["num_speculative_tokens"] == max(k for _, _, k in ranges)
    p = read_provenance(text)
    assert p["study"] == "llama31-8b-load-sim" and p["space"] == str(space) and p["autotune_version"]
    assert p["exported_at"].endswith("Z") and p["method"] == "EAGLE3" and p["translated"]["server"] == "vllm"
    assert [c["role"] for c in p["checkpoints"]] == ["target", "drafter"]
    assert all(c["config_json_sha256"] for c in p["checkpoints"])
    assert "[SIMULATED]" in lines[0] and "method EAGLE3" in lines[0]
    assert any(line.startswith("# measured ") and "speedup" in line for line in lines)
    assert any("translated from the SGLang study to vLLM" in line for line in lines)


def test_a_gguf_study_exported_as_vllm_is_exit_2_listing_the_formats_that_fit(tmp_path):
    r = autotune(
        "export",
        str(REPO / "spaces" / "llamacpp-tiny.yaml"),
        "--format",
        "vllm",
        "--studies-dir",
        str(tmp_path / "studies"),
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "autotune: error: --format vllm: it launches vLLM, which cannot load this llama.cpp study's checkpoints; "
        "formats that fit: command, yaml, json, env, compose, k8s"
    )
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize("command", [["validate"], ["study", "--in-process"], ["study"]])
def test_simulate_refuses_a_server_the_simulator_does_not_play(tmp_path, command):
    space = tmp_path / "llamacpp.yaml"
    space.write_text((REPO / "spaces" / "llamacpp-tiny.yaml").read_text())
    studies = tmp_path / "studies"
    r = autotune(command[0], str(space), "--simulate", *command[1:], "--studies-dir", str(studies))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"autotune: error: {space}: server.backend: --simulate plays sglang and vllm only (the simulator parses "
        "their launch flags); this space's server is 'llamacpp': run it on that server, without --simulate"
    ]
    assert not studies.exists()


def test_validate_simulate_says_what_it_checked_and_flags_missing_real_paths(tmp_path):
    r = autotune("validate", str(REPO / "spaces" / "llama-8b-eagle3.yaml"), "--simulate")
    assert r.returncode == 0
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == (
        "ok: "
        + str(REPO / "spaces" / "llama-8b-eagle3.yaml")
        + ": 1 drafter(s) checked (the simulator's stand-ins, scenario llama31-8b-h100), 2 warning(s)"
    )
    assert (
        "warning: drafter eagle3-llama31-8b: /models/EAGLE3-LLaMA3.1-Instruct-8B does not exist on this machine; "
        "--simulate checked the simulator's stand-in (scenario llama31-8b-h100) in its place"
    ) in lines
    assert any(line.startswith("warning: the target /models/Llama-3.1-8B-Instruct does not exist") for line in lines)


def test_a_hub_id_stays_a_hub_id_and_a_local_checkpoint_gets_a_volume(tmp_path):
    """A study whose target is a Hugging Face hub id (``org/name``, no such path here) and whose drafter is a local
    directory: compose and Kubernetes mount the drafter only, pass the hub id as it is (the server downloads it) and
    run from the image's own working directory; the export says so."""
    hub = "meta-llama/Llama-3.1-8B-Instruct"
    space = space_file(tmp_path, base="llama-8b-eagle3.yaml", server={"model_path": hub})
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "8", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr[-2000:]
    drafter = "/models/EAGLE3-LLaMA3.1-Instruct-8B"
    args = ("export", str(space), "--simulate", "--studies-dir", str(studies), "--format")

    text = autotune(*args, "compose").stdout
    ((_name, svc),) = yaml.safe_load(text)["services"].items()
    assert svc["volumes"] == [f"{drafter}:{drafter}:ro"] and "working_dir" not in svc
    assert svc["command"][svc["command"].index("--model-path") + 1] == hub
    assert f"# {hub}: a Hugging Face hub id, no volume: the server downloads it at start" in text

    text = autotune(*args, "k8s").stdout
    deployment = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == [drafter]
    assert [m["mountPath"] for m in c["volumeMounts"]] == [drafter, "/dev/shm"] and "workingDir" not in c
    assert c["args"][c["args"].index("--model-path") + 1] == hub
    assert f"# {hub}: a Hugging Face hub id" in text


def test_compose_and_k8s_say_which_image_runs_the_server_and_what_to_change_for_another(load):
    """SGLang's image has no entrypoint of its own: compose's command and Kubernetes' command + args are the whole
    launch, and the comment says what another image needs."""
    compose = _export(load, "compose").stdout
    ((_name, svc),) = yaml.safe_load(compose)["services"].items()
    assert svc["command"][:3] == ["python3", "-m", "sglang.launch_server"] and "entrypoint" not in svc
    assert (
        "# image lmsysorg/sglang:v0.5.23: no entrypoint of its own, `command:` is the whole launch; for an image with "
        "an entrypoint add `entrypoint: [python3, -m, sglang.launch_server]`"
    ) in compose
    k8s = _export(load, "k8s", "--image", "registry.local/sglang:pinned").stdout
    deployment = next(d for d in yaml.safe_load_all(k8s) if d["kind"] == "Deployment")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python3", "-m", "sglang.launch_server"] and c["args"][0] == "--model-path"
    assert (
        "# image registry.local/sglang:pinned (taken to start as lmsysorg/sglang:v0.5.23): `command` "
        "[python3, -m, sglang.launch_server] is how it starts the server"
    ) in k8s


def _eagle1_space(tmp_path: Path, path: str) -> Path:
    """The Kimi space with one EAGLE-1 head in SGLang's format (the simulator's eagle1-legacy stand-in:
    LlamaForCausalLMEagle), chains only (topk 1: what translates to vLLM)."""
    data = yaml.safe_load((REPO / "spaces" / "eagle3.yaml").read_text())
    data["name"] = "kimi-eagle1"
    data["drafters"] = [{"name": "eagle1-legacy", "path": path}]
    data["search"] = {"drafters": ["eagle1-legacy"], "cuda_graph": [True], "num_steps": {"low": 1, "high": 4}}
    data["search"]["topk"] = [1]
    out = tmp_path / "eagle1.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_an_sglang_format_eagle1_head_is_no_vllm_translation(tmp_path):
    """vLLM 0.33.0 refuses an EAGLE-1 head in SGLang's format (LlamaForCausalLMEagle): a simulated study's trial with
    it, exported --format vllm, is exit 2 naming the formats that fit (its stand-in's config.json read in place of
    the real checkpoint's), never a command vLLM refuses; its own formats export."""
    space = _eagle1_space(tmp_path, "/models/kimi-eagle1-legacy")
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "6", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr[-2000:]
    rep = report(space, studies)
    trial = next(t["number"] for t in rep["trials"] if t["state"] == "COMPLETE" and (t["config"] or {}).get("drafter"))
    args = ("export", str(space), "--simulate", "--studies-dir", str(studies), "--trial", str(trial), "--format")
    r = autotune(*args, "vllm")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("autotune: error: --format vllm: no faithful translation of this SGLang study to vLLM: ")
    assert "architectures ['LlamaForCausalLMEagle'] are not loaded by vLLM 0.33.0 under method eagle" in line
    assert line.endswith("; formats that fit: sglang, command, yaml, json, env, compose, k8s")
    r = autotune(*args, "sglang")
    assert r.returncode == 0 and "--speculative-algorithm EAGLE " in r.stdout, r.stderr[-2000:]


def test_a_translation_checks_a_readable_drafter_and_says_when_it_could_not(tmp_path):
    """Without a simulator: a drafter checkpoint on this machine is checked (the SGLang-format head refused, exit 2
    through the CLI's ValueError), one that is not here is exported with a line saying nothing checked it."""
    from autotune import export
    from autotune.backends import get_backend
    from autotune.space import load_space
    from autotune.verdict import Verdict
    from tests.study.conftest import recommending

    standin = REPO / "autotune" / "sim" / "scenarios" / "kimi-k25-rtxpro6000" / "drafters" / "eagle1-legacy"
    config = {"drafter": "eagle1-legacy", "cuda_graph": True, "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
    rep = recommending(config, "hand-made", Verdict.SPECULATION_WINS, "test", trial=1, tok_per_s=100.0)
    readable = load_space(str(_eagle1_space(tmp_path, str(standin))))
    readable = dataclasses.replace(
        readable, drafters=tuple(dataclasses.replace(d, algorithm="EAGLE") for d in readable.drafters)
    )
    with pytest.raises(ValueError, match=r"LlamaForCausalLMEagle.*formats that fit: sglang, command"):
        export.export(readable, get_backend("sglang"), rep, "vllm")
    elsewhere = dataclasses.replace(
        readable, drafters=tuple(dataclasses.replace(d, path="/models/kimi-eagle1") for d in readable.drafters)
    )
    text = export.export(elsewhere, get_backend("sglang"), rep, "vllm").text
    assert "# the drafter's checkpoint is not on this machine: nothing checked that vLLM loads its architecture" in text
    assert '"method": "eagle"' in text.splitlines()[-1]

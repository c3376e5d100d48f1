"""`autotune export`: every format parses in its own format, carries its provenance, keeps secrets out, and the
SGLang command round-trips to the exported config through SGLang's own argument names."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.export_bundle import read_provenance
from autotune.sim import load_scenario

from ..servers import as_run
from .helpers import autotune, space_file

SECRET = "hf_exp0rt-secret-never-written"
FORMATS = ("sglang", "command", "yaml", "json", "env", "compose", "k8s")


@pytest.fixture(scope="module")
def won(tmp_path_factory):
    """A simulated study where speculation wins (llama 8B, in-process), with a secret in the server's env."""
    tmp = tmp_path_factory.mktemp("export")
    space = space_file(
        tmp, base="llama-8b-eagle3.yaml", server={"env": {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": SECRET}}
    )
    studies = tmp / "studies"
    r = autotune(
        "study", str(space), "--simulate", "--in-process", "--n-trials", "30", "--json", "--studies-dir", str(studies)
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["verdict"] == "speculation-wins"
    return space, studies, rep, tmp


def _export(won, fmt, *extra):
    space, studies, _rep, _tmp = won
    r = autotune("export", str(space), "--simulate", "--format", fmt, "--studies-dir", str(studies), *extra)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    return r.stdout


def _check_provenance(p, rep, space):
    assert p["study"] == "llama31-8b-eagle3-sim" and p["trial"] == rep["best"]["trial"]
    assert p["simulated"]["scenario"] == "llama31-8b-h100"
    assert p["method"] == "EAGLE3"  # the drafter's algorithm, in every format
    m = p["measured"]
    assert m["tok_per_s"] == pytest.approx(rep["best"]["tok_per_s"])
    assert m["speedup_ci"] == rep["best"]["speedup_ci"] and m["speedup"] == pytest.approx(rep["best"]["speedup"])
    assert p["baseline"]["trial"] == rep["fastest_baseline"]["trial"]
    assert p["baseline"]["tok_per_s"] == pytest.approx(rep["fastest_baseline"]["tok_per_s"])
    assert p["autotune_version"] and p["exported_at"].endswith("Z") and p["server_version"] == "0.5.23"
    assert p["space"] == str(space)
    # checkpoint fingerprints: the stand-ins' files, hashed
    sc = load_scenario("llama31-8b-h100")
    drafter = next(c for c in p["checkpoints"] if c["role"] == "drafter")
    d = sc.drafters["eagle3-llama31-8b"].dir
    assert drafter["config_json_sha256"] == hashlib.sha256(Path(d, "config.json").read_bytes()).hexdigest()
    assert drafter["weight_index"] == "model.safetensors.index.json"
    idx = Path(d, "model.safetensors.index.json").read_bytes()
    assert drafter["weight_index_sha256"] == hashlib.sha256(idx).hexdigest()
    assert drafter["path"] == "/models/EAGLE3-LLaMA3.1-Instruct-8B"  # the deployment's path
    target = next(c for c in p["checkpoints"] if c["role"] == "target")
    assert target["config_json_sha256"]


def _json_bundle(won):
    return json.loads(_export(won, "json"))


def test_yaml_and_json_carry_the_config_and_provenance(won):
    space, _s, rep, _t = won
    j = _json_bundle(won)
    y = yaml.safe_load(_export(won, "yaml"))
    for b in (j, y):
        assert b["config"] == rep["recommended"]["config"] and b["speculative"] is True
        _check_provenance(b["provenance"], rep, space)
        assert b["launch"]["env"]["HF_TOKEN"] == "***"
    assert y["launch"]["argv"] == j["launch"]["argv"]


def test_the_verify_line_runs_as_written(won, tmp_path):
    """yaml and json carry ``verify``: the command that measures the exported config again on the study's server
    (here the simulator: ``--simulate``). Run exactly as written by a shell from another directory, it measures that
    very config."""
    space, _s, rep, _t = won
    j = _json_bundle(won)
    assert yaml.safe_load(_export(won, "yaml"))["verify"] == j["verify"]
    assert j["verify"].startswith(f"autotune bench {space} --simulate --set ")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    r = subprocess.run(["bash", "-c", j["verify"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    label = TrialConfig.from_dict(rep["recommended"]["config"]).label()
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith(label + ": ")]
    assert line.endswith("[simulated]")


def _sglang_parser():
    """SGLang's own names for the flags autotune writes (python/sglang/srt/server_args.py, ``add_cli_args``): the
    dest of each is the ``ServerArgs`` field, which /server_info reports and ``read_effective`` reads."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--model-path", "--model")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--dtype")
    return p


def test_the_sglang_command_round_trips_to_the_same_config(won):
    space, _s, rep, _t = won
    out = _export(won, "sglang")
    lines = out.strip().splitlines()
    assert all(line.startswith("#") for line in lines[:-1])
    argv = shlex.split(lines[-1])
    env = dict(a.split("=", 1) for a in argv[: argv.index("python3")])
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "$HF_TOKEN"}  # the secret from the deploying shell
    assert argv[argv.index("python3") : argv.index("python3") + 3] == ["python3", "-m", "sglang.launch_server"]
    ns, unknown = _sglang_parser().parse_known_args(argv[argv.index("python3") + 3 :])
    assert unknown == []
    eff = SGLangBackend().read_effective(vars(ns))
    drafter = {"/models/EAGLE3-LLaMA3.1-Instruct-8B": "eagle3-llama31-8b"}[ns.speculative_draft_model_path]
    back = TrialConfig.make(
        drafter,
        eff["cuda_graph"],
        num_steps=eff["num_steps"],
        topk=eff["topk"],
        num_draft_tokens=eff["num_draft_tokens"],
    )
    assert back == TrialConfig.from_dict(rep["recommended"]["config"])
    assert ns.speculative_algorithm == "EAGLE3" and ns.model_path == "/models/Llama-3.1-8B-Instruct"
    _check_provenance(read_provenance(out), rep, space)


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_env_file_starts_the_exact_argv_under_bash_and_sh(won, tmp_path, shell):
    """The README's start line, run for real: the server gets the exported argv word for word, the env file's
    variables, and no secret."""
    space, _s, rep, _t = won
    out = _export(won, "env")
    argv = _json_bundle(won)["launch"]["argv"]
    assert as_run.env_argv(out, shell, tmp_path) == argv
    shown = subprocess.run(
        [shell, "-c", 'set -a; . ./server.env; set +a; printf "%s\\0" "$CUDA_VISIBLE_DEVICES" "${HF_TOKEN-unset}"'],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.split("\0")
    assert shown[:2] == ["0,1", "unset"]  # the secret is named, never set
    assert "HF_TOKEN is a secret" in out
    _check_provenance(read_provenance(out), rep, space)


def test_compose_service_runs_the_exact_argv_with_the_gpus(won):
    space, _s, rep, _t = won
    doc = yaml.safe_load(_export(won, "compose"))
    ((name, svc),) = doc["services"].items()
    assert name == "llama31-8b-eagle3"
    argv = _json_bundle(won)["launch"]["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # the local command: the space's host
    # in the container the server listens on every interface; the port is published on the space's host
    assert svc["command"] == _on_every_interface(argv)
    assert svc["ports"] == ["127.0.0.1:30000:30000"] and "network_mode" not in svc
    assert svc["image"] == "lmsysorg/sglang:v0.5.23"
    dev = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["count"] == 2 and dev["capabilities"] == ["gpu"]  # CUDA_VISIBLE_DEVICES=0,1
    assert svc["environment"] == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "${HF_TOKEN:?set HF_TOKEN}"}
    assert "/models/EAGLE3-LLaMA3.1-Instruct-8B:/models/EAGLE3-LLaMA3.1-Instruct-8B:ro" in svc["volumes"]
    _check_provenance(doc["x-autotune"], rep, space)


def _on_every_interface(argv):
    i = argv.index("--host")
    return [*argv[: i + 1], "0.0.0.0", *argv[i + 2 :]]


def test_k8s_deployment_with_image_and_resources_as_parameters(won):
    space, _s, rep, _t = won
    text = _export(won, "k8s", "--image", "registry.local/sglang:pinned", "--gpus", "4", "--name", "Spec Llama")
    doc, service = yaml.safe_load_all(text)
    assert doc["apiVersion"] == "apps/v1" and doc["kind"] == "Deployment"
    assert doc["metadata"]["name"] == "spec-llama"
    spec = doc["spec"]
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    (c,) = spec["template"]["spec"]["containers"]
    assert c["image"] == "registry.local/sglang:pinned"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert c["command"] + c["args"] == _on_every_interface(_json_bundle(won)["launch"]["argv"])
    assert c["ports"] == [{"containerPort": 30000, "name": "http"}]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "spec-llama-secrets", "key": "HF_TOKEN"}
    assert env["CUDA_VISIBLE_DEVICES"]["value"] == "0,1"
    assert "&id" not in text  # plain YAML, no anchors
    _check_provenance(read_provenance(text), rep, space)
    # the Service in front of it, on the space's port
    assert service["kind"] == "Service" and service["metadata"]["name"] == "spec-llama"
    assert service["spec"]["selector"] == spec["template"]["metadata"]["labels"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 30000, "targetPort": "http"}]
    # probes on the health endpoint, the start-up one sized to the study's slowest measured start-up with a margin
    slowest = max(t["startup_s"] for t in rep["trials"] if t["startup_s"] and t["duplicate_of"] is None)
    assert slowest > 0
    startup, ready = c["startupProbe"], c["readinessProbe"]
    assert startup["httpGet"] == ready["httpGet"] == {"path": "/health", "port": "http"}
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    assert max(2 * slowest, slowest + 600) <= allowed < max(2 * slowest, slowest + 600) + startup["periodSeconds"]
    assert f"may fail for {allowed} s" in text and f"the study's slowest start-up {slowest:.0f} s" in text
    assert ready["failureThreshold"] * ready["periodSeconds"] <= 60
    default_text = _export(won, "k8s")
    default, _service = yaml.safe_load_all(default_text)
    (c,) = default["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "lmsysorg/sglang:v0.5.23" and c["resources"]["limits"]["nvidia.com/gpu"] == 2
    # a tag names no one build: the export says how to pin it by digest; an image given by digest runs as given
    assert "# pin it: --image lmsysorg/sglang:v0.5.23@sha256:DIGEST" in default_text
    pinned = "lmsysorg/sglang:v0.5.23@sha256:" + "0" * 64
    for fmt in ("k8s", "compose"):
        text = _export(won, fmt, "--image", pinned)
        assert f"image: {pinned}" in text and "# pin it" not in text, fmt


def test_no_format_leaks_the_secret_and_o_writes_the_same_atomically(won, tmp_path):
    for fmt in FORMATS:
        out = _export(won, fmt)
        if fmt not in ("yaml", "json"):  # the comment block: the method and the simulated label
            assert "method EAGLE3 [SIMULATED]" in out and "# SIMULATED: figures from autotune's simulator" in out
        target = tmp_path / f"x.{fmt}"
        _export(won, fmt, "-o", str(target))
        written = target.read_text()
        assert SECRET not in written
        strip = [line for line in written.splitlines() if "exported" not in line]
        assert strip == [line for line in out.splitlines() if "exported" not in line]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"x.{f}" for f in FORMATS)  # no temp files left


def test_trial_exports_that_trials_config(won):
    _space, _s, rep, _t = won
    other = next(
        t
        for t in rep["trials"]
        if t["state"] == "COMPLETE"
        and t["role"] == "speculative"
        and t["number"] != rep["best"]["trial"]
        and t["duplicate_of"] is None
    )
    b = json.loads(_export(won, "json", "--trial", str(other["number"])))
    assert b["trial"] == other["number"] and b["config"] == other["config"]
    assert b["provenance"]["measured"]["speedup"] == pytest.approx(other["speedup"])
    argv = b["launch"]["argv"]
    assert argv[argv.index("--speculative-num-steps") + 1] == str(other["config"]["num_steps"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--format", "helm"), "--format helm: unknown format; expected one of sglang, command, yaml"),
        # the study's config drafts a tree: vLLM drafts chains, no faithful translation
        (("--format", "vllm", "--trial", "TREE"), "no faithful translation of this SGLang study to vLLM"),
        (("--format", "yaml", "--trial", "999"), "--trial 999: no such trial"),
        (("--format", "k8s", "--gpus", "0"), "--gpus must be at least 1 but got 0"),
        (("--format", "yaml", "-o", "/nonexistent-dir/x.yaml"), "-o /nonexistent-dir/x.yaml: no such directory"),
        # a folder no one may create files in (sysfs: not even root)
        (("--format", "yaml", "-o", "/sys/x.yaml"), "-o /sys/x.yaml: cannot write /sys/x.yaml: Permission denied"),
        (("--format", "k8s", "-o", "TMP"), "-o TMP: it is a directory"),
    ],
)
def test_bad_export_arguments_are_one_line_exit_2(won, extra, message, tmp_path):
    space, studies, rep, _t = won
    if "TREE" in extra:
        tree = next(t for t in rep["trials"] if t["state"] == "COMPLETE" and (t["config"] or {}).get("topk", 1) > 1)
        extra = tuple(str(tree["number"]) if a == "TREE" else a for a in extra)
    extra = tuple(str(tmp_path) if a == "TMP" else a for a in extra)
    message = message.replace("TMP", str(tmp_path))
    r = autotune("export", str(space), "--simulate", "--studies-dir", str(studies), *extra)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"autotune: error: {r.stderr.split('error: ', 1)[1].strip()}"]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "where, message",
    [
        ("/sys/report.html", "--html /sys/report.html: cannot write it: Permission denied; nothing was written"),
        ("TMP", "--html TMP: it is a directory"),
    ],
)
def test_an_unwritable_html_report_path_is_one_line_exit_2(won, tmp_path, where, message):
    space, studies, _rep, _t = won
    where, message = where.replace("TMP", str(tmp_path)), message.replace("TMP", str(tmp_path))
    r = autotune("report", str(space), "--simulate", "--studies-dir", str(studies), "--html", where)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"autotune: error: {message}"]
    assert list(tmp_path.iterdir()) == []


def test_trial_that_was_not_measured_to_the_end_is_refused(won):
    import copy
    import dataclasses

    import optuna

    from autotune.export_bundle import choose
    from autotune.study.result import study_result

    _space, studies, rep, _t = won
    study = optuna.load_study(study_name=rep["study"], storage=f"sqlite:///{next(studies.glob('*.db'))}")
    res = study_result(study)
    last = next(t for t in res.trials if t.state == optuna.trial.TrialState.COMPLETE)
    assert choose(dataclasses.replace(res, trials=(last,)), last.number).trial == last.number
    pruned = copy.deepcopy(last)
    pruned.state, pruned.number = optuna.trial.TrialState.PRUNED, 7
    with pytest.raises(ValueError, match=r"--trial 7: it was not measured to the end \(PRUNED\)"):
        choose(dataclasses.replace(res, trials=(pruned,)), 7)


def test_a_chain_config_exports_to_vllm_as_a_translated_vllm_serve_command(won, tmp_path):
    """SGLang EAGLE-3 at topk 1 (a chain of S drafted tokens) is vLLM's eagle3 with S speculative tokens: a full
    ``vllm serve`` command with the provenance, labelled as a translation and as simulated."""
    space, _s, rep, _t = won
    chain = next((t for t in rep["trials"] if t["state"] == "COMPLETE" and (t["config"] or {}).get("topk") == 1), None)
    if chain is None:
        pytest.skip("no topk-1 trial was measured in this study")
    out = _export(won, "vllm", "--trial", str(chain["number"]))
    script = tmp_path / "vllm.sh"
    script.write_text(out)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    argv = shlex.split(out.strip().splitlines()[-1])
    i = argv.index("vllm")
    assert argv[i : i + 3] == ["vllm", "serve", "/models/Llama-3.1-8B-Instruct"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--dtype") + 1] == "bfloat16"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["model"] == "/models/EAGLE3-LLaMA3.1-Instruct-8B"
    assert spec["num_speculative_tokens"] == chain["config"]["num_steps"]
    assert "translated from the SGLang study to vLLM (method eagle3)" in out and "[SIMULATED]" in out
    p = read_provenance(out)
    assert p["trial"] == chain["number"] and p["method"] == "EAGLE3" and p["translated"]["method"] == "eagle3"
    assert p["config"] == chain["config"]  # reverify measures what the study measured

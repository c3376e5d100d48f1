"""A vLLM space through the CLI on the simulator playing vLLM: the shipped space's "Try it", and the drafter-not-engaged
alarm from vLLM's own counters (a server process per start, acceptance read from /metrics) and in-process."""

from __future__ import annotations

import re

import pytest
import yaml

from .helpers import REPO, autotune, report, space_file


def test_the_shipped_vllm_space_studies_and_exports_every_format(tmp_path):
    studies = tmp_path / "studies"
    space = REPO / "spaces" / "vllm-llama-8b-eagle3.yaml"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "8", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    rep = report(space, studies)
    assert rep["verdict"] == "speculation-wins" and rep["recommended"]["config"]["drafter"] == "eagle3-llama31-8b"
    k = rep["recommended"]["config"]["num_speculative_tokens"]
    for fmt in ("vllm", "command", "yaml", "json", "env", "compose", "k8s"):
        e = autotune("export", str(space), "--simulate", "--format", fmt, "--studies-dir", str(studies))
        assert e.returncode == 0, (fmt, e.stderr)
        # the speculative config as written in the format (JSON inside a string is escaped in json and yaml)
        assert re.search(r'method\\?": \\?"eagle3', e.stdout), (fmt, e.stdout)
        assert re.search(rf'num_speculative_tokens\\?": {k}\b', e.stdout), (fmt, e.stdout)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "server-process"])
def test_an_eagle3_head_run_as_eagle_trips_the_alarm_on_vllms_counters(tmp_path, in_process):
    # vLLM loads an EAGLE-3 head in its own format (Eagle3DeepseekV2ForCausalLM) under method eagle, then accepts
    # nothing and says nothing: only the spec-decode counters tell
    space = space_file(
        tmp_path,
        server={"backend": "vllm", "version": "0.33.0", "port": 8000, "extra_args": []},
        drafters=[{"name": "custom-10k", "path": "/models/x", "algorithm": "eagle"}],
    )
    data = yaml.safe_load(space.read_text())
    data["search"] = {
        "drafters": ["custom-10k"],
        "cuda_graph": [False],
        "num_speculative_tokens": {"low": 2, "high": 4},
    }
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    studies = tmp_path / "studies"
    run = ["--in-process"] if in_process else []
    r = autotune(
        "study", str(space), "--simulate", *run, "--skip-validation", "--n-trials", "3", "--studies-dir", str(studies)
    )
    assert r.returncode == 0, r.stderr
    rep = report(space, studies)
    alarmed = [t for t in rep["trials"] if t["fail_kind"] == "drafter-not-engaged"]
    assert alarmed, [(t["state"], t["accept_length"]) for t in rep["trials"]]
    assert min(alarmed, key=lambda t: t["number"])["accept_length"] < 1.1
    assert any("not engaged" in f for f in rep["flags"])
    assert [e["kind"] for e in rep["exclusions"]] == ["not-engaged"]

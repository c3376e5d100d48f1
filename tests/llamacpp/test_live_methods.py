"""A live llama.cpp method study: ``search.methods`` over draft-simple (the good drafter), two model-free n-gram types
and their combination, on the real ``llama-server`` with the tiny models, prompts that ask to rewrite a function
(an answer that copies its prompt). Asserted: every method runs, the n-gram types drafted from the prompt (their
accept length from the answers' ``timings.draft_n_accepted``), ``report --json`` gives each method's best with its
figures, and the verdict names a method or the baseline. Skipped without a llama-server binary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.llamacpp.test_live import SERVER, _descendants, models_dir

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

REWRITE = Path(__file__).parent / "prompts" / "rewrite.yaml"
METHODS = ("draft-simple", "ngram-simple", "ngram-mod", "draft-simple,ngram-mod")


def test_a_method_study_runs_every_method_and_reports_each(tmp_path):
    models = models_dir()
    prompts = yaml.safe_load(REWRITE.read_text())[:2]
    space = {
        "name": "llamacpp-live-methods",
        "server": {
            "backend": "llamacpp",
            "model_path": str(models / "target.gguf"),
            "launcher": [str(SERVER)],
            "port": 30480,
            "port_busy": "next",
            "startup_timeout_s": 120,
            "request_timeout_s": 120,
            "extra_args": ["-t", "1"],
        },
        "drafters": [{"name": "good", "path": str(models / "draft-good.gguf")}],
        "search": {
            "cuda_graph": [True],
            "methods": {
                "draft-simple": {"drafters": ["good"], "draft_n_max": [4, 8]},
                "ngram-simple": {"ngram_simple_size_n": [2, 3], "ngram_simple_size_m": [16]},
                "ngram-mod": {"ngram_mod_n_match": [4], "ngram_mod_n_max": [16], "ngram_mod_n_min": [1]},
                "draft-simple,ngram-mod": {
                    "drafters": ["good"],
                    "draft_n_max": [4],
                    "ngram_mod_n_match": [4],
                    "ngram_mod_n_max": [16],
                    "ngram_mod_n_min": [1],
                },
            },
        },
        "benchmark": {
            "prompts": prompts,
            "max_tokens": 48,
            "temperature": 0,
            "warmup_requests": 1,
            "retries": 1,
        },
        "pruning": {"enabled": True},
        "budget": {"n_trials": 5},
    }
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(space, sort_keys=False))
    common = ["--storage", f"sqlite:///{tmp_path / 'study.db'}", "--studies-dir", str(tmp_path / "studies")]
    before = _descendants()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "study", str(space_file), *common, "--no-confirm", "--seed", "0"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (_descendants() - before)
    rep = subprocess.run(
        [sys.executable, "-m", "autotune", "report", str(space_file), *common, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    data = json.loads(rep.stdout)
    spec = [t for t in data["trials"] if t["role"] == "speculative" and t["duplicate_of"] is None]
    ran = {t["config"]["method"] for t in spec if t["state"] in ("COMPLETE", "PRUNED") and t["speedup"] is not None}
    assert ran == set(METHODS), [(t["config"], t["state"], t.get("fail_reason")) for t in spec]
    # every launch named its type list; the model-free ones ran without a draft model (a config the launch gate
    # kept from a start has no argv: it was not launched)
    launched = [t for t in spec if t["argv"] is not None]
    assert {t["config"]["method"] for t in launched} == set(METHODS)
    for t in launched:
        argv = t["argv"]
        assert argv[argv.index("--spec-type") + 1] == t["config"]["method"]
        assert ("--spec-draft-model" in argv) == ("draft-simple" in t["config"]["method"])
    # the n-gram types drafted from the prompt: tokens accepted from the copied code (timings.draft_n_accepted)
    # (accept length above 1.0: draft_n_accepted > 0; ngram-mod copies long runs of the prompt's code)
    for method, floor in (("ngram-simple", 1.0), ("ngram-mod", 1.2)):
        accepts = [t["accept_length"] for t in launched if t["config"]["method"] == method and t["accept_length"]]
        assert accepts and max(accepts) > floor, (method, accepts)
    per_method = data["methods"]
    assert {m["method"] for m in per_method["methods"]} == set(METHODS)
    for m in per_method["methods"]:
        assert m["best"] is not None and m["best"]["speedup"] > 0 and m["best"]["config"]["method"] == m["method"]
    text = per_method["text"]
    assert any(label in text for label in ("baseline", "draft model", "ngram-simple", "ngram-mod"))
    assert data["verdict"] in ("speculation-wins", "baseline-wins", "inconclusive")

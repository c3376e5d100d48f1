"""`autotune bench` (one config, no study) and `autotune confirm` (re-run the confirmation) through the CLI."""

from __future__ import annotations

import json

from .helpers import REPO, autotune, report

EAGLE3 = str(REPO / "spaces" / "eagle3.yaml")


def test_bench_measures_the_field_report_manual_run(tmp_path):
    """The report's AQ-MedAI run at (4,1,5) without CUDA graphs: ~50 tok/s, accept length ~2 (simulated)."""
    r = autotune(
        "bench",
        EAGLE3,
        "--simulate",
        "--in-process",
        "--set",
        "drafter=aq-medai",
        "--set",
        "num_steps=4",
        "--set",
        "topk=1",
        "--set",
        "cuda_graph=false",
        "--json",
        "--studies-dir",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"] == {
        "drafter": "aq-medai",
        "cuda_graph": False,
        "num_draft_tokens": 5,
        "num_steps": 4,
        "topk": 1,
    }
    assert out["simulated"] == {"scenario": "kimi-k25-rtxpro6000", "time_scale": 200}  # the space's simulate
    assert 43 < out["summary"]["tok_per_s"] < 58
    assert 1.8 < out["summary"]["accept_length"] < 2.4
    assert len(out["prompts"]) == 5 and len({round(p["tok_per_s"], 1) for p in out["prompts"]}) > 1
    argv = out["argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5" and "--disable-decode-cuda-graph" in argv
    base = json.loads(
        autotune(
            "bench",
            EAGLE3,
            "--simulate",
            "--in-process",
            "--set",
            "cuda_graph=false",
            "--json",
            "--studies-dir",
            str(tmp_path),
        ).stdout
    )
    assert 80 < base["summary"]["tok_per_s"] < 100 and base["summary"]["accept_length"] is None
    assert not [a for a in base["argv"] if a.startswith("--speculative")]


def test_confirm_turns_a_search_only_study_into_a_confirmed_verdict(tmp_path):
    space = REPO / "spaces" / "llama-8b-eagle3.yaml"
    studies = tmp_path / "studies"
    r = autotune(
        "study",
        str(space),
        "--simulate",
        "--in-process",
        "--n-trials",
        "8",
        "--no-confirm",
        "--studies-dir",
        str(studies),
    )
    assert r.returncode == 0, r.stderr
    before = report(space, studies)
    assert before["verdict_basis"].startswith("search") and before["confirmed"] == []
    c = autotune("confirm", str(space), "--simulate", "--in-process", "--json", "--studies-dir", str(studies))
    assert c.returncode == 0, c.stderr
    after = json.loads(c.stdout)
    assert after["verdict_basis"] == "confirmed" and after["verdict"] == "speculation-wins"
    # every candidate gets the space's 3 rounds (verdict.repeats); the race goes on (up to max_repeats 8) while two
    # are close and not both proven winners within 1% of each other
    assert after["confirmed"] and all(3 <= x["speedup_ci"]["n"] <= 8 for x in after["confirmed"])
    winner = next(x for x in after["confirmed"] if x["trial"] == after["best"]["trial"])
    assert not winner["dropped"]
    assert report(space, studies)["verdict"] == "speculation-wins"

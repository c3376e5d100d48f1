"""Issue #4's checks through the CLI, on the simulator's stand-in checkpoints (real config.json files)."""

from __future__ import annotations

from .helpers import autotune, report, space_file


def _drafters(*names, **forced):
    return [{"name": n, "path": f"/models/{n}", **({"algorithm": forced[n]} if n in forced else {})} for n in names]


def test_validate_flags_every_broken_stand_in(tmp_path):
    space = space_file(
        tmp_path,
        drafters=_drafters("short-context", "wrong-hidden", "eagle1-legacy", "custom-10k"),
        search={"drafters": ["short-context", "wrong-hidden", "eagle1-legacy", "custom-10k"]},
        benchmark={"max_tokens": 4096},
    )
    r = autotune("validate", str(space), "--simulate")
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    text = "\n".join(errors)
    assert "short-context" in text and "2048" in text
    assert "wrong-hidden" in text and "4096" in text and "7168" in text
    assert not any("custom-10k" in e for e in errors)
    assert not any("eagle1-legacy" in e for e in errors)  # an EAGLE-1 drafter is fine under EAGLE (derived)


def test_eagle1_drafter_forced_to_eagle3_is_refused(tmp_path):
    space = space_file(
        tmp_path,
        drafters=_drafters("eagle1-legacy", **{"eagle1-legacy": "EAGLE3"}),
        search={"drafters": ["eagle1-legacy"]},
    )
    r = autotune("validate", str(space), "--simulate")
    assert r.returncode == 2 and "eagle1-legacy" in r.stderr and "EAGLE" in r.stderr


def test_divergent_drafter_is_flagged_and_never_recommended(tmp_path):
    space = space_file(
        tmp_path,
        drafters=_drafters("divergent", "custom-10k"),
        search={"drafters": ["divergent", "custom-10k"], "cuda_graph": [True]},
    )
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "10", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    rep = report(space, studies)
    divergent = [
        t
        for t in rep["trials"]
        if (t["config"] or {}).get("drafter") == "divergent" and t["state"] == "COMPLETE" and t["duplicate_of"] is None
    ]
    assert divergent, "the divergent drafter was never measured to completion"
    assert all(t["lossless"]["ok"] is False and t["lossless"]["min_prefix_fraction"] < 0.9 for t in divergent)
    assert any("diverges from the baseline" in f for f in rep["flags"])
    fine = [t for t in rep["trials"] if (t["config"] or {}).get("drafter") == "custom-10k" and t["state"] == "COMPLETE"]
    assert all(t["lossless"]["ok"] and t["lossless"]["min_prefix_fraction"] == 1.0 for t in fine)
    assert (rep["recommended"]["config"] or {}).get("drafter") != "divergent"
    assert all(c["config"]["drafter"] != "divergent" for c in rep["confirmed"])


def test_near_ties_are_numerics_and_the_winner_is_still_found(tmp_path):
    """The H200 case on the simulator: every speculative answer flips at a near tie (margin 0.004 nats) on every
    prompt. The old minimum-prefix rule excluded every config and said the baseline wins; now each flip is
    classified as numerics, nothing is excluded, and speculation wins."""
    space = space_file(
        tmp_path, base="llama-8b-eagle3.yaml", simulate={"scenario": "llama31-8b-h100", "near_ties": 1.0}
    )
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "10", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    rep = report(space, studies)
    measured = [t for t in rep["trials"] if t["role"] == "speculative" and t["state"] == "COMPLETE" and t["lossless"]]
    assert measured
    for t in measured:
        assert t["lossless"]["ok"] and t["lossless"]["lossy"] == []
        assert t["lossless"]["numerics"] == list(range(5))  # every prompt flipped, each at its near tie
        assert all(abs(d["margin"] - 0.004) < 1e-9 for d in t["lossless"]["divergences"])
        assert t["lossless"]["min_prefix_fraction"] < 0.9  # what the old rule vetoed
    assert rep["exclusions"] == [] and rep["verdict"] == "speculation-wins"
    assert rep["verdict_basis"] == "confirmed" and rep["confirmed"]
    assert rep["lossless"]["tolerance_source"] == "default for bfloat16"


def test_divergent_drafter_is_still_lossy_among_near_ties(tmp_path):
    space = space_file(
        tmp_path,
        drafters=_drafters("divergent", "custom-10k"),
        search={"drafters": ["divergent", "custom-10k"], "cuda_graph": [True]},
        simulate={"scenario": "kimi-k25-rtxpro6000", "time_scale": 200, "near_ties": 1.0},
    )
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "10", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    rep = report(space, studies)
    by_drafter: dict[str, list] = {}
    for t in rep["trials"]:
        if t["state"] == "COMPLETE" and t["duplicate_of"] is None and t["lossless"]:
            by_drafter.setdefault(t["config"]["drafter"], []).append(t)
    assert by_drafter.get("divergent"), "the divergent drafter was never measured to completion"
    for t in by_drafter["divergent"]:
        assert not t["lossless"]["ok"] and t["lossless"]["lossy"]
        assert all(
            d["kind"] == "lossy" and (d["margin"] is None or d["margin"] > 0.5) for d in t["lossless"]["divergences"]
        )
    for t in by_drafter.get("custom-10k", []):
        assert t["lossless"]["ok"] and set(t["lossless"]["numerics"]) == set(range(5))
    assert {e["kind"] for e in rep["exclusions"]} == {"lossy"}
    assert all(e["config"]["drafter"] == "divergent" for e in rep["exclusions"])
    assert rep["verdict"] != "baseline-wins"  # an excluded config might have won: never "the baseline wins"
    assert (rep["recommended"]["config"] or {}).get("drafter") != "divergent"

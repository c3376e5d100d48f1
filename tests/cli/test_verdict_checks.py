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

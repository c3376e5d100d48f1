"""The method choice end to end: ``spaces/methods.yaml`` on the simulator's three truths names the right method
(one seed per truth here, each study shared by the tests that read it; how often it does over 20 seeds per truth:
scripts/bench_methods.py, docs/benchmarks.md "Methods")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("bench_methods.py", "bench_methods")


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """``run(truth)``: bench_methods' run of that truth at seed 0 (its output and its folder), once per module."""
    bench, done = _bench(), {}

    def run(truth: str) -> tuple[dict, Path]:
        if truth not in done:
            work = tmp_path_factory.mktemp(f"methods-{truth}")
            done[truth] = bench.run_one(truth, 0, work), work
        return done[truth]

    return bench, run


@pytest.mark.slow
@pytest.mark.parametrize("truth", ["code-edit", "chat", "mtp"])
def test_the_right_method_wins(studies, truth):
    bench, run = studies
    out, _ = run(truth)
    assert out.get("error") is None and out["rc"] == 0, out
    assert out["winner"] == bench.TRUTHS[truth]["expect"], out["text"]
    assert out["text"].split(" wins on this prompt set: ")[1]  # the winner's interval follows
    if truth != "mtp":
        assert "MTP: MTP not available for this target" in out["text"]


#: a drafter-less winner's ``--speculative-algorithm`` (n-gram lookup, the target's own MTP layers)
DRAFTERLESS = {"code-edit": "NGRAM", "mtp": "NEXTN"}
NATIVE_FORMATS = ("sglang", "command", "yaml", "json", "env", "compose", "k8s")


@pytest.mark.slow
@pytest.mark.parametrize("truth", sorted(DRAFTERLESS))
def test_a_drafterless_winner_is_reported_and_exported(studies, tmp_path, truth):
    """n-gram and MTP run without a drafter checkpoint: the study ends with rc 0, the text and HTML reports render,
    every native export format names the method's algorithm, and the translation to vLLM says why it does not fit
    (exit 2, the formats that fit)."""
    bench, run = studies
    out, work = run(truth)
    assert out["rc"] == 0 and out["winner"] == bench.TRUTHS[truth]["expect"], out
    space = work / f"{truth}-0" / f"methods-{truth}.yaml"
    common = ["--simulate", "--studies-dir", str(work / f"{truth}-0" / "studies")]

    def cli(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "autotune", args[0], str(space), *common, *args[1:]]
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)

    algorithm = DRAFTERLESS[truth]
    for fmt in NATIVE_FORMATS:
        r = cli("export", "--format", fmt)
        assert r.returncode == 0, (fmt, r.stderr[-2000:])
        assert "--speculative-algorithm" in r.stdout and algorithm in r.stdout, (fmt, r.stdout[-2000:])
    launch = cli("export", "--format", "sglang").stdout
    (line,) = [ln for ln in launch.splitlines() if "sglang.launch_server" in ln and not ln.startswith("#")]
    assert f"--speculative-algorithm {algorithm}" in line
    if algorithm == "NGRAM":
        assert "--speculative-ngram-max-bfs-breadth" in line
    else:
        assert "--speculative-draft-model-path" not in line  # MTP: the target's own layers
    # the yaml/json export's verify line, run as written: it measures the drafter-less config again
    verify = json.loads(cli("export", "--format", "json").stdout)["verify"]
    assert " --set method=" in verify and " --set drafter=" not in verify, verify
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    r = subprocess.run(["bash", "-c", verify], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("[simulated]"), r.stderr[-2000:]
    r = cli("export", "--format", "vllm")
    assert r.returncode == 2 and "without a drafter checkpoint" in r.stderr and "formats that fit" in r.stderr, r
    assert "Traceback" not in r.stderr
    r = cli("report")
    assert r.returncode == 0 and "recommended: trial" in r.stdout, r.stderr[-2000:]
    html = tmp_path / "report.html"
    r = cli("report", "--html", str(html))
    assert r.returncode == 0 and html.stat().st_size > 10_000, r.stderr[-2000:]


@pytest.mark.slow
def test_a_study_with_adaptive_over_mtp_runs(tmp_path):
    """spaces/methods-mtp.yaml on the simulator: adaptive over the target's MTP layers is launched (NEXTN with
    --speculative-adaptive, which SGLang 0.5.23 keeps on), measured, and set beside tuned static MTP."""
    import json

    argv = [sys.executable, "-m", "autotune", "study", str(ROOT / "spaces" / "methods-mtp.yaml"), "--simulate"]
    argv += ["--in-process", "--n-trials", "20", "--studies-dir", str(tmp_path / "studies"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    ours = [t for t in report["trials"] if (t.get("config") or {}).get("method") == "adaptive-mtp"]
    assert any(t["state"] == "COMPLETE" for t in ours), [t["state"] for t in ours]
    assert not any(t["state"] == "FAIL" for t in ours)
    rows = {r["static_method"]: r for r in report["methods"]["adaptive"]}
    assert "mtp" in rows and rows["mtp"]["text"].startswith("adaptive MTP ")
    # confirmation weighs no more candidates than the plan said (each of the 5 methods' best may join the top 3)
    (most,) = re.findall(r"rounds of \d+ to (\d+) candidates", done.stderr)
    assert int(most) == 3 + 5 and 1 <= len(report["confirmed"]) <= int(most)

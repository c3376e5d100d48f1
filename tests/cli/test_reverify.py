"""`autotune reverify EXPORTED_FILE`: the exported config and its baseline started again, interleaved; exit 0 when
the speedup still holds inside the exported interval, 1 (with both intervals) when it does not."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from autotune.reverify import holds
from autotune.stats import Interval

from .helpers import REPO, autotune, space_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reverify")
    space = space_file(tmp, base="llama-8b-eagle3.yaml", server={"port": _free_port()})
    studies = tmp / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "30", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    files = {}
    for fmt in ("k8s", "yaml", "sglang"):
        files[fmt] = tmp / f"export.{fmt}"
        e = autotune(
            "export", str(space), "--simulate", "--format", fmt, "-o", str(files[fmt]), "--studies-dir", str(studies)
        )
        assert e.returncode == 0, e.stderr
    return space, studies, files, tmp


@pytest.mark.slow
def test_a_winning_export_still_holds_on_real_simulator_processes(exported):
    space, studies, files, _tmp = exported
    r = autotune("reverify", str(files["k8s"]), "--simulate", "--json", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["holds"] is True and out["still_wins"] is True
    assert len(out["rounds"]) == yaml.safe_load(space.read_text())["verdict"]["repeats"] == 3
    new, old = out["speedup_ci"], out["exported_speedup_ci"]
    assert new["low"] <= old["high"] and old["low"] <= new["high"]
    assert out["config"] == yaml.safe_load(files["yaml"].read_text())["config"]
    logs = list((studies / "llama31-8b-eagle3-sim" / "logs").glob("*.log"))
    assert len(logs) >= 2 * len(out["rounds"])  # real server starts: each round a baseline and the config


def test_a_changed_scenario_makes_it_fail_with_both_intervals(exported):
    space, studies, files, _tmp = exported
    text = space.read_text()
    regressed = space.with_name("space-regressed.yaml")
    data = yaml.safe_load(text)
    data["simulate"]["scenario"] = "llama31-8b-h100-regressed"
    regressed.write_text(yaml.safe_dump(data, sort_keys=False))
    for fmt in ("yaml", "sglang"):
        r = autotune(
            "reverify",
            str(files[fmt]),
            "--simulate",
            "--in-process",
            "--space",
            str(regressed),
            "--repeats",
            "3",
            "--studies-dir",
            str(studies),
        )
        assert r.returncode == 1, r.stderr
        assert "does NOT hold" in r.stdout and "no longer beats its baseline" in r.stdout
        line = next(x for x in r.stdout.splitlines() if x.startswith("speedup now"))
        assert line.count("[") == 2  # the new interval and the exported one
        assert len([x for x in r.stdout.splitlines() if x.strip().startswith("round ")]) == 3


def test_a_config_whose_server_crashes_on_every_fresh_start_does_not_hold(exported):
    """Real simulator processes, the exported config's server dying at its third request on every start (as
    llama.cpp's CUDA build died on the H200, docs/gpu-runs/2026-12-04-h200-levels21): each round's baseline is
    measured, the config gets one fresh start, then reverify stops: it does not hold, and says why."""
    space, studies, files, _tmp = exported
    data = yaml.safe_load(space.read_text())
    data["server"]["extra_args"] = [*data["server"]["extra_args"], "--fault", "crash-after:2@eagle3-llama31-8b"]
    crashing = space.with_name("space-crashing.yaml")
    crashing.write_text(yaml.safe_dump(data, sort_keys=False))
    args = ("reverify", str(files["yaml"]), "--simulate", "--space", str(crashing), "--studies-dir", str(studies))
    r = autotune(*args)
    assert r.returncode == 1, r.stderr
    assert "does NOT hold: the exported config's server failed on 2 fresh starts in round 1 (unstable)" in r.stdout
    assert "reverify round 1: the config's server failed (exit" in r.stderr and "a fresh start" in r.stderr
    assert "Traceback" not in r.stderr
    out = json.loads(autotune(*args, "--json").stdout)
    assert out["holds"] is False and out["still_wins"] is False and out["rounds"] == []
    assert out["failed"].count("exit ") == 2  # both starts' lines
    # the same crash on the baseline's server: an error (exit 1) naming it, no traceback
    data["server"]["extra_args"][-1] = "crash-after:2@none"
    crashing.write_text(yaml.safe_dump(data, sort_keys=False))
    b = autotune(*args)
    assert b.returncode == 1 and "the baseline's server failed on 2 fresh starts in round 1" in b.stderr
    assert "Traceback" not in b.stderr


def test_a_reverify_cut_short_resumes_from_its_rounds(exported):
    """A long re-verification (an inconclusive verdict's `--repeats 21` is 42 server starts) interrupted with Ctrl-C
    keeps its rounds; run again, it measures only the rest, then removes its journal (a later reverify starts
    afresh). Real simulator processes, a real SIGINT."""
    space, studies, files, _tmp = exported
    journals = studies / "llama31-8b-eagle3-sim" / "reverify"
    args = ["reverify", str(files["yaml"]), "--simulate", "--repeats", "4", "--studies-dir", str(studies)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(journals.glob("*.json")):
        time.sleep(0.1)
    assert list(journals.glob("*.json")), "no round was kept"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    (journal,) = journals.glob("*.json")
    kept = len(json.loads(journal.read_text())["rounds"])
    assert 1 <= kept < 4
    logs = studies / "llama31-8b-eagle3-sim" / "logs"
    before = len(list(logs.glob("*.log")))
    r = autotune(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert f"resuming from {journal}: {kept} round(s) kept" in r.stderr
    out = json.loads(r.stdout)
    assert len(out["rounds"]) == 4 and out["holds"] is True
    assert len(list(logs.glob("*.log"))) - before == 2 * (4 - kept)  # only the rounds left were measured
    assert not journal.exists()


def test_the_exported_scenario_in_process_holds(exported):
    _space, studies, files, _tmp = exported
    r = autotune("reverify", str(files["sglang"]), "--simulate", "--in-process", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "holds:" in r.stdout


def test_bad_inputs_exit_2_with_one_line(exported, tmp_path):
    space, studies, files, _tmp = exported
    junk = tmp_path / "junk.yaml"
    junk.write_text("a: 1\n")
    other = tmp_path / "other.yaml"
    doc = yaml.safe_load(space.read_text())
    other.write_text(yaml.safe_dump({**doc, "name": "other-study"}))
    cases = [
        ((str(tmp_path / "missing.yaml"), "--simulate"), "no such file"),
        ((str(junk), "--simulate"), "not an autotune export (no provenance found"),
        ((str(files["yaml"]),), "exported from a simulated study: re-verify it with --simulate"),
        ((str(files["yaml"]), "--simulate", "--repeats", "1"), "--repeats must be at least 2 but got 1"),
        # a space file that now describes another study (on the H200 the harness's next study had rewritten it)
        ((str(files["yaml"]), "--simulate", "--space", str(other)), "now describes study other-study-sim"),
    ]
    for args, message in cases:
        r = autotune("reverify", *args, "--studies-dir", str(studies))
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_baseline_export_has_nothing_to_reverify(tmp_path):
    space = space_file(tmp_path, base="eagle3.yaml")  # the field report: the baseline wins
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--n-trials", "8", "--studies-dir", str(studies))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "b.json"
    assert (
        autotune(
            "export", str(space), "--simulate", "--format", "json", "-o", str(out), "--studies-dir", str(studies)
        ).returncode
        == 0
    )
    r = autotune("reverify", str(out), "--simulate", "--in-process", "--studies-dir", str(studies))
    assert r.returncode == 2 and "deploys the baseline" in r.stderr


@pytest.mark.parametrize(
    ("new", "exported", "point", "ok"),
    [
        ((1.9, 2.1), (2.0, 2.2), 2.1, True),  # overlap
        ((1.4, 1.5), (2.0, 2.2), 2.1, False),  # slower now
        ((2.3, 2.5), (2.0, 2.2), 2.1, False),  # faster now: the export no longer describes it
        ((1.9, 2.2), None, 2.0, True),  # no exported interval: its point inside the new one
        ((1.9, 2.2), None, 2.3, False),
    ],
)
def test_holds_is_overlap_of_the_intervals(new, exported, point, ok):
    n = Interval(point=sum(new) / 2, low=new[0], high=new[1], n=4, confidence=0.95)
    e = None if exported is None else {"low": exported[0], "high": exported[1], "point": sum(exported) / 2}
    assert holds(n, e, point) is ok


def test_a_journal_without_per_level_figures_is_not_resumed_for_a_load_level_export(tmp_path):
    """A load-level reverify journaled by the autotune before the objective fix kept one level's tok/s as each
    round's figure: resuming from it would mix two quantities, so it is measured afresh (and said so); a journal
    with the per-level figures, or of a space without levels, is resumed."""
    from autotune.reverify import _kept

    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rounds": [{"baseline": 207.7, "config": 413.8}, {"baseline": 209.4, "config": 413.3}]}))
    notes: list[str] = []
    assert _kept(old, notes.append, levelled=True) == []
    assert "no per-level figures" in notes[0] and "measuring from the first round" in notes[0]
    assert len(_kept(old, notes.append, levelled=False)) == 2  # a space without levels: the same figure as before
    new = tmp_path / "new.json"
    rnd = {"baseline": 334.1, "config": 592.0, "levels": {"1": {"baseline": 202.8, "config": 381.6}}}
    new.write_text(json.dumps({"rounds": [rnd]}))
    assert [r.to_dict() for r in _kept(new, notes.append, levelled=True)] == [rnd]
    assert notes[-1].endswith("1 round(s) kept")

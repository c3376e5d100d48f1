"""A live llama.cpp study whose trials differ only in ``draft_n_max`` / ``draft_p_min`` (one drafter): with
``search.share_starts`` they are meant to share server starts, each request carrying its own values, checked
against the answers' draft counters (``timings.draft_n`` / ``draft_n_accepted``).

What the real binary does decides the outcome, and the test asserts the right one for it:

- a llama-server that honours ``speculative.n_max`` in the request body (llama.cpp of llama-cpp-python 0.3.16):
  trials share starts (fewer starts than trials, ``start.shared``, ``startup_s`` 0), the verification request
  drafted at most one token a step at ``n_max`` 1, and the report counts the shared starts once;
- one that ignores it (0.3.36, the build ``scripts/llamacpp_setup.sh`` makes: the keys sit in ``#if 0``): the
  verification request drafted more than one token a step, sharing is turned off and said so
  (``start.sharing_off``), and that trial and every later one got its own start with its own argv (no trial is
  measured on a server running other values).

Both runs (sharing on, sharing off) are timed side by side; the figures go to stdout (``-s``).
Skipped without a llama-server binary."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from tests.llamacpp.test_live import SERVER, _descendants, models_dir

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

PROMPTS = [
    {"id": "count", "text": "Count from one to forty in words, separated by commas: one, two, three,"},
    {"id": "alpha", "text": "Write the English alphabet in order, one letter per line, then repeat it."},
]
N_TRIALS = 6


def _space(tmp_path, share: bool) -> dict:
    models = models_dir()
    return {
        "name": f"llamacpp-live-sharing-{'on' if share else 'off'}",
        "server": {
            "backend": "llamacpp",
            "model_path": str(models / "target.gguf"),
            "launcher": [str(SERVER)],
            "port": 30560 if share else 30620,
            "port_busy": "next",
            "startup_timeout_s": 120,
            "request_timeout_s": 120,
            "extra_args": ["-t", "1"],
        },
        "drafters": [{"name": "good", "path": str(models / "draft-good.gguf")}],
        "search": {
            "cuda_graph": [True],
            "drafters": ["good"],
            "draft_n_max": [2, 4, 8],
            "draft_p_min": [0.0, 0.5],
            "share_starts": share,
        },
        "benchmark": {"prompts": PROMPTS, "max_tokens": 48, "temperature": 0, "warmup_requests": 1, "retries": 1},
        "pruning": {"enabled": False},
        "budget": {"n_trials": N_TRIALS},
    }


def _run(tmp_path, share: bool) -> tuple[dict, float]:
    d = tmp_path / ("on" if share else "off")
    d.mkdir()
    space_file = d / "space.yaml"
    space_file.write_text(yaml.safe_dump(_space(tmp_path, share), sort_keys=False))
    common = ["--storage", f"sqlite:///{d / 'study.db'}", "--studies-dir", str(d / "studies")]
    before = _descendants()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "study", str(space_file), *common, "--no-confirm", "--seed", "0"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=d,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (_descendants() - before), "a kept server outlived the study"
    rep = subprocess.run(
        [sys.executable, "-m", "autotune", "report", str(space_file), *common, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=d,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    data = json.loads(rep.stdout)
    data["_output"] = proc.stdout + proc.stderr
    return data, wall


def _starts(data: dict) -> list[dict]:
    return [t.get("start") or {} for t in data["trials"]]


def test_trials_differing_only_in_per_request_knobs_share_starts_checked_by_draft_counters(tmp_path):
    on, wall_on = _run(tmp_path, share=True)
    off, wall_off = _run(tmp_path, share=False)
    measured = [
        t
        for t in on["trials"]
        if t["role"] == "speculative" and t["state"] in ("COMPLETE", "PRUNED") and t["duplicate_of"] is None
    ]
    assert len(measured) >= 3, [(t["state"], t.get("fail_reason")) for t in on["trials"]]
    starts = [t["start"] for t in measured if t.get("start")]
    assert starts, "no speculative trial went through a shared launch"
    probes = [s["probe"] for s in starts if "probe" in s]
    assert probes, starts
    probe = probes[0]
    # the verification request asked for n_max 1 on a server launched with the space's largest n_max (8)
    assert probe["n_max"] == 1 and probe["launch_n_max"] == 8, probe
    assert probe["draft_n"] > 0, probe
    per_step = probe["draft_n"] / probe["steps_at_most"]
    gpu_on, gpu_off = on["gpu_time"], off["gpu_time"]
    print(
        f"\nshare_starts on : {gpu_on['search_starts']} starts for {len(on['trials'])} trials, {wall_on:.1f} s wall;"
        f" probe {probe['honoured']}: {probe['draft_n']} drafted in <= {probe['steps_at_most']} steps"
        f"\nshare_starts off: {gpu_off['search_starts']} starts for {len(off['trials'])} trials, {wall_off:.1f} s wall"
    )
    if probe["honoured"] == "ignored":
        # this build ignores the body's values: more than one token drafted a step at n_max 1
        assert per_step > 1.0, probe
        off_trials = [s for s in starts if s.get("sharing_off")]
        assert len(off_trials) == 1, starts
        assert "per-request knobs" in on["_output"] and "own server start" in on["_output"]
        # that trial, and every later one, ran on its own start with its own argv (no shared start at all)
        assert not any(s.get("shared") for s in _starts(on))
        for t in measured:
            argv = t["argv"]
            assert argv[argv.index("--spec-draft-n-max") + 1] == str(t["config"]["draft_n_max"]), argv
        assert gpu_on["search_starts"] == gpu_off["search_starts"]
    else:
        assert probe["honoured"] == "honoured" and per_step <= 1.0, probe
        shared = [t for t in measured if t["start"].get("shared")]
        assert shared, starts
        for t in shared:
            assert t["startup_s"] == 0
            assert t["start"]["per_request"]["draft_n_max"] == t["config"]["draft_n_max"]
        assert gpu_on["search_starts"] < len([t for t in on["trials"] if t["state"] in ("COMPLETE", "PRUNED")])
        assert gpu_on["search_starts"] < gpu_off["search_starts"]

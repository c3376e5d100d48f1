"""A live llama.cpp study whose trials differ only in ``draft_n_max`` / ``draft_p_min`` (one drafter): with
``search.share_starts`` they are meant to share server starts, each request carrying its own values, checked
against the answers' draft counters (``timings.draft_n`` / ``draft_n_accepted``).

Two real builds, each by ``scripts/llamacpp_setup.sh``:

- the honouring one (``--honouring``: llama-cpp-python ``LLAMA_CPP_PYTHON_HONOURING_VERSION``, 0.3.23, whose server
  reads ``speculative.n_max`` / ``n_min`` / ``p_min`` from the request body): trials share starts (fewer starts
  than measured trials, ``start.shared``, ``startup_s`` 0, one server log), the verification request drafted at
  most one token a step at ``n_max`` 1 (``honoured``), and every answer of every trial on a shared start passed the
  draft-counter check at the trial's own ``n_max`` (``start.checked`` / ``start.answers``);
- the default one (0.3.36: the keys sit in ``#if 0``), asserted by what its probe finds: when it ignores them
  the verification request drafted more than one token a step, sharing is turned off and said so
  (``start.sharing_off``), and that trial and every later one got its own start with its own argv.

Each build runs the same study twice, sharing on and off, timed side by side; the figures go to stdout (``-s``).
Each test is skipped without its binary (a failure in CI: tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from autotune.backends.llamacpp_flags import (
    LLAMA_CPP_PYTHON_HONOURING_VERSION,
    find_honouring_llama_server,
    find_llama_server,
)
from tests.llamacpp.conftest import _descendants, models_dir

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

SERVER = find_llama_server()
HONOURING = find_honouring_llama_server()
NO_SERVER = (
    "no llama-server binary: set AUTOTUNE_LLAMA_SERVER, put llama-server on PATH, or run scripts/llamacpp_setup.sh"
)
NO_HONOURING = (
    f"no llama-server that reads per-request draft knobs (llama-cpp-python {LLAMA_CPP_PYTHON_HONOURING_VERSION}): "
    "run scripts/llamacpp_setup.sh --honouring, or set AUTOTUNE_LLAMA_SERVER_HONOURING"
)

PROMPTS = [
    {"id": "count", "text": "Count from one to forty in words, separated by commas: one, two, three,"},
    {"id": "alpha", "text": "Write the English alphabet in order, one letter per line, then repeat it."},
]
N_TRIALS = 6


def _space(server: str, share: bool, port: int) -> dict:
    models = models_dir()
    return {
        "name": f"llamacpp-live-sharing-{'on' if share else 'off'}",
        "server": {
            "backend": "llamacpp",
            "model_path": str(models / "target.gguf"),
            "launcher": [str(server)],
            "port": port if share else port + 60,
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


def _run(tmp_path, server: str, share: bool, port: int) -> tuple[dict, float]:
    d = tmp_path / ("on" if share else "off")
    d.mkdir()
    space_file = d / "space.yaml"
    space_file.write_text(yaml.safe_dump(_space(server, share, port), sort_keys=False))
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


@pytest.mark.skipif(SERVER is None, reason=NO_SERVER)
def test_trials_differing_only_in_per_request_knobs_share_starts_checked_by_draft_counters(tmp_path):
    on, wall_on = _run(tmp_path, SERVER, share=True, port=30560)
    off, wall_off = _run(tmp_path, SERVER, share=False, port=30560)
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
        # the kept start the server refused held the machine until it was stopped: billed, a start of its own
        assert gpu_on["search_starts"] == gpu_off["search_starts"] + 1 and gpu_on["failed_starts"] == 1, gpu_on
        assert gpu_off["failed_starts"] == 0
    else:
        assert probe["honoured"] == "honoured" and per_step <= 1.0, probe
        shared = [t for t in measured if t["start"].get("shared")]
        assert shared, starts
        for t in shared:
            assert t["startup_s"] == 0
            assert t["start"]["per_request"]["draft_n_max"] == t["config"]["draft_n_max"]
        assert gpu_on["search_starts"] < len([t for t in on["trials"] if t["state"] in ("COMPLETE", "PRUNED")])
        assert gpu_on["search_starts"] < gpu_off["search_starts"]


@pytest.mark.skipif(HONOURING is None, reason=NO_HONOURING)
def test_on_a_server_that_reads_the_per_request_knobs_trials_share_starts_and_every_answer_is_checked(tmp_path):
    on, wall_on = _run(tmp_path, str(HONOURING), share=True, port=30680)
    off, wall_off = _run(tmp_path, str(HONOURING), share=False, port=30680)
    ran = [t for t in on["trials"] if t["state"] in ("COMPLETE", "PRUNED") and t["duplicate_of"] is None]
    spec = [t for t in ran if t["role"] == "speculative"]
    assert all(t["state"] == "COMPLETE" for t in ran), [(t["state"], t["reason"]) for t in ran]
    assert len(spec) >= 4, [(t["state"], t.get("reason")) for t in on["trials"]]
    assert "per-request knobs:" not in on["_output"]  # sharing was never turned off
    gpu_on, gpu_off = on["gpu_time"], off["gpu_time"]
    # fewer server starts than measured trials; without sharing every trial is its own start
    assert gpu_on["search_starts"] < len(ran), (gpu_on, len(ran))
    ran_off = [t for t in off["trials"] if t["state"] in ("COMPLETE", "PRUNED") and t["duplicate_of"] is None]
    assert gpu_off["search_starts"] == len(ran_off) and not any(t["start"] for t in ran_off)
    assert gpu_on["search_starts"] < gpu_off["search_starts"]

    by_start: dict[str, list[dict]] = {}
    for t in spec:
        assert t["start"], t  # every speculative trial went through a shared launch
        by_start.setdefault(t["start"]["id"], []).append(t)
    shared = [t for t in spec if t["start"]["shared"]]
    assert len(shared) >= 2, [t["start"] for t in spec]
    for group in by_start.values():
        first, *rest = group
        assert first["start"]["shared"] is False and first["startup_s"] > 0
        argv = first["argv"]  # launched with the space's largest n_max, the smallest n_min and p_min
        assert argv[argv.index("--spec-draft-n-max") + 1] == "8", argv
        assert argv[argv.index("--spec-draft-p-min") + 1] in ("0", "0.0"), argv
        assert "--spec-type" not in argv  # this build drafts with the model alone (its --spec-type: n-gram only)
        for t in rest:  # the same server: no start-up, the start's own log and argv
            assert t["start"]["shared"] is True and t["startup_s"] == 0, t["start"]
            assert t["log_path"] == first["log_path"] and t["argv"] == first["argv"]

    # the verification request (n_max 1 on a launch at 8) showed the values honoured
    probes = [t["start"]["probe"] for t in spec if "probe" in t["start"]]
    assert probes, [t["start"] for t in spec]
    for probe in probes:
        assert probe["honoured"] == "honoured", probe
        assert probe["n_max"] == 1 and probe["launch_n_max"] == 8, probe
        assert 0 < probe["draft_n"] <= probe["steps_at_most"], probe

    # every answer of every trial checked against its draft counters at the trial's own values
    n_answers = 1 + len(PROMPTS)  # the warm-up request and the prompts
    for t in spec:
        start, config = t["start"], t["config"]
        values = start["per_request"]
        assert values == {k: config[k] for k in ("draft_n_max", "draft_n_min", "draft_p_min")}, (values, config)
        assert sum(start["checked"].values()) >= n_answers, start
        assert set(start["checked"]) <= {"honoured", "consistent"}, start["checked"]
        for answer in start["answers"]:
            assert answer["n_max"] == config["draft_n_max"] and answer["launch_n_max"] == 8, answer
            assert answer["draft_n"] <= answer["n_max"] * answer["steps_at_most"], answer
            if answer["draft_n"] > 0 and answer["n_max"] < 8:
                assert answer["honoured"] == "honoured", answer
    # below the launch's n_max the counters tell the values apart: such trials were judged "honoured"
    assert any(t["start"]["checked"].get("honoured") for t in spec if t["config"]["draft_n_max"] < 8)
    # p_min leaves no bound in the counters, but greedy decoding is deterministic: a trial sent p_min 0.5 on the
    # launch's p_min 0.0 drafted fewer tokens a step than its p_min 0.0 twin (same n_max) did; a server running
    # the launch's p_min would have given both the same counters
    per_step = {
        (t["config"]["draft_n_max"], t["config"]["draft_p_min"]): _drafted_per_step(t["start"]["answers"]) for t in spec
    }
    pairs = {n: (per_step[(n, 0.0)], per_step[(n, 0.5)]) for n, p in per_step if p == 0.0 and (n, 0.5) in per_step}
    for n, (at_zero, at_half) in pairs.items():
        assert at_half < at_zero, (n, at_zero, at_half)

    for t in on["trials"]:
        st = t["start"] or {}
        print(
            f"\n  on  #{t['number']} {t['state']:8} {t['role']:11} n_max {t['config'].get('draft_n_max')}"
            f" p_min {t['config'].get('draft_p_min')} start {st.get('id')} shared {st.get('shared')}"
            f" startup {t['startup_s']} checked {st.get('checked')} dup {t['duplicate_of']} tok/s {t['tok_per_s']}",
            end="",
        )
    print(
        f"\nhonouring llama-server ({LLAMA_CPP_PYTHON_HONOURING_VERSION}):"
        f"\n  share_starts on : {gpu_on['search_starts']} starts for {len(ran)} measured trials"
        f" ({len(shared)} on a shared start), {wall_on:.1f} s wall"
        f"\n  share_starts off: {gpu_off['search_starts']} starts, {wall_off:.1f} s wall"
        f"\n  drafted a decode step (at least), p_min 0.0 vs 0.5 by n_max: "
        + ", ".join(f"{n}: {a:.2f} vs {b:.2f}" for n, (a, b) in sorted(pairs.items()))
    )


def _drafted_per_step(answers: list[dict]) -> float:
    """Draft tokens per decode step (at most ``predicted_n - draft_n_accepted`` steps) over a trial's answers."""
    steps = sum(a["steps_at_most"] for a in answers if "steps_at_most" in a)
    return sum(a.get("draft_n", 0) for a in answers) / steps if steps else 0.0

"""Shared starts at the process seam: a real child process (``fake_llama.py``) behind the real ``ProcessRunner``,
real HTTP. Trials differing only in llama.cpp's per-request knobs run on one server, each request carrying its own
values; a server that ignores them is caught by the verification request and every trial gets its own start."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.llamacpp_flags import NEW_SPELLING
from autotune.config import TrialConfig
from autotune.errors import BenchmarkError
from autotune.process import ProcessRunner
from autotune.space import BenchmarkSpec, Choices, DrafterSpec, Prompt, SearchSpec, ServerSpec, Space

FAKE = Path(__file__).parent / "fake_llama.py"


def _space(honour: str, port: int) -> Space:
    return Space(
        name="sharing",
        server=ServerSpec(
            backend="llamacpp",
            model_path="/m/target.gguf",
            launcher=(sys.executable, str(FAKE), "--honour", honour),
            port=port,
            port_busy="next",
            startup_timeout_s=30,
            request_timeout_s=30,
        ),
        drafters=(DrafterSpec(name="good", path="/m/good.gguf"), DrafterSpec(name="bad", path="/m/bad.gguf")),
        search=SearchSpec(
            cuda_graph=(True,), knobs={"draft_n_max": Choices((2, 4, 8)), "draft_p_min": Choices((0.0, 0.5))}
        ),
        benchmark=BenchmarkSpec(prompts=(Prompt(id="p0", text="hello"),), max_tokens=40, warmup_requests=0, retries=0),
    )


def _cfg(drafter: str, n_max: int, p_min: float) -> TrialConfig:
    return TrialConfig.make(
        drafter, True, spec_type="draft-simple", draft_n_max=n_max, draft_n_min=0, draft_p_min=p_min
    )


def _bodies(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def bodies(tmp_path, monkeypatch):
    path = tmp_path / "bodies.jsonl"
    monkeypatch.setenv("FAKE_BODIES", str(path))
    return path


def test_trials_differing_only_in_per_request_knobs_share_one_start(tmp_path, bodies):
    runner = ProcessRunner(_space("yes", 31850), LlamaCppBackend(spelling=NEW_SPELLING), log_dir=tmp_path)
    assert runner.share_starts(True) is not None
    try:
        first = runner.launch(_cfg("good", 2, 0.0))
        pid = first.info.pid
        assert first.info.start["shared"] is False and first.info.startup_s > 0
        # launched with the space's largest n_max; the trial's own values go in the body
        argv = first.info.argv
        assert argv[argv.index("--spec-draft-n-max") + 1] == "8"
        assert first.info.start["probe"]["honoured"] == "honoured"
        assert first.info.start["probe"]["drafted_per_step_at_least"] <= 1.0
        first.run_prompt(0)
        # the answer's counters checked at the trial's own n_max (2, below the launch's 8), kept with the start
        assert first.info.start["per_request"] == {"draft_n_max": 2, "draft_n_min": 0, "draft_p_min": 0.0}
        assert first.info.start["checked"] == {"honoured": 1}
        (answer,) = first.info.start["answers"]
        assert answer["n_max"] == 2 and answer["launch_n_max"] == 8 and answer["prompt"] == 0
        assert answer["draft_n"] <= 2 * answer["steps_at_most"]
        first.close()
        assert first.server.returncode is None  # kept for the next trial
        second = runner.launch(_cfg("good", 4, 0.5))
        assert second.info.pid == pid and second.info.startup_s == 0.0
        assert second.info.start["shared"] is True and second.info.start["id"] == first.info.start["id"]
        second.run_prompt(0)
        second.run_prompt(0)
        assert second.info.start["checked"] == {"honoured": 2}
        assert [a["n_max"] for a in second.info.start["answers"]] == [4, 4]
        assert len(first.info.start["answers"]) == 1  # each trial its own record
        second.close()
        sent = _bodies(bodies)
        assert sent[0]["speculative.n_max"] == 1  # the verification request
        assert (sent[1]["speculative.n_max"], sent[1]["speculative.p_min"]) == (2, 0.0)
        assert (sent[2]["speculative.n_max"], sent[2]["speculative.p_min"]) == (4, 0.5)
        # another drafter is another launch: the kept server is stopped, a new one started
        third = runner.launch(_cfg("bad", 2, 0.0))
        assert third.info.pid != pid and first.server.returncode is not None
        third.close()
        # a baseline is never shared: the kept server stops, the baseline gets its own start
        base = runner.launch(TrialConfig.baseline(True))
        assert not base.info.start and third.server.returncode is not None
        base.close()
        assert base.server.returncode is not None
    finally:
        runner.close()


def test_a_server_that_ignores_the_values_turns_sharing_off_and_the_trial_gets_its_own_start(tmp_path, bodies, caplog):
    caplog.set_level(logging.WARNING)
    runner = ProcessRunner(_space("no", 31880), LlamaCppBackend(spelling=NEW_SPELLING), log_dir=tmp_path)
    state = runner.share_starts(True)
    try:
        s = runner.launch(_cfg("good", 2, 0.0))
        start = s.info.start
        assert start["probe"]["honoured"] == "ignored" and start["shared"] is False
        assert "ignored" in start["sharing_off"] and start["refused_start_s"] > 0
        argv = s.info.argv  # its own argv: its own n_max at launch
        assert argv[argv.index("--spec-draft-n-max") + 1] == "2"
        s.run_prompt(0)
        s.close()
        assert s.server.returncode is not None
        notes = state.take_notes()
        assert not state.on and [n for n in notes if "own server start" in n] == [notes[0]]
        # said once, as the study's note: a warning too printed it twice beside `study --json` (the H200, noise23)
        assert not [r for r in caplog.records if "own server start" in r.getMessage()]
        # later trials: fresh starts as without sharing, nothing in the body
        again = runner.launch(_cfg("good", 4, 0.0))
        assert not again.info.start
        again.run_prompt(0)
        again.close()
        assert "speculative.n_max" not in _bodies(bodies)[-1]
    finally:
        runner.close()


def test_an_answer_proving_other_values_is_never_counted(tmp_path, bodies):
    """After the verification passed, an answer whose counters break the requested n_max is a BenchmarkError."""
    runner = ProcessRunner(_space("yes", 31910), LlamaCppBackend(spelling=NEW_SPELLING), log_dir=tmp_path)
    state = runner.share_starts(True)
    try:
        s = runner.launch(_cfg("good", 2, 0.0))
        s.client.extra_body = {**s.client.extra_body, "speculative.n_max": 8}  # the server drafts 8, we check for 2
        hook = s.client.on_answer
        s.client.on_answer = lambda i, sent, chunks: hook(i, {**sent, "speculative.n_max": 2}, chunks)
        with pytest.raises(BenchmarkError, match="did not run the per-request values"):
            s.run_prompt(0)
        assert s.info.start["checked"] == {"ignored": 1}
        assert s.info.start["answers"][0]["draft_n"] > 2 * s.info.start["answers"][0]["steps_at_most"]
        s.close()
        assert s.server.returncode is not None and not state.on  # a failed session is never kept
    finally:
        runner.close()

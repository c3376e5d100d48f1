"""The simulator reports per-position acceptance as SGLang 0.5.23 does: ``spec_correct_drafts_histogram`` in the
final ``meta_info`` (TokenizerManager._calculate_spec_decoding_metrics; entry j: verify steps that accepted j draft
tokens), read by the SGLang backend into ``PromptResult.positions``; the in-process runner gives the same counts."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from autotune.acceptance import acceptance_profile, from_histogram
from autotune.backends.sglang import SGLangBackend
from autotune.client import BenchmarkClient
from autotune.seam import VirtualClock
from autotune.sim import FIELD_REPORT_PROMPTS
from autotune.sim.runner import ModelRunner
from autotune.sim.timing import RequestPlan

from .helpers import KIMI, StandInBackend, make_space, sim_process, spec, sse_events

PROMPT = FIELD_REPORT_PROMPTS[1][1]


def _consistent(hist: list[int], completion: int, verify_ct: int) -> None:
    """Each decode round emits its accepted draft tokens and the bonus token; the prefill emits the first."""
    assert sum(hist) == verify_ct - 1
    assert 1 + sum((j + 1) * h for j, h in enumerate(hist)) == completion


def test_the_histogram_counts_each_rounds_accepted_drafts():
    plan = RequestPlan(9, 12, 5.0, np.array([4, 1, 3, 4]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert plan.correct_drafts_histogram == [1, 0, 1, 2]  # rounds with 0, 2, 3 and 3 accepted drafts
    assert RequestPlan(9, 1, 5.0, np.zeros(0, dtype=np.int64), np.zeros(0)).correct_drafts_histogram == []


def test_the_in_process_runner_reports_positions():
    r = ModelRunner(make_space(), StandInBackend(), VirtualClock(), seed=0)
    s = r.launch(spec("custom-10k", 4, 1, 5))
    res = s.run_prompt(0)
    p = res.positions
    assert p is not None and len(p.accepted) <= 4 and p.accepted[0] > 0
    # the counts are the rounds' (drafts = decode rounds), and the acceptance length follows from them
    rounds = p.drafts + 1  # the prefill counts as a verify round, as SGLang counts it
    assert res.accept_length == pytest.approx(res.completion_tokens / rounds)
    assert 1 + p.drafts + sum(p.accepted) == res.completion_tokens
    assert acceptance_profile(p.rates)[-1] == pytest.approx(sum(p.accepted) / p.drafts)
    base = r.launch(spec(None))
    assert base.run_prompt(0).positions is None


@pytest.mark.slow
def test_the_http_simulator_streams_sglangs_histogram(tmp_path):
    args = [
        "--model-path",
        "kimi-k25",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "aq-medai",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--enable-metrics",
    ]
    with sim_process(args, tmp_path, scenario=KIMI) as sim:
        sim.wait_healthy()
        body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 200, "temperature": 0}}
        events, _ = sse_events(sim.url, "/generate", body)
        chunks = [e for e in events if isinstance(e, dict)]
        final = chunks[-1]["meta_info"]
        hist = final["spec_correct_drafts_histogram"]
        assert all("spec_correct_drafts_histogram" not in c["meta_info"] for c in chunks[:-1])
        assert len(hist) <= 4 and hist[-1] > 0
        _consistent(hist, final["completion_tokens"], final["spec_verify_ct"])
        one = httpx.post(sim.url + "/generate", json=body, timeout=10).json()["meta_info"]
        assert one["spec_correct_drafts_histogram"] == hist  # temperature 0: the same rounds

        client = BenchmarkClient(sim.url, SGLangBackend(), retries=0)
        try:
            r = client.measure(0, PROMPT, max_tokens=200)
        finally:
            client.close()
        assert r.positions == from_histogram(hist)

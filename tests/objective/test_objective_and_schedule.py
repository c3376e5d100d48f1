"""Pure parts of load levels: the weighted objective, its prune bound over prompts x levels, the schedule."""

from __future__ import annotations

import dataclasses
import math

import pytest

from autotune import objective, schedule
from autotune.config import LevelResult, LevelSummary, PromptResult, level_requests
from autotune.records import LevelRow
from autotune.space.model import ObjectiveSpec, SloSpec


def test_weighted_value_is_the_weighted_geometric_mean():
    w = ObjectiveSpec(weights={1: 0.2, 32: 0.8}).weights_for((1, 8, 32))
    assert w == {1: 0.2, 8: 0.0, 32: 0.8}
    v = objective.weighted_value({1: 100.0, 8: 1.0, 32: 1000.0}, w)
    assert v == pytest.approx(math.exp(0.2 * math.log(100) + 0.8 * math.log(1000)))
    assert ObjectiveSpec().weights_for((1, 4)) == {1: 0.5, 4: 0.5}
    assert objective.weighted_value({1: 100.0}, {1: 0.5, 4: 0.5}) == 0.0  # a weighted level missing


def _steps(levels_speedups, n=4, noise=0.0):
    """trial/baseline intermediate values: prompt i of level index li at step li*n+i."""
    t, b = {}, {}
    for li, s in enumerate(levels_speedups):
        for i in range(n):
            b[li * n + i] = 100.0
            t[li * n + i] = 100.0 * s * (1 + noise * (-1) ** i)
    return t, b


def test_prune_bound_needs_the_weighted_levels_to_lose():
    kw = dict(confidence=0.95, min_prompts=2, start_noise=0.035)

    def by(weights):
        return objective.Objective(levels=(1, 32), weights=weights, n_prompts=4)

    # loses clearly at both levels: pruned
    t, b = _steps([0.7, 0.7], noise=0.01)
    assert by({1: 0.5, 32: 0.5}).prune(t, b, **kw).prune
    # loses at level 1 but wins at 32, which weighs most: not pruned
    t, b = _steps([0.8, 1.3], noise=0.01)
    assert not by({1: 0.2, 32: 0.8}).prune(t, b, **kw).prune
    # only level 1 measured so far: level 32 is bounded by level 1's upper bound plus the slack
    t, b = _steps([0.95], noise=0.01)
    d = by({1: 0.2, 32: 0.8}).prune(t, b, **kw)
    assert not d.prune and d.upper_bound > 1.0
    t, b = _steps([0.6], noise=0.01)
    assert by({1: 0.2, 32: 0.8}).prune(t, b, **kw).prune


def test_level_figures_and_requests():
    assert level_requests(1, 5) == [0, 1, 2, 3, 4]
    assert level_requests(4, 5) == [0, 1, 2, 3, 4, 0, 1, 2]
    reqs = tuple(PromptResult(i % 2, 101, 2.0, ttft_s=0.5 + 0.1 * i) for i in range(4))
    lv = LevelResult(4, reqs, 4.0, failed=1)
    s = lv.summary()
    assert s.tok_per_s == pytest.approx(404 / 4.0) and s.stream_tok_per_s == pytest.approx(50.5)
    assert s.itl_p50_ms == pytest.approx((2.0 - 0.65) / 100 * 1000)
    assert s.ttft_p99_ms <= 800.0 and s.failed == 1
    assert objective.slo_broken(s, SloSpec(itl_p99_ms=10.0)) == [f"itl_p99_ms {s.itl_p99_ms:.1f} > 10"]
    assert objective.slo_broken(s, SloSpec(itl_p99_ms=100.0)) == []


def _row(trial, steps, speedups, broken=()):
    return LevelRow(
        trial=trial,
        config={"drafter": "d", "cuda_graph": True, "topk": 1, "num_steps": steps, "num_draft_tokens": steps + 1},
        levels=tuple(
            LevelSummary(c, speedup=s, slo_broken=("itl",) if c in broken else ())
            for c, s in zip((1, 8, 64, 256), speedups, strict=True)
        ),
        lossy=False,
    )


def test_schedule_draft_falls_with_load_and_turns_off_from_the_first_loss():
    rows = [
        _row(1, 6, [2.2, 1.5, 0.9, 0.7]),
        _row(2, 3, [1.8, 1.6, 1.2, 0.95]),
        _row(3, 1, [1.3, 1.2, 1.25, 1.01], broken=(256,)),
    ]
    sched = schedule.build(rows, (1, 8, 64, 256), rows[0].config, backend="sglang", min_gain=0.02)
    assert [x["draft"] for x in sched["levels"]] == [6, 3, 1, 0]
    assert sched["on_up_to"] == 64 and sched["static"] == {"drafter": "d", "cuda_graph": True, "topk": 1}
    assert schedule.batch_ranges(sched) == [[1, 1, 6], [2, 8, 3], [9, 64, 1], [65, 256, 0]]
    from autotune.backends.sglang import adaptive_config, adaptive_initial_steps

    # SGLang 0.5.23's adaptive config: per batch-size range (its first size as the key), the draft length there
    assert adaptive_config(sched) == {
        "1": {"candidate_steps": [6]},
        "2": {"candidate_steps": [3]},
        "9": {"candidate_steps": [1]},
        "65": {"candidate_steps": [0]},
    }

    assert adaptive_initial_steps(sched) == 6
    # a lossy config never enters the schedule
    rows[0] = dataclasses.replace(rows[0], lossy=True)
    sched = schedule.build(rows, (1, 8, 64, 256), rows[1].config, backend="sglang", min_gain=0.02)
    assert sched["levels"][0]["draft"] == 3


def test_the_per_level_verdict_reads_right_at_one_stream_and_at_every_level():
    from autotune.records import LevelVerdict
    from autotune.study.levels import summary_text
    from autotune.verdict import Verdict

    def v(*pairs):
        return [LevelVerdict(c, None, None, x) for c, x in pairs]

    w, b, i = Verdict.SPECULATION_WINS, Verdict.BASELINE_WINS, Verdict.INCONCLUSIVE
    assert summary_text(v((1, w), (16, b))) == "speculation wins at 1 stream, loses from 16"
    assert summary_text(v((1, w), (4, w), (16, i))) == "speculation wins up to 4 streams (inconclusive above)"
    assert summary_text(v((1, w), (8, w))) == "speculation wins at every level (up to 8 streams)"
    assert summary_text(v((1, b), (8, b))) == "speculation loses at every level"
    assert summary_text(v((1, i), (8, b))) == "speculation loses from 8 streams"
    assert summary_text(v((1, w), (8, i), (32, b))) == "speculation wins at 1 stream, loses from 32"
    assert summary_text(v((1, i), (8, i))) == "inconclusive at every level"

"""The pure parts of llama.cpp's per-request knobs: which spaces declare them, the shared launch, the body, the
siblings, and the check of an answer's draft counters (honoured, ignored, unknown)."""

from __future__ import annotations

import pytest

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.per_request import Honoured
from autotune.backends.registry import get_backend
from autotune.config import EffectiveConfig
from autotune.space import Choices, FloatRange, IntRange
from tests.llamacpp.conftest import make_space


def _eff(n_max=2, n_min=0, p_min=0.0, drafter="good", spec_type="draft-simple"):
    return EffectiveConfig.make(
        drafter, True, spec_type=spec_type, draft_n_max=n_max, draft_n_min=n_min, draft_p_min=p_min
    )


def _per(knobs=None):
    space = make_space(knobs=knobs or {"draft_n_max": IntRange(2, 8), "draft_p_min": FloatRange(0.0, 0.8)})
    per = LlamaCppBackend().per_request(space)
    assert per is not None
    return per


def test_the_shared_launch_takes_the_largest_n_max_and_the_least_restrictive_rest():
    per = _per()
    launch = per.launch_config(_eff(n_max=3, n_min=1, p_min=0.6))
    assert (launch.knob("draft_n_max"), launch.knob("draft_n_min"), launch.knob("draft_p_min")) == (8, 0, 0.0)
    # configs differing only in per-request knobs have one launch; another drafter or type another
    assert per.launch_config(_eff(n_max=2, p_min=0.2)) == launch
    assert per.launch_config(_eff(drafter="bad")) != launch
    assert per.body(_eff(n_max=3, n_min=1, p_min=0.6)) == {
        "speculative.n_max": 3,
        "speculative.n_min": 1,
        "speculative.p_min": 0.6,
    }
    assert not per.applies(EffectiveConfig.baseline(True))
    assert not per.applies(_eff(spec_type="ngram-simple"))


def test_siblings_cover_the_space_per_request_values_on_one_launch():
    per = _per({"draft_n_max": Choices((2, 4)), "draft_n_min": Choices((0, 3)), "draft_p_min": FloatRange(0.0, 1.0)})
    sibs = per.siblings(_eff(n_max=2))
    assert {per.launch_config(s) for s in sibs} == {per.launch_config(_eff())}
    pairs = {(s.knob("draft_n_max"), s.knob("draft_n_min")) for s in sibs}
    assert pairs == {(2, 0), (4, 0), (4, 3)}  # n_min never above n_max
    assert {s.knob("draft_p_min") for s in sibs} == {0.0, 0.25, 0.5, 0.75, 1.0}


def test_spaces_without_per_request_knobs():
    space = make_space()
    from dataclasses import replace

    off = replace(space, search=replace(space.search, share_starts=False))
    assert LlamaCppBackend().per_request(off) is None
    assert get_backend("sglang").per_request(space) is None
    assert get_backend("vllm").per_request(space) is None


def _tel(predicted, drafted, accepted):
    return {"timings": {"predicted_n": predicted, "draft_n": drafted, "draft_n_accepted": accepted}}


@pytest.mark.parametrize(
    ("n_max", "chunks", "verdict"),
    [
        # 40 tokens in 20 decode steps (20 accepted): 20 drafted is 1 a step, within n_max 1 below the launch's 8
        (1, [_tel(40, 20, 20)], Honoured.YES),
        # the launch's 8 a step: more than requested (an ignoring server)
        (1, [_tel(40, 160, 20)], Honoured.NO),
        (2, [{"choices": []}, _tel(40, 41, 20)], Honoured.NO),  # 41 > 2 x 20
        (8, [_tel(40, 160, 20)], Honoured.CONSISTENT),  # the launch's own value: the counters cannot tell
        (2, [_tel(40, 0, 0)], Honoured.UNKNOWN),  # nothing drafted (draft_n absent or 0)
        (2, [{"choices": []}], Honoured.UNKNOWN),  # no timings at all
    ],
)
def test_the_draft_counter_check(n_max, chunks, verdict):
    per = _per()
    launch = per.launch_config(_eff())
    check = per.check({"speculative.n_max": n_max}, launch, per.telemetry(chunks))
    assert check.honoured is verdict, check
    assert check.to_dict()["honoured"] == verdict.value


def test_the_probe_asks_for_n_max_1_unless_the_launch_is_1():
    per = _per()
    assert per.probe_body(per.launch_config(_eff()))["speculative.n_max"] == 1
    one = _per({"draft_n_max": Choices((1,))})
    assert one.probe_body(one.launch_config(_eff(n_max=1))) is None


def test_the_h200_answer_that_ignored_the_probe_is_judged_ignored():
    """Recorded on an H200 (docs/gpu-runs/2026-12-02-h200-sharing, trial 2's probe): llama.cpp 0.3.36 built with
    CUDA, launched with --spec-draft-n-max 16, asked for speculative.n_max 1: 128 tokens, 355 drafted, 103 accepted,
    so at most 25 decode steps and at least 14.2 drafted a step: the request's value was not used."""
    per = _per({"draft_n_max": IntRange(1, 16)})
    launch = per.launch_config(_eff(n_max=3))
    assert launch.knob("draft_n_max") == 16
    check = per.check({"speculative.n_max": 1}, launch, per.telemetry([{"choices": []}, _tel(128, 355, 103)]))
    assert check.honoured is Honoured.NO
    assert "355" in check.reason and "25" in check.reason
    # the same answer is consistent with the launch's own value (16 a step at most): the counters allow it
    assert per.check({"speculative.n_max": 16}, launch, per.telemetry([_tel(128, 355, 103)])).honoured in (
        Honoured.CONSISTENT,
        Honoured.YES,
    )


@pytest.mark.parametrize(
    ("n_max", "predicted", "drafted", "accepted"),
    [
        (1, 128, 68, 59),  # the probe: 68 drafted in at most 69 decode steps
        (3, 256, 226, 179),  # trial 2's first answer
        (6, 256, 336, 199),  # trial 10 (a shared start)
        (10, 256, 470, 208),  # trial 11 (a shared start)
    ],
)
def test_the_h200_answers_of_the_honouring_build_are_judged_honoured(n_max, predicted, drafted, accepted):
    """Recorded on an H200 (docs/gpu-runs/2026-12-02-h200-sharing-0.3.23, report-share-on.json): llama.cpp as vendored
    by llama-cpp-python 0.3.23, built with CUDA, launched with --draft-max 16; each answer's own n_max was used
    (drafted per step within it, below the launch's 16), so the trials shared one start rightly."""
    per = _per({"draft_n_max": IntRange(1, 16)})
    launch = per.launch_config(_eff(n_max=3))
    check = per.check(
        {"speculative.n_max": n_max}, launch, per.telemetry([{"choices": []}, _tel(predicted, drafted, accepted)])
    )
    assert check.honoured is Honoured.YES, check
    # the same counters under the launch's 1-a-step value would be impossible for n_max above 1
    if n_max > 1:
        assert (
            per.check({"speculative.n_max": 1}, launch, per.telemetry([_tel(predicted, drafted, accepted)])).honoured
            is Honoured.NO
        )

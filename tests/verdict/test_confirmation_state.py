"""The confirmation's typed state and rounds (``autotune.records``): stored JSON in, the same JSON out."""

from __future__ import annotations

import json

import pytest

from autotune.records import (
    CandidateResult,
    ConfirmationState,
    Exclusion,
    FailedCandidate,
    Round,
    RoundLevels,
    rounds_from,
    rounds_to,
)
from autotune.stats import Interval
from autotune.verdict import Verdict

ROUND = {"baseline": {"False": 80.5, "True": 101.0}, "candidates": {"7": 120.0, "12": 0.0}}
LOADED = {
    "baseline": {"True": 100.0},
    "candidates": {"3": 130.0},
    "levels": {"baseline": {"True": {"1": 100.0, "64": 1000.0}}, "candidates": {"3": {"1": 150.0, "64": 900.0}}},
}
#: the order a finished confirmation writes its keys in (``autotune.study.confirm``)
DONE = {
    "keys": ["k7", "k12"],
    "rounds": [ROUND, LOADED],
    "done": True,
    "level_only": ["12"],
    "deploy_cuda_graph": None,
    "failed": [{"trial": 9, "kind": "unstable", "reason": "crashed", "round": 2, "failed_s": [3.5, 4.0]}],
    "results": [
        {
            "trial": 7,
            "config": {"num_steps": 3},
            "tok_per_s": [120.0, 130.0],
            "baseline_tok_per_s": [101.0, 100.0],
            "speedup_ci": {"point": 1.24, "low": 1.1, "high": 1.4, "n": 2, "confidence": 0.95, "df": 4.0},
            "deploy_baseline_tok_per_s": [None, None],
            "deploy_speedup_ci": None,
            "dropped": False,
        },
        {
            "trial": 12,
            "config": {},
            "tok_per_s": [0.0],
            "baseline_tok_per_s": [101.0],
            "speedup_ci": None,
            "deploy_baseline_tok_per_s": [101.0],
            "deploy_speedup_ci": None,
            "dropped": True,
        },
    ],
    "level_results": {"7": {"1": None}},
    "level_verdicts": [{"level": 1, "trial": None, "speedup_ci": None, "verdict": "baseline-wins"}],
    "level_text": "speculation loses at every level",
    "confidence": 0.95,
    "exclusions": [
        {"trial": 5, "kind": "not-engaged", "config": {"drafter": "x"}, "reason": None},
        {"trial": 6, "kind": "failed", "config": None, "reason": "exited: no"},
        {"trial": 9, "kind": "unstable", "config": {"num_steps": 5}, "speedup": None, "reason": "crashed"},
    ],
    "verdict": "inconclusive",
    "best": None,
    "basis": "confirmed",
    "rests_on": "confirmed: ...",
    "check_rounds": [{"baseline": {"True": 99.0}, "candidates": {}}],
    "baseline_check": [
        {
            "cuda_graph": "True",
            "search_tok_per_s": 100.0,
            "fresh_tok_per_s": 99.0,
            "fresh": [99.0],
            "ratio": 0.99,
            "limit": 1.1,
            "flagged": False,
        }
    ],
    "suspect_prunes": [{"trial": 4, "cuda_graph": "True", "speedup_upper": 0.97, "corrected_upper": 1.05}],
}
NOT_CONFIRMED = {
    "keys": [],
    "rounds": [],
    "results": [],
    "best": None,
    "done": True,
    "verdict": "inconclusive",
    "basis": "not-confirmed",
    "rests_on": "why",
    "note": "why",
    "exclusions": [{"trial": 3, "kind": "lossy", "config": {"num_steps": 3}, "speedup": 1.2, "reason": "diverges"}],
}


@pytest.mark.parametrize("stored", [ROUND, LOADED, {"baseline": {}, "candidates": {}}])
def test_a_round_reads_real_keys_and_writes_the_stored_form_back(stored: dict) -> None:
    r = Round.from_dict(stored)
    assert all(isinstance(k, bool) for k in r.baseline) and all(isinstance(k, int) for k in r.candidates)
    assert json.dumps(r.to_dict()) == json.dumps(stored)


def test_old_format_graph_keys_decode_to_booleans() -> None:
    r = Round.from_dict(LOADED)
    assert r.baseline == {True: 100.0} and r.candidates == {3: 130.0}
    assert r.levels == RoundLevels(baseline={True: {1: 100.0, 64: 1000.0}}, candidates={3: {1: 150.0, 64: 900.0}})
    assert Round.from_dict(ROUND).baseline == {False: 80.5, True: 101.0}
    with pytest.raises(ValueError, match="'None'"):
        Round.from_dict({"baseline": {"None": 1.0}, "candidates": {}})


def test_rounds_round_trip_as_a_list() -> None:
    assert rounds_to(rounds_from([ROUND, LOADED])) == [ROUND, LOADED]
    assert rounds_from(None) == []


@pytest.mark.parametrize(
    "stored",
    [
        DONE,
        NOT_CONFIRMED,
        {"keys": ["k"], "rounds": [], "done": False},
        {"keys": ["k"], "rounds": [ROUND], "done": False, "level_only": [], "deploy_cuda_graph": True},
        {"keys": ["k"], "rounds": [], "done": True, "from_an_older_version": {"x": 1}},  # unknown keys are kept
    ],
)
def test_the_state_writes_back_byte_for_byte(stored: dict) -> None:
    state = ConfirmationState.from_dict(json.loads(json.dumps(stored)))
    assert json.dumps(state.to_dict()) == json.dumps(stored)


def test_the_state_is_typed() -> None:
    state = ConfirmationState.from_dict(DONE)
    assert state.verdict is Verdict.INCONCLUSIVE and state.level_only == [12]
    assert state.rounds[0].candidates == {7: 120.0, 12: 0.0} and state.check_rounds == [Round({True: 99.0})]
    assert state.recorded("deploy_cuda_graph") and state.deploy_cuda_graph is None
    assert state.to_dict()["verdict"] == "inconclusive" and state.to_dict()["rounds"][1] == LOADED  # the stored form
    assert state.results is not None and state.exclusions is not None and state.failed is not None
    seven = state.results[0]
    assert isinstance(seven, CandidateResult) and seven.tok_per_s == (120.0, 130.0) and not seven.dropped
    assert seven.headline == seven.speedup_ci == Interval(1.24, 1.1, 1.4, 2, 0.95, 4.0)
    assert [type(e) for e in state.exclusions] == [Exclusion] * 3 and state.exclusions[0].reason is None
    assert state.exclusions[2].in_confirmation and not state.exclusions[1].in_confirmation
    assert state.failed == [FailedCandidate(9, "unstable", "crashed", 2, (3.5, 4.0))]
    assert state.failed[0].exclusion({"num_steps": 5}) == state.exclusions[2]


def test_a_new_state_stores_its_keys_in_the_order_they_are_set() -> None:
    state = ConfirmationState(keys=["k"], rounds=[])
    state.done = False
    assert not state.recorded("deploy_cuda_graph") and state.deploy_cuda_graph is None
    state.deploy_cuda_graph = None
    state.rounds.append(Round({True: 100.0}, {4: 110.0}))
    state.verdict = Verdict.SPECULATION_WINS
    state.done = True  # already stored: keeps its place
    assert list(state.to_dict()) == ["keys", "rounds", "done", "deploy_cuda_graph", "verdict"]
    assert state.to_dict()["verdict"] == "speculation-wins" and type(state.to_dict()["verdict"]) is str
    assert state.to_dict()["rounds"] == [{"baseline": {"True": 100.0}, "candidates": {"4": 110.0}}]


def test_not_confirmed_writes_the_order_it_always_had() -> None:
    state = ConfirmationState.not_confirmed("why", [Exclusion(3, "lossy", {"num_steps": 3}, "diverges", 1.2)])
    assert json.dumps(state.to_dict()) == json.dumps(NOT_CONFIRMED)

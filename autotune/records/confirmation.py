"""The study attr ``confirmation``: the confirmation's state and its rounds."""

from __future__ import annotations

from typing import Any, TypedDict


class ConfirmationState(TypedDict, total=False):
    """The study attr ``confirmation``: recorded after every round, so that a killed run resumes it."""

    keys: list[str | None]  # the candidates' config keys
    rounds: list[dict[str, Any]]  # {"baseline": {cuda_graph: tok/s}, "candidates": {trial number: tok/s}}
    deploy_cuda_graph: bool | None  # the fastest search baseline's setting
    results: list[dict[str, Any]]  # per candidate: tok/s, intervals (``autotune.study.race.candidate_result``)
    exclusions: list[dict[str, Any]]  # ``find_exclusions``
    best: int | None
    verdict: str
    basis: str  # confirmed | not-confirmed | search
    rests_on: str  # what the verdict rests on, in words
    note: str
    done: bool
    confidence: float  # of the verdict's intervals: the space's, or a stricter one after extra rounds
    # with load levels (``autotune.study.levels``)
    level_results: dict[str, dict[str, Any]]  # per candidate: {level: interval against the same-round baseline}
    level_verdicts: list[dict[str, Any]]  # per level: the best candidate, its interval and the level's verdict
    level_text: str  # "speculation wins up to 8 streams, loses from 32"
    level_only: list[str]  # candidates confirmed for a level's sake (``race.level_only_out``)
    # the search's baseline against confirmation's fresh ones (``autotune.study.baseline_check``)
    baseline_check: list[dict[str, Any]]
    suspect_prunes: list[dict[str, Any]]  # baseline-rule prunes that a fast search baseline may have caused
    check_rounds: list[dict[str, Any]]  # fresh baselines alone, when the search left nothing to confirm

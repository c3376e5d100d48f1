"""The study's own attrs: labels, the lossless floor, the phases' recorded state, the worker spec, the budget."""

from __future__ import annotations

import hashlib
from typing import Any

import optuna

from autotune.records.confirmation import ConfirmationState, Round, rounds_from, rounds_to
from autotune.records.schema import (
    BACKEND,
    BASELINE_CHECK_ROUNDS,
    CONFIRMATION,
    DRAFTER_REFERENCES,
    GREEDY_LOSSLESS,
    LEVEL_PHASE,
    LOSSLESS_FLOOR,
    METHODS,
    N_TRIALS,
    PROMPT_IDS,
    RECOMMENDED,
    SEARCH_SETTLED,
    SEED,
    SIMULATED,
    SPACE_DIGEST,
    SPACE_NAME,
    TRAFFIC,
    TRAFFIC_ACCEPTANCE,
    TRAFFIC_HOLDOUT,
    UNITS,
    VERDICT,
    WORKER_SPEC,
)


def lossless_floor(study: optuna.Study) -> list[dict[str, Any]]:
    """The divergences found between baselines (and each baseline compared: ``{"checked": True}``)."""
    return list(study.user_attrs.get(LOSSLESS_FLOOR, []))


def set_lossless_floor(study: optuna.Study, floor: list[dict[str, Any]]) -> None:
    study.set_user_attr(LOSSLESS_FLOOR, floor)


def level_phase(study: optuna.Study) -> dict[str, Any]:
    """With load levels: how far the phase after the search got (``rounds`` of per-level picks, ``ladder`` done)."""
    return dict(study.user_attrs.get(LEVEL_PHASE) or {})


def set_level_phase(study: optuna.Study, state: dict[str, Any]) -> None:
    study.set_user_attr(LEVEL_PHASE, state)


def baseline_check_rounds(study: optuna.Study) -> list[Round]:
    """Rounds of fresh baselines alone, measured when the search left nothing to confirm (so that "the baseline
    wins" does not rest on a single baseline start); ``autotune.study.baseline_check``."""
    return rounds_from(study.user_attrs.get(BASELINE_CHECK_ROUNDS))


def set_baseline_check_rounds(study: optuna.Study, rounds: list[Round]) -> None:
    study.set_user_attr(BASELINE_CHECK_ROUNDS, rounds_to(rounds))


def search_settled(study: optuna.Study) -> dict[str, Any] | None:
    """Why the search stopped before its budget (``autotune.study.settle.Settled`` as a dict, with ``trials`` and
    the ``n_trials`` cap it stopped under), or None."""
    stored = study.user_attrs.get(SEARCH_SETTLED)
    return dict(stored) if stored else None


def set_search_settled(study: optuna.Study, state: dict[str, Any]) -> None:
    study.set_user_attr(SEARCH_SETTLED, state)


def confirmation(study: optuna.Study) -> ConfirmationState | None:
    stored = study.user_attrs.get(CONFIRMATION)
    return ConfirmationState.from_dict(stored) if stored else None


def set_confirmation(study: optuna.Study, state: ConfirmationState) -> None:
    study.set_user_attr(CONFIRMATION, state.to_dict())


def reopen_confirmation(study: optuna.Study) -> None:
    """Mark a recorded confirmation not done, so that it is run again (``autotune confirm``)."""
    prev = confirmation(study)
    if prev:
        prev.done = False
        set_confirmation(study, prev)


def label_study(
    study: optuna.Study,
    *,
    digest: str,
    space_name: str,
    backend: str,
    simulated: bool,
    label: dict[str, Any] | None,
    prompt_ids: list[str],
    seed: int | None = None,
) -> None:
    """A new study's labels; ``label`` (the scenario and time scale) is kept for simulated studies only; ``seed``
    (``--seed``) also seeds the search's design."""
    if seed is not None:
        study.set_user_attr(SEED, seed)
    study.set_user_attr(SPACE_DIGEST, digest)
    study.set_user_attr(SPACE_NAME, space_name)
    study.set_user_attr(BACKEND, backend)
    study.set_user_attr(SIMULATED, label if simulated else None)
    study.set_user_attr(PROMPT_IDS, prompt_ids)
    study.set_user_attr(UNITS, "simulated hardware tok/s" if simulated else "tok/s")


def design_seed(study: optuna.Study) -> int:
    """The seed of the search's design: the study's ``--seed``, else derived from its name (stable per study)."""
    seed = study.user_attrs.get(SEED)
    if isinstance(seed, int):
        return seed
    return int.from_bytes(hashlib.sha256(study.study_name.encode()).digest()[:4], "little")


def worker_spec(study: optuna.Study) -> dict[str, Any] | None:
    return study.user_attrs.get(WORKER_SPEC)


def set_worker_spec(study: optuna.Study, spec: dict[str, Any]) -> None:
    study.set_user_attr(WORKER_SPEC, spec)


def study_n_trials(study: optuna.Study) -> int | None:
    return study.user_attrs.get(N_TRIALS)


def set_study_n_trials(study: optuna.Study, n: int) -> None:
    study.set_user_attr(N_TRIALS, int(n))


def space_digest(study: optuna.Study) -> str | None:
    return study.user_attrs.get(SPACE_DIGEST)


def prompt_ids(study: optuna.Study) -> list[str]:
    """The ids of the study's prompts, in order (``prompt_ids``, set when the study is created)."""
    return list(study.user_attrs.get(PROMPT_IDS) or [])


def study_labels(study: optuna.Study) -> tuple[Any, str]:
    """(simulated label or None, units) for reports."""
    return study.user_attrs.get(SIMULATED), study.user_attrs.get(UNITS, "tok/s")


def traffic(study: optuna.Study) -> dict[str, Any] | None:
    """A request-log study's subset and guards (``space.model.TrafficInfo`` as recorded); None for other studies."""
    value = study.user_attrs.get(TRAFFIC)
    return value if isinstance(value, dict) else None


def set_traffic(study: optuna.Study, info: dict[str, Any]) -> None:
    """Record the subset and guards once (the first run's stay: the study's prompts are fixed by its digest)."""
    if TRAFFIC not in study.user_attrs:
        study.set_user_attr(TRAFFIC, info)


def traffic_holdout(study: optuna.Study) -> dict[str, Any] | None:
    """The holdout check as recorded (``TRAFFIC_HOLDOUT``); None until a baseline measured it, or without one."""
    value = study.user_attrs.get(TRAFFIC_HOLDOUT)
    return value if isinstance(value, dict) else None


def set_traffic_holdout(study: optuna.Study, value: dict[str, Any]) -> None:
    """Record the holdout check once (the first baseline's; later baselines do not measure it again)."""
    if TRAFFIC_HOLDOUT not in study.user_attrs:
        study.set_user_attr(TRAFFIC_HOLDOUT, value)


def traffic_acceptance(study: optuna.Study) -> dict[str, Any] | None:
    """The winner's acceptance on the subset against the holdout as recorded (``TRAFFIC_ACCEPTANCE``); None until
    it ran, or without a holdout."""
    value = study.user_attrs.get(TRAFFIC_ACCEPTANCE)
    return value if isinstance(value, dict) else None


def set_traffic_acceptance(study: optuna.Study, value: dict[str, Any]) -> None:
    study.set_user_attr(TRAFFIC_ACCEPTANCE, value)


def greedy_lossless(study: optuna.Study) -> dict[str, Any] | None:
    """A sampling space's temperature-0 lossless check as recorded (``GREEDY_LOSSLESS``); None until it ran."""
    value = study.user_attrs.get(GREEDY_LOSSLESS)
    return value if isinstance(value, dict) else None


def set_greedy_lossless(study: optuna.Study, value: dict[str, Any]) -> None:
    study.set_user_attr(GREEDY_LOSSLESS, value)


def drafter_references(study: optuna.Study) -> dict[str, float]:
    """The drafters' reference acceptance lengths as the space gave them ({} when it gave none)."""
    value = study.user_attrs.get(DRAFTER_REFERENCES)
    return {str(k): float(v) for k, v in value.items()} if isinstance(value, dict) else {}


def set_drafter_references(study: optuna.Study, value: dict[str, float]) -> None:
    if study.user_attrs.get(DRAFTER_REFERENCES) != value:
        study.set_user_attr(DRAFTER_REFERENCES, value)


def method_catalogue(study: optuna.Study) -> dict[str, Any] | None:
    """The method space's catalogue the study recorded (``autotune.study.methods``); None for other spaces."""
    return study.user_attrs.get(METHODS)


def set_method_catalogue(study: optuna.Study, info: dict[str, Any]) -> None:
    """Record the catalogue once (the first run's stays)."""
    if METHODS not in study.user_attrs:
        study.set_user_attr(METHODS, info)


def set_outcome(study: optuna.Study, verdict: str, recommended: dict[str, Any]) -> None:
    """The verdict and the recommendation, rounded, for optuna-dashboard's study view."""
    study.set_user_attr(VERDICT, verdict)
    study.set_user_attr(RECOMMENDED, recommended)

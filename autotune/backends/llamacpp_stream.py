"""Reading llama-server's answers: the speculative figures of a final chunk's ``timings`` (``parse_timings``) and of
``/metrics`` counter deltas (``metrics_delta``).

Acceptance. The final streamed chunk carries ``timings.predicted_n`` (tokens generated), ``timings.draft_n``
(draft tokens proposed) and ``timings.draft_n_accepted``; it does not carry the number of verify steps. Every
target forward pass during generation yields exactly one token of its own plus the draft tokens it accepted,
so ``accept_length = predicted_n / (predicted_n - draft_n_accepted)``: tokens per target forward pass, bonus
token included, 1.0 when nothing is accepted -- the same quantity as SGLang's ``spec_accept_length``
(completion tokens / verify passes). Steps where no draft was made (a draft under ``n_min``) count as passes
yielding one token. ``/metrics`` gives the same from counter deltas (``tokens_predicted_total`` and
``spec_decode_num_accepted_tokens_total``); when the token counter is missing it falls back to the
server's log figure ``1 + accepted / drafts`` (per speculative verify step). ``acceptance_rate`` gives
``accepted / drafted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.acceptance import AcceptPositions
from autotune.backends.openai_stream import _float_or_none, _int_or_none
from autotune.backends.prometheus import metric_total, per_position_deltas


def accept_length(predicted_n: int | None, accepted: int | None) -> float | None:
    """Tokens per target forward pass: ``predicted / (predicted - accepted)`` (None when not computable)."""
    if predicted_n is None or accepted is None or predicted_n <= 0 or accepted < 0 or accepted >= predicted_n:
        return None
    return predicted_n / (predicted_n - accepted)


def acceptance_rate(drafted: int | float | None, accepted: int | float | None) -> float | None:
    """Fraction of drafted tokens the target accepted (None when nothing was drafted)."""
    if drafted is None or accepted is None or drafted <= 0:
        return None
    return float(accepted) / float(drafted)


def parse_timings(timings: Mapping[str, Any]) -> dict[str, Any]:
    """The speculative figures of a final chunk's ``timings`` object."""
    predicted = _int_or_none(timings.get("predicted_n"))
    drafted = _int_or_none(timings.get("draft_n"))
    accepted = _int_or_none(timings.get("draft_n_accepted"))
    return {
        "predicted_n": predicted,
        "predicted_per_second": _float_or_none(timings.get("predicted_per_second")),
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "accept_length": accept_length(predicted, accepted) if drafted else (1.0 if predicted else None),
        "acceptance_rate": acceptance_rate(drafted, accepted),
    }


#: llama-server's counter per draft position (label ``position`` 0, 1, ...): at each verification step with n draft
#: tokens accepted, positions 0..n-1 count one (tools/server/server-context.cpp, vendored by llama-cpp-python 0.3.36)
ACCEPTED_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
#: verification steps by the target model
DRAFTS = "llamacpp:spec_decode_num_drafts_total"


def metrics_positions(before: Mapping[str, float], after: Mapping[str, float]) -> AcceptPositions | None:
    """Per-position acceptance between two /metrics scrapes: ``ACCEPTED_PER_POS`` over the drafts counter (builds
    that have it, e.g. llama-cpp-python 0.3.36's); None where the build reports none."""
    got = per_position_deltas(before, after, ACCEPTED_PER_POS, DRAFTS)
    return None if got is None else AcceptPositions(*got)


def metrics_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Counter increases between two parsed /metrics scrapes: predicted tokens, drafted, accepted, drafts."""
    names = {
        "predicted": "llamacpp:tokens_predicted_total",
        "drafted": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
        "drafts": DRAFTS,
    }
    out: dict[str, float] = {}
    for key, name in names.items():
        a = metric_total(after, name)
        b = metric_total(before, name) or 0.0
        out[key] = max(0.0, a - b) if a is not None else 0.0
    return out


__all__ = [
    "ACCEPTED_PER_POS",
    "DRAFTS",
    "accept_length",
    "acceptance_rate",
    "metrics_delta",
    "metrics_positions",
    "parse_timings",
]

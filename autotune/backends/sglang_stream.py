"""Reading SGLang's native ``/generate`` answers: a streamed chunk (text so far, ``meta_info`` with the token
counts and, in the final chunk, the acceptance length; deltas instead of the text so far for a server launched with
``--incremental-streaming-output``: ``incremental_output``) and a non-streamed answer's log-probabilities."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.acceptance import AcceptPositions, from_histogram
from autotune.backends.openai_stream import ChunkInfo, _float_or_none, _int_or_none
from autotune.config import ReferenceOutput, TokenChoice

if TYPE_CHECKING:
    from autotune.space import Space

__all__ = ["INCREMENTAL_OUTPUT_FLAG", "incremental_output", "parse_generate_chunk", "parse_generate_logprobs"]

#: the flag that makes ``/generate`` stream deltas instead of the text so far
INCREMENTAL_OUTPUT_FLAG = "--incremental-streaming-output"


def incremental_output(space: Space) -> bool:
    """Whether servers of ``space`` stream ``/generate`` text as deltas (``--incremental-streaming-output``)."""
    return INCREMENTAL_OUTPUT_FLAG in space.server.extra_args


def parse_generate_chunk(obj: Mapping[str, Any], *, cumulative: bool = True) -> ChunkInfo:
    """One chunk of SGLang's native ``/generate`` stream.

    ``meta_info.finish_reason`` is None until the last chunk, then e.g. ``{"type": "length", "length": 512}``;
    the last chunk also has ``spec_accept_length`` (= completion_tokens / spec_verify_ct, bonus included) and, when
    a round was verified, ``spec_correct_drafts_histogram`` (SGLang 0.5.23: entry j counts the verify steps that
    accepted j draft tokens): the per-position acceptance counts (``autotune.acceptance.from_histogram``).
    """
    if obj.get("error"):
        err = obj["error"]
        return ChunkInfo(error=str(err.get("message", err)) if isinstance(err, dict) else str(err))
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):  # plain dict checks: this runs once per streamed chunk
        meta = {}
    completion = _int_or_none(meta.get("completion_tokens"))
    fr = meta.get("finish_reason")
    finish: str | None
    if isinstance(fr, dict):
        finish = str(fr.get("type")) if fr.get("type") is not None else "unknown"
    else:
        finish = str(fr) if fr else None
    accept = _float_or_none(meta.get("spec_accept_length"))
    verify = _int_or_none(meta.get("spec_verify_ct"))
    if accept is None and verify and completion is not None and finish is not None:
        accept = completion / verify
    if accept is not None and accept <= 0:
        accept = None
    text = obj.get("text")
    return ChunkInfo(
        text=str(text) if text is not None else None,
        cumulative=cumulative,
        completion_tokens=completion,
        prompt_tokens=_int_or_none(meta.get("prompt_tokens")),
        accept_length=accept if finish is not None else None,
        finish_reason=finish,
        final=finish is not None and completion is not None,
        positions=_positions(meta) if finish is not None else None,
    )


def _positions(meta: Mapping[str, Any]) -> AcceptPositions | None:
    hist = meta.get("spec_correct_drafts_histogram")
    return from_histogram(hist) if isinstance(hist, list) else None


def parse_generate_logprobs(obj: Mapping[str, Any], index: int) -> ReferenceOutput | None:
    """SGLang's ``/generate`` answer with ``return_logprob``: ``meta_info.output_token_logprobs`` =
    [[logprob, token_id, text], ...] and ``output_top_logprobs`` = one [[logprob, token_id, text], ...] list per
    generated token (texts present with ``return_text_in_logprobs``)."""
    meta = obj.get("meta_info")
    if not isinstance(meta, Mapping):
        return None
    chosen = meta.get("output_token_logprobs")
    tops = meta.get("output_top_logprobs")
    if not isinstance(chosen, list):
        return None
    tokens: list[TokenChoice] = []
    for i, entry in enumerate(chosen):
        if not isinstance(entry, (list, tuple)) or len(entry) < 3:
            return None
        top_entries = tops[i] if isinstance(tops, list) and i < len(tops) and isinstance(tops[i], list) else []
        top = tuple(
            sorted(
                ((str(e[2]), float(e[0])) for e in top_entries if isinstance(e, (list, tuple)) and len(e) >= 3),
                key=lambda x: -x[1],
            )
        )
        tokens.append(TokenChoice(str(entry[2] or ""), _float_or_none(entry[0]), top))
    text = obj.get("text")
    return ReferenceOutput(
        index=index, text=str(text) if text is not None else "".join(t.text for t in tokens), tokens=tuple(tokens)
    )

"""The OpenAI API's streamed chunks and log-probabilities, read into backend-independent forms.

``ChunkInfo`` is what one streamed JSON chunk says (every backend's ``parse_chunk`` returns one); ``ChunkParser`` reads
one launch's chunks. ``parse_openai_chunk`` reads an OpenAI ``/v1/completions`` or ``/v1/chat/completions`` chunk and
``parse_openai_logprobs`` a non-streamed answer with log-probabilities (the lossless check's reference), both the
defaults of ``autotune.backends.base.Backend``; ``_int_or_none`` / ``_float_or_none`` read a server's numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.acceptance import AcceptPositions
from autotune.config import ReferenceOutput, TokenChoice

__all__ = [
    "ChunkInfo",
    "ChunkParser",
    "_float_or_none",
    "_int_or_none",
    "_sorted_top",
    "_token_texts",
    "parse_openai_chunk",
    "parse_openai_logprobs",
]


@dataclass(frozen=True)
class ChunkInfo:
    """What one streamed JSON chunk says, in a backend-independent form.

    ``text`` is the text this chunk carries; when ``cumulative`` it is the whole output so far (SGLang's
    native /generate), otherwise a delta to append. ``completion_tokens`` / ``prompt_tokens`` come from the
    server's own count (usage or meta_info), never from counting chunks. ``accept_length`` is the request's
    mean acceptance length (bonus token included) when the server reports it. ``final`` marks the chunk that
    completes the request's accounting (finish reason and token counts are known). ``error`` is an error
    the server reported inside the stream. ``positions``: the request's per-position acceptance counts when the
    server reports them in the stream (``autotune.acceptance``).
    """

    text: str | None = None
    cumulative: bool = False
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    accept_length: float | None = None
    finish_reason: str | None = None
    final: bool = False
    error: str | None = None
    positions: AcceptPositions | None = None


#: reads one streamed JSON chunk of one launch's server (``Backend.chunk_parser``)
ChunkParser = Callable[[dict[str, Any]], ChunkInfo]


def parse_openai_chunk(obj: Mapping[str, Any]) -> ChunkInfo:
    """An OpenAI ``/v1/completions`` or ``/v1/chat/completions`` streamed chunk.

    With ``stream_options.include_usage`` the usage arrives in a last chunk with empty ``choices``; that
    chunk (any chunk carrying ``usage.completion_tokens``) is ``final``.
    """
    if "error" in obj and obj.get("error"):
        err = obj["error"]
        return ChunkInfo(error=str(err.get("message", err)) if isinstance(err, Mapping) else str(err))
    text_parts: list[str] = []
    finish: str | None = None
    for choice in obj.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        t = choice.get("text")
        if t is None and isinstance(choice.get("delta"), Mapping):
            t = choice["delta"].get("content")
        if t:
            text_parts.append(str(t))
        if choice.get("finish_reason"):
            finish = str(choice["finish_reason"])
    usage = obj.get("usage") if isinstance(obj.get("usage"), Mapping) else None
    completion = _int_or_none(usage.get("completion_tokens")) if usage else None
    prompt = _int_or_none(usage.get("prompt_tokens")) if usage else None
    return ChunkInfo(
        text="".join(text_parts) if text_parts else None,
        cumulative=False,
        completion_tokens=completion,
        prompt_tokens=prompt,
        finish_reason=finish,
        final=completion is not None,
    )


def _token_texts(entries: list[Mapping[str, Any]]) -> list[str]:
    """Each token's text; from its raw ``bytes`` when given, decoded incrementally so that a character split
    across tokens belongs to the token that completes it (the texts then add up to the answer exactly)."""
    if entries and all(isinstance(e.get("bytes"), list) for e in entries):
        import codecs

        dec = codecs.getincrementaldecoder("utf-8")("replace")
        out = []
        try:
            for e in entries:
                out.append(dec.decode(bytes(int(b) for b in e["bytes"])))
            out[-1] += dec.decode(b"", final=True)
            return out
        except (TypeError, ValueError):
            pass
    return [str(e.get("token", "")) for e in entries]


def parse_openai_logprobs(obj: Mapping[str, Any], index: int) -> ReferenceOutput | None:
    """A non-streamed OpenAI completion with log-probabilities: the legacy completions form (``tokens``,
    ``token_logprobs``, ``top_logprobs`` as {token: logprob}; vLLM, SGLang) or the ``content`` list form (chat
    completions; llama.cpp's completions with ``n_probs``)."""
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    choice = choices[0]
    text = choice.get("text")
    if text is None and isinstance(choice.get("message"), Mapping):
        text = choice["message"].get("content")
    lp = choice.get("logprobs")
    if not isinstance(lp, Mapping):
        return None
    tokens: list[TokenChoice] = []
    content = lp.get("content")
    if isinstance(content, list):
        entries = [e for e in content if isinstance(e, Mapping)]
        for e, t in zip(entries, _token_texts(entries), strict=True):
            tops = [x for x in e.get("top_logprobs") or [] if isinstance(x, Mapping)]
            top_texts = _token_texts(tops)
            top = tuple(
                (tt, float(x["logprob"])) for x, tt in zip(tops, top_texts, strict=True) if x.get("logprob") is not None
            )
            tokens.append(TokenChoice(t, _float_or_none(e.get("logprob")), _sorted_top(top)))
    elif isinstance(lp.get("tokens"), list):
        tops_list = lp.get("top_logprobs") or []
        token_lps = lp.get("token_logprobs") or []
        for i, t in enumerate(lp["tokens"]):
            top_d = tops_list[i] if i < len(tops_list) and isinstance(tops_list[i], Mapping) else {}
            top = tuple((str(k), float(v)) for k, v in top_d.items() if v is not None)
            chosen = _float_or_none(token_lps[i]) if i < len(token_lps) else None
            tokens.append(TokenChoice(str(t), chosen, _sorted_top(top)))
    else:
        return None
    if text is None:
        text = "".join(t.text for t in tokens)
    return ReferenceOutput(index=index, text=str(text), tokens=tuple(tokens))


def _sorted_top(top: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(top, key=lambda x: -x[1]))


def _int_or_none(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _float_or_none(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None

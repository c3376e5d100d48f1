"""Log-probabilities on the wire: what a request asks for, and the three answer formats the simulator serves.

- SGLang native ``/generate``: ``return_logprob``, ``top_logprobs_num``, ``return_text_in_logprobs`` ->
  ``meta_info.output_token_logprobs`` ``[[logprob, token_id, text], ...]`` and ``meta_info.output_top_logprobs``
  (one list of such triples per token; only when ``top_logprobs_num`` > 0). ``text`` is None without
  ``return_text_in_logprobs``, as on SGLang.
- OpenAI ``/v1/completions`` (legacy, as vLLM and SGLang answer): ``logprobs: N`` -> ``choices[0].logprobs`` with
  ``tokens``, ``token_logprobs``, ``top_logprobs`` (a dict per token, the chosen token always in it) and
  ``text_offset`` (character offsets in the completion text).
- OpenAI ``/v1/chat/completions``: ``logprobs: true``, ``top_logprobs: N`` -> ``choices[0].logprobs.content``.

Token ids are indices in the simulator's vocabulary (``autotune.sim.text.VOCAB``). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.config import TokenChoice
from autotune.sim.text import token_id


class LogprobRequestError(ValueError):
    """A request's log-probability fields are invalid (the server answers 400 with this message)."""


def _count(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise LogprobRequestError(f"'{name}' must be a non-negative integer, got {v!r}")
    return v


def native_request(body: Mapping[str, Any]) -> int | None:
    """``/generate``: the number of top log-probabilities asked for, or None when ``return_logprob`` is off."""
    if not body.get("return_logprob"):
        return None
    n = body.get("top_logprobs_num")
    return 0 if n is None else _count(n, "top_logprobs_num")


def completions_request(body: Mapping[str, Any]) -> int | None:
    """``/v1/completions``: ``logprobs`` (an integer; null or false: not asked)."""
    v = body.get("logprobs")
    if v is None or v is False:
        return None
    return _count(v, "logprobs")


def chat_request(body: Mapping[str, Any]) -> int | None:
    """``/v1/chat/completions``: ``top_logprobs`` when ``logprobs`` is true, else None."""
    asked = body.get("logprobs")
    top = body.get("top_logprobs")
    if asked is None or asked is False:
        if top not in (None, 0):
            raise LogprobRequestError("'top_logprobs' needs 'logprobs': true")
        return None
    if asked is not True:
        raise LogprobRequestError(f"'logprobs' must be true or false, got {asked!r}")
    return 0 if top is None else _count(top, "top_logprobs")


def _triple(text: str, logprob: float | None, with_text: bool) -> list[Any]:
    return [logprob, token_id(text), text if with_text else None]


def native_meta(choices: Sequence[TokenChoice], top_n: int, *, with_text: bool) -> dict[str, Any]:
    """The ``meta_info`` fields SGLang adds for ``return_logprob`` (output tokens only)."""
    meta: dict[str, Any] = {"output_token_logprobs": [_triple(c.text, c.logprob, with_text) for c in choices]}
    if top_n > 0:
        meta["output_top_logprobs"] = [[_triple(t, lp, with_text) for t, lp in c.top[:top_n]] for c in choices]
    return meta


def completions_logprobs(choices: Sequence[TokenChoice], top_n: int) -> dict[str, Any]:
    """``choices[0].logprobs`` of a legacy completion."""
    offsets, at = [], 0
    tops = []
    for c in choices:
        offsets.append(at)
        at += len(c.text)
        top: dict[str, float | None] = {t: lp for t, lp in c.top[:top_n]}
        top.setdefault(c.text, c.logprob)  # the chosen token is always listed, as vLLM does
        tops.append(top)
    return {
        "tokens": [c.text for c in choices],
        "token_logprobs": [c.logprob for c in choices],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _chat_entry(text: str, logprob: float | None) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(choices: Sequence[TokenChoice], top_n: int) -> dict[str, Any]:
    """``choices[0].logprobs`` of a chat completion."""
    return {
        "content": [
            {**_chat_entry(c.text, c.logprob), "top_logprobs": [_chat_entry(t, lp) for t, lp in c.top[:top_n]]}
            for c in choices
        ]
    }

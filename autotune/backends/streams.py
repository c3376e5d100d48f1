"""What servers send back, read into backend-independent forms: streamed chunks (``ChunkInfo``), log-probabilities
(``ReferenceOutput``) and ``/metrics`` (the Prometheus text format), for the OpenAI API, SGLang's native
``/generate`` and llama-server.

llama-server's acceptance: the final streamed chunk carries ``timings.predicted_n`` (tokens generated) and
``timings.draft_n_accepted``, not the number of verify steps. Every target forward pass yields one token of its own
plus the draft tokens it accepted, so ``accept_length = predicted_n / (predicted_n - draft_n_accepted)``: tokens per
target forward pass, bonus token included -- SGLang's ``spec_accept_length`` (completion tokens / verify passes).
``/metrics`` gives the same from counter deltas; without the token counter, the server's log figure
``1 + accepted / drafts`` (per speculative verify step).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.acceptance import AcceptPositions, from_histogram
from autotune.config import ReferenceOutput, TokenChoice

if TYPE_CHECKING:
    from autotune.space import Space


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
ChunkParser = Callable[[Mapping[str, object]], ChunkInfo]


def parse_openai_chunk(obj: Mapping[str, Any]) -> ChunkInfo:
    """An OpenAI ``/v1/completions`` or ``/v1/chat/completions`` streamed chunk; one carrying
    ``usage.completion_tokens`` (``stream_options.include_usage``: the last, with empty ``choices``) is ``final``."""
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


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _parse_labels(text: str) -> list[tuple[str, str]]:
    labels: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            break
        value = m.group(2).replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")
        labels.append((m.group(1), value))
        pos = m.end()
    return sorted(labels)


def series_key(name: str, labels: Mapping[str, str] | None = None) -> str:
    """Canonical key of one series: ``name`` or ``name{a="x",b="y"}`` with labels sorted."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {``series_key``: value}; comments and malformed lines are skipped."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict(_parse_labels(m.group("labels") or ""))
        out[series_key(m.group("name"), labels)] = value
    return out


def metric_total(metrics: Mapping[str, float], name: str) -> float | None:
    """Sum of every series of metric ``name`` (all label sets); None when the metric is absent."""
    total = 0.0
    found = False
    for key, value in metrics.items():
        if key == name or (key.startswith(name) and key[len(name) :].startswith("{")):
            if math.isfinite(value):
                total += value
                found = True
    return total if found else None


def metric_by_label(metrics: Mapping[str, float], name: str, label: str) -> dict[str, float]:
    """Metric ``name`` summed per value of ``label`` over its other labels (e.g. a per-position counter over every
    engine): {label value: total}; series without ``label`` are left out, so is a non-finite value."""
    out: dict[str, float] = {}
    prefix = name + "{"
    for key, value in metrics.items():
        if not key.startswith(prefix) or not key.endswith("}") or not math.isfinite(value):
            continue
        labels = dict(_parse_labels(key[len(prefix) : -1]))
        if label in labels:
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def per_position_deltas(
    before: Mapping[str, float], after: Mapping[str, float], per_pos: str, drafts: str, label: str = "position"
) -> tuple[int, tuple[int, ...]] | None:
    """(drafts, accepted at each position) between two scrapes, from a counter per draft position (``per_pos``,
    label ``label`` = 0, 1, ...: drafts whose first i+1 tokens were accepted) and the drafts counter; None when no
    draft was made, a counter is missing or a delta is negative (a restarted server)."""
    a, b = metric_total(after, drafts), metric_total(before, drafts)
    now = metric_by_label(after, per_pos, label)
    if a is None or not now:
        return None
    n = a - (b or 0.0)
    if n <= 0:
        return None
    then = metric_by_label(before, per_pos, label)
    try:
        depth = sorted(int(k) for k in now)
    except ValueError:
        return None
    if depth != list(range(len(depth))):
        return None
    accepted = tuple(now[str(i)] - then.get(str(i), 0.0) for i in depth)
    if any(x < 0 for x in accepted):
        return None
    return int(round(n)), tuple(int(round(x)) for x in accepted)


#: the flag that makes ``/generate`` stream deltas instead of the text so far
INCREMENTAL_OUTPUT_FLAG = "--incremental-streaming-output"


def incremental_output(space: Space) -> bool:
    """Whether servers of ``space`` stream ``/generate`` text as deltas (``--incremental-streaming-output``)."""
    return INCREMENTAL_OUTPUT_FLAG in space.server.extra_args


def parse_generate_chunk(obj: Mapping[str, object], *, cumulative: bool = True) -> ChunkInfo:
    """One chunk of SGLang's native ``/generate`` stream. ``meta_info.finish_reason`` is None until the last chunk,
    which also has ``spec_accept_length`` (= completion_tokens / spec_verify_ct, bonus included) and, when a round was
    verified, ``spec_correct_drafts_histogram`` (SGLang 0.5.23: entry j counts the verify steps that accepted j draft
    tokens; ``autotune.acceptance.from_histogram``)."""
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


def _positions(meta: Mapping[str, object]) -> AcceptPositions | None:
    hist = meta.get("spec_correct_drafts_histogram")
    return from_histogram(hist) if isinstance(hist, list) else None


def parse_generate_logprobs(obj: Mapping[str, object], index: int) -> ReferenceOutput | None:
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
        top = tuple((str(e[2]), float(e[0])) for e in top_entries if isinstance(e, (list, tuple)) and len(e) >= 3)
        tokens.append(TokenChoice(str(entry[2] or ""), _float_or_none(entry[0]), _sorted_top(top)))
    text = obj.get("text")
    return ReferenceOutput(
        index=index, text=str(text) if text is not None else "".join(t.text for t in tokens), tokens=tuple(tokens)
    )


def accept_length(predicted_n: int | None, accepted: int | None) -> float | None:
    """Tokens per target forward pass: ``predicted / (predicted - accepted)`` (None when not computable)."""
    if predicted_n is None or accepted is None or predicted_n <= 0 or accepted < 0 or accepted >= predicted_n:
        return None
    return predicted_n / (predicted_n - accepted)


def timings_accept_length(timings: Mapping[str, object]) -> float | None:
    """The acceptance length of llama-server's final chunk's ``timings`` (1.0 when nothing was drafted)."""
    predicted = _int_or_none(timings.get("predicted_n"))
    if _int_or_none(timings.get("draft_n")):
        return accept_length(predicted, _int_or_none(timings.get("draft_n_accepted")))
    return 1.0 if predicted else None


#: llama-server's counter per draft position (label ``position`` 0, 1, ...): at each verification step with n draft
#: tokens accepted, positions 0..n-1 count one (tools/server/server-context.cpp, vendored by llama-cpp-python 0.3.36)
LLAMA_ACCEPTED_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
#: verification steps by the target model
LLAMA_DRAFTS = "llamacpp:spec_decode_num_drafts_total"


def metrics_positions(before: Mapping[str, float], after: Mapping[str, float]) -> AcceptPositions | None:
    """Per-position acceptance between two /metrics scrapes: ``LLAMA_ACCEPTED_PER_POS`` over the drafts counter (builds
    that have it, e.g. llama-cpp-python 0.3.36's); None where the build reports none."""
    got = per_position_deltas(before, after, LLAMA_ACCEPTED_PER_POS, LLAMA_DRAFTS)
    return None if got is None else AcceptPositions(*got)


@dataclass(frozen=True)
class CounterDeltas:
    """llama-server's counter increases between two ``/metrics`` scrapes (0 where a counter is missing)."""

    predicted: float  # tokens generated
    accepted: float  # draft tokens accepted
    drafts: float  # drafts made (speculative verify steps)


#: the llama-server counter behind each ``CounterDeltas`` field
_LLAMA_COUNTERS = {
    "predicted": "llamacpp:tokens_predicted_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    "drafts": LLAMA_DRAFTS,
}


def metrics_delta(before: Mapping[str, float], after: Mapping[str, float]) -> CounterDeltas:
    """Counter increases between two parsed /metrics scrapes: predicted tokens, accepted, drafts."""
    out: dict[str, float] = {}
    for key, name in _LLAMA_COUNTERS.items():
        a = metric_total(after, name)
        b = metric_total(before, name) or 0.0
        out[key] = max(0.0, a - b) if a is not None else 0.0
    return CounterDeltas(**out)

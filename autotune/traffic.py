"""Production traffic as the prompt set, the pure part: request logs read into typed requests, a representative
subset picked from a large log, and the validity guards that say when a measurement cannot transfer to production.

Formats read (one file, detected from its content):

- **OpenAI request bodies as JSON lines**: each line a chat body (``messages``: system, user and assistant turns) or
  a completions body (``prompt``), with its own ``max_tokens`` (or ``max_completion_tokens``), ``temperature``,
  ``top_p`` and ``chat_template_kwargs``; a line may wrap the body as ``{"body": ...}`` (the OpenAI batch input)
  or ``{"request": ..., "response": ...}`` (a logging proxy), and the logged response (``choices[0]``, ``usage``)
  is kept for the guards. A category may be given as ``category`` or ``metadata.category``.
- **ShareGPT conversations** (a JSON array, or JSON lines), the file SGLang's and vLLM's serving benchmarks read:
  ``{"id", "conversations": [{"from": "system"|"human"|"gpt", "value"}]}``; the request is every turn up to the
  last human turn, the gpt turn after it its logged response.

A bad log is a ``SpaceError`` naming the file, the line and the field (exit 2 at the CLI, nothing written).
"""

from __future__ import annotations

import json
import math
import random
import re
import unicodedata
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.errors import SpaceError
from autotune.stats import (
    Interval,
    interval_text,
    mean_interval,
    ratio_of_means_interval,
    speedup_interval,
    two_sample_interval,
)

#: characters per token, for lengths where the log has no token counts (English text and code average 3.5-4.5)
CHARS_PER_TOKEN = 4.0

_ROLES = {"system", "user", "assistant", "developer", "tool"}
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


@dataclass(frozen=True)
class LoggedRequest:
    """One request of a log, as the server got it, with what the log says it answered."""

    id: str
    line: int
    messages: tuple[Turn, ...] | None  # chat turns (system and earlier turns included); None: a completions request
    prompt: str | None  # the completions prompt; None: a chat request
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    category: str | None = None
    thinking: bool | None = None  # ``chat_template_kwargs.enable_thinking``, None when the request has none
    # the logged answer, its finish reason and lengths in tokens, where the log has them
    response: str | None = None
    finish_reason: str | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    reasoned: bool = False  # the logged answer carried reasoning (``reasoning_content`` or a ``<think>`` block)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def text(self) -> str:
        """The whole input as one text (chat turns as ``role: content`` lines)."""
        if self.messages is None:
            return self.prompt or ""
        return "\n".join(f"{t.role}: {t.content}" for t in self.messages)

    @property
    def ask(self) -> str:
        """What this request asks, without what every request shares: the last user turn (the whole prompt for a
        completions request)."""
        if self.messages is None:
            return self.prompt or ""
        users = [t.content for t in self.messages if t.role == "user"]
        return users[-1] if users else self.text

    @property
    def input_len(self) -> float:
        """Input length in tokens (the log's count, else estimated from characters)."""
        return float(self.input_tokens) if self.input_tokens is not None else len(self.text) / CHARS_PER_TOKEN

    @property
    def output_len(self) -> float | None:
        """Logged output length in tokens (the log's count, else estimated from the answer), None: not logged."""
        if self.output_tokens is not None:
            return float(self.output_tokens)
        return None if self.response is None else len(self.response) / CHARS_PER_TOKEN


# ---------------------------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, line: int | None, field: str | None, message: str) -> SpaceError:
        return SpaceError(message, path=self.path, line=line, field=field)

    def expected(self, line: int, field: str, what: str, got: Any) -> SpaceError:
        shown = json.dumps(got)[:60] if not isinstance(got, str) else repr(got[:60])
        return self.error(line, field, f"expected {what}, got {shown}")

    def number(self, d: Mapping[str, object], key: str, line: int, low: float, high: float) -> float | None:
        v = d.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (low <= v <= high) or math.isnan(v):
            raise self.expected(line, key, f"a number from {low:g} to {high:g}", v)
        return float(v)

    def count(self, d: Mapping[str, object], key: str, line: int) -> int | None:
        v = d.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise self.expected(line, key, "a whole number of tokens, at least 1", v)
        return v

    def content(self, v: Any, line: int, field: str) -> str:
        """A turn's content: a text, or a list of parts of which the text parts are kept."""
        if isinstance(v, str):
            return v
        if isinstance(v, list):
            texts = []
            for i, part in enumerate(v):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise self.expected(line, f"{field}[{i}]", "a content part {type, text}", part)
                if part["type"] == "text":
                    if not isinstance(part.get("text"), str):
                        raise self.expected(line, f"{field}[{i}].text", "a text", part.get("text"))
                    texts.append(part["text"])
                else:
                    raise self.error(
                        line,
                        f"{field}[{i}].type",
                        f"content of type {part['type']!r} cannot be replayed (only text parts are)",
                    )
            return "".join(texts)
        raise self.expected(line, field, "a text or a list of text parts", v)

    def messages(self, v: Any, line: int) -> tuple[Turn, ...]:
        if not isinstance(v, list) or not v:
            raise self.expected(line, "messages", "a non-empty list of {role, content}", v)
        out = []
        for i, m in enumerate(v):
            if not isinstance(m, dict):
                raise self.expected(line, f"messages[{i}]", "a mapping {role, content}", m)
            role = m.get("role")
            if role not in _ROLES:
                raise self.expected(line, f"messages[{i}].role", f"one of {', '.join(sorted(_ROLES))}", role)
            out.append(Turn(role, self.content(m.get("content"), line, f"messages[{i}].content")))
        if not any(t.role == "user" for t in out):
            raise self.error(line, "messages", "expected at least one user turn")
        return tuple(out)

    def openai(self, obj: Mapping[str, object], line: int, index: int) -> LoggedRequest:
        body = obj.get("body") if isinstance(obj.get("body"), dict) else obj.get("request", obj)
        if not isinstance(body, dict):
            raise self.expected(line, "request", "a request body (a mapping)", body)
        has_messages, has_prompt = "messages" in body, "prompt" in body
        if has_messages == has_prompt:
            raise self.error(
                line,
                None,
                "expected a chat request (messages) or a completions request (prompt)"
                + (", not both" if has_messages else ", found neither"),
            )
        messages = self.messages(body["messages"], line) if has_messages else None
        prompt = None
        if has_prompt:
            if not isinstance(body["prompt"], str) or not body["prompt"]:
                raise self.expected(line, "prompt", "a non-empty text", body["prompt"])
            prompt = body["prompt"]
        max_tokens = self.count(body, "max_tokens", line)
        if max_tokens is None:
            max_tokens = self.count(body, "max_completion_tokens", line)
        kwargs = body.get("chat_template_kwargs")
        thinking = None
        if kwargs is not None:
            if not isinstance(kwargs, dict):
                raise self.expected(line, "chat_template_kwargs", "a mapping", kwargs)
            if "enable_thinking" in kwargs:
                if not isinstance(kwargs["enable_thinking"], bool):
                    raise self.expected(
                        line, "chat_template_kwargs.enable_thinking", "true or false", kwargs["enable_thinking"]
                    )
                thinking = kwargs["enable_thinking"]
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else body.get("metadata")
        category = obj.get("category", (meta or {}).get("category") if isinstance(meta, dict) else None)
        if category is not None and not isinstance(category, str):
            raise self.expected(line, "category", "a text", category)
        rid = obj.get("custom_id", obj.get("id", body.get("id", f"r{index}")))
        req = LoggedRequest(
            id=str(rid),
            line=line,
            messages=messages,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=self.number(body, "temperature", line, 0.0, 2.0),
            top_p=self.number(body, "top_p", line, 0.0, 1.0),
            category=category,
            thinking=thinking,
        )
        return self.response(req, obj.get("response"), line)

    def response(self, req: LoggedRequest, resp: Any, line: int) -> LoggedRequest:
        if resp is None:
            return req
        if isinstance(resp, dict) and isinstance(resp.get("body"), dict):
            resp = resp["body"]
        if not isinstance(resp, dict):
            raise self.expected(line, "response", "a response body (a mapping)", resp)
        choices = resp.get("choices")
        text, finish, reasoned = None, None, False
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            msg = c.get("message") if isinstance(c.get("message"), dict) else {}
            text = msg.get("content") if msg else c.get("text")
            reasoned = bool(msg.get("reasoning_content") or msg.get("reasoning")) if msg else False
            finish = c.get("finish_reason")
        if text is not None and not isinstance(text, str):
            raise self.expected(line, "response.choices[0].content", "a text", text)
        usage: Mapping[str, object] = resp["usage"] if isinstance(resp.get("usage"), dict) else {}
        out_tokens = usage.get("completion_tokens")
        in_tokens = usage.get("prompt_tokens")
        return replace(
            req,
            response=text,
            finish_reason=finish if isinstance(finish, str) else None,
            output_tokens=out_tokens if isinstance(out_tokens, int) and out_tokens >= 0 else None,
            input_tokens=in_tokens if isinstance(in_tokens, int) and in_tokens >= 0 else None,
            reasoned=reasoned or bool(text and "<think>" in text),
        )

    def sharegpt(self, obj: Mapping[str, object], line: int, index: int) -> LoggedRequest:
        conv = obj.get("conversations", obj.get("conversation"))
        if not isinstance(conv, list) or not conv:
            raise self.expected(line, "conversations", "a non-empty list of {from, value}", conv)
        turns = []
        for i, t in enumerate(conv):
            if not isinstance(t, dict):
                raise self.expected(line, f"conversations[{i}]", "a mapping {from, value}", t)
            who = t.get("from", t.get("role"))
            if who not in _SHAREGPT_ROLES:
                raise self.expected(line, f"conversations[{i}].from", "human, gpt or system", who)
            value = t.get("value", t.get("content"))
            if not isinstance(value, str):
                raise self.expected(line, f"conversations[{i}].value", "a text", value)
            turns.append(Turn(_SHAREGPT_ROLES[who], value))
        last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=None)
        if last_user is None:
            raise self.error(line, "conversations", "expected at least one human turn")
        answer = turns[last_user + 1].content if last_user + 1 < len(turns) else None
        category = obj.get("category")
        return LoggedRequest(
            id=str(obj.get("id", f"r{index}")),
            line=line,
            messages=tuple(turns[: last_user + 1]),
            prompt=None,
            category=category if isinstance(category, str) else None,
            response=answer,
            reasoned=bool(answer and "<think>" in answer),
        )

    def one(self, obj: Any, line: int, index: int) -> LoggedRequest:
        if not isinstance(obj, dict):
            raise self.expected(line, "request", "a JSON object (a request body or a conversation)", obj)
        if "conversations" in obj or "conversation" in obj:
            return self.sharegpt(obj, line, index)
        return self.openai(obj, line, index)


def read_requests(path: str | Path) -> list[LoggedRequest]:
    """Every request of the log at ``path`` (see the module for the formats), in file order."""
    p = Path(path)
    shown = str(p)
    reader = _Reader(shown)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise reader.error(None, None, "expected a request log, but the file does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise reader.error(None, None, f"cannot read the request log: {e}") from None
    stripped = text.lstrip()
    items: list[tuple[int, Any]] = []
    if stripped.startswith("["):  # a JSON array (ShareGPT's usual form)
        try:
            data = json.loads(text)
        except ValueError as e:
            raise reader.error(getattr(e, "lineno", None), None, f"invalid JSON: {e}") from None
        items = list(zip(_array_lines(text, len(data)), data, strict=True))
    else:
        for n, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                items.append((n, json.loads(raw)))
            except ValueError as e:
                raise reader.error(n, None, f"invalid JSON: {e} (expected one JSON object a line)") from None
    if not items:
        raise reader.error(None, None, "the request log has no requests")
    out = [reader.one(obj, line, i) for i, (line, obj) in enumerate(items)]
    seen: dict[str, int] = {}
    for r in out:
        if r.id in seen:
            raise reader.error(r.line, "id", f"request id {r.id!r} is used twice (first on line {seen[r.id]})")
        seen[r.id] = r.line
    return out


def _array_lines(text: str, n: int) -> list[int]:
    """The line each top-level element of a JSON array starts on (best effort: 1-based, 0 when unknown)."""
    depth, in_str, esc, line = 0, False, False, 1
    starts: list[int] = []
    for ch in text:
        if ch == "\n":
            line += 1
        if in_str:
            esc = (ch == "\\") and not esc
            if ch == '"' and not esc:
                in_str = False
            continue
        if ch == '"':
            in_str = True
            if depth == 1:
                starts.append(line)
        elif ch in "[{":
            depth += 1
            if depth == 2:
                starts.append(line)
        elif ch in "]}":
            depth -= 1
    lines = starts[:n]
    return lines + [0] * (n - len(lines))


# ---------------------------------------------------------------------------------------------- a subset


def _tertile_edges(values: Sequence[float]) -> tuple[float, float]:
    s = sorted(values)
    return s[len(s) // 3], s[(2 * len(s)) // 3]


def _bucket(x: float, edges: tuple[float, float]) -> int:
    return 0 if x < edges[0] else 1 if x < edges[1] else 2


LENGTH_BUCKETS = ("short", "medium", "long")


@dataclass(frozen=True)
class Buckets:
    """Tertile edges of input and output length over a whole log (tokens): a request's bucket names its third."""

    input_edges: tuple[float, float]
    output_edges: tuple[float, float] | None

    @classmethod
    def of(cls, requests: Sequence[LoggedRequest]) -> Buckets:
        outs = [r.output_len for r in requests if r.output_len is not None]
        out_edges = _tertile_edges(outs) if len(outs) >= max(3, len(requests) // 2) else None
        return cls(_tertile_edges([r.input_len for r in requests]), out_edges)

    def input_bucket(self, r: LoggedRequest) -> str:
        return LENGTH_BUCKETS[_bucket(r.input_len, self.input_edges)]

    def output_bucket(self, r: LoggedRequest) -> str | None:
        if self.output_edges is None or r.output_len is None:
            return None
        return LENGTH_BUCKETS[_bucket(r.output_len, self.output_edges)]


def _trigram_vector(text: str, dims: int = 256) -> list[float]:
    v = [0.0] * dims
    t = re.sub(r"\s+", " ", text.lower())[:2000]
    for i in range(len(t) - 2):
        v[zlib.crc32(t[i : i + 3].encode()) % dims] += 1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def text_clusters(requests: Sequence[LoggedRequest], k: int, seed: int = 0) -> list[int]:
    """A cluster per request by what it asks (k-means over character-trigram profiles, seeded): the strata of a log
    that names no categories."""
    import numpy as np

    if len(requests) <= k:
        return list(range(len(requests)))
    x = np.array([_trigram_vector(r.ask) for r in requests])
    rng = np.random.default_rng(seed)
    # k-means++ seeding, then Lloyd's iterations (cosine on unit vectors)
    centres = [x[rng.integers(len(x))]]
    for _ in range(1, k):
        d = np.min([1.0 - x @ c for c in centres], axis=0).clip(min=0.0)
        p = d / d.sum() if d.sum() > 0 else None
        centres.append(x[rng.choice(len(x), p=p)])
    c = np.array(centres)
    labels = np.zeros(len(x), dtype=int)
    for _ in range(25):
        new = np.argmax(x @ c.T, axis=1)
        if np.array_equal(new, labels) and _ > 0:
            break
        labels = new
        for j in range(k):
            members = x[labels == j]
            if len(members):
                m = members.mean(axis=0)
                c[j] = m / (np.linalg.norm(m) or 1.0)
    return [int(v) for v in labels]


@dataclass(frozen=True)
class Subset:
    """The requests picked to stand for a log, and how: the strata (input third, output third, category or text
    cluster) and how many of each the log and the subset hold."""

    picked: tuple[int, ...]
    strata: dict[tuple[str, str | None, str], tuple[int, int]]  # stratum -> (in the log, picked)
    by: str  # "category" or "text clusters"
    buckets: Buckets


def pick_subset(requests: Sequence[LoggedRequest], n: int, seed: int = 0, clusters: int = 4) -> Subset:
    """``n`` requests that stand for the whole log (indexes into ``requests``, in log order): stratified by
    input-length third, output-length third and category (else a text clustering), each stratum's share of ``n`` in
    proportion to its share of the log (largest remainders), a seeded draw inside each."""
    if n < 1:
        raise ValueError(f"a subset needs at least one request, got {n}")
    buckets = Buckets.of(requests)
    if any(r.category for r in requests):
        kinds, by = [r.category or "(none)" for r in requests], "category"
    else:
        kinds, by = [f"cluster {c}" for c in text_clusters(requests, clusters, seed)], "text clusters"
    members: dict[tuple[str, str | None, str], list[int]] = defaultdict(list)
    for i, r in enumerate(requests):
        members[(buckets.input_bucket(r), buckets.output_bucket(r), kinds[i])].append(i)
    n = min(n, len(requests))
    keys = sorted(members, key=lambda k: (k[0], k[1] or "", k[2]))
    quota = {k: n * len(members[k]) / len(requests) for k in keys}
    take = {k: int(quota[k]) for k in keys}
    for k in sorted(keys, key=lambda k: (-(quota[k] - take[k]), keys.index(k)))[: n - sum(take.values())]:
        take[k] += 1
    rng = random.Random(seed)
    picked: list[int] = []
    for k in keys:
        picked += rng.sample(members[k], take[k])
    return Subset(
        picked=tuple(sorted(picked)),
        strata={k: (len(members[k]), take[k]) for k in keys},
        by=by,
        buckets=buckets,
    )


def _quantiles(xs: Sequence[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    return tuple(s[min(len(s) - 1, int(q * len(s)))] for q in (0.1, 0.5, 0.9))  # type: ignore[return-value]


def representativeness(requests: Sequence[LoggedRequest], subset: Subset) -> dict[str, Any]:
    """How the subset's lengths and categories compare with the whole log's: p10/p50/p90 of input and output length,
    the two-sample Kolmogorov-Smirnov distance and p-value of each, the category shares."""
    from scipy.stats import ks_2samp

    sub = [requests[i] for i in subset.picked]
    out: dict[str, Any] = {"log": len(requests), "subset": len(sub), "by": subset.by}
    for name, get in (("input_tokens", lambda r: r.input_len), ("output_tokens", lambda r: r.output_len)):
        whole = [v for v in map(get, requests) if v is not None]
        part = [v for v in map(get, sub) if v is not None]
        if len(whole) < 2 or len(part) < 2:
            continue
        ks = ks_2samp(part, whole)
        out[name] = {
            "log_p10_p50_p90": _quantiles(whole),
            "subset_p10_p50_p90": _quantiles(part),
            "ks_distance": float(ks.statistic),
            "ks_p": float(ks.pvalue),
        }
    cats = Counter(r.category for r in requests if r.category)
    if cats:
        sub_cats = Counter(r.category for r in sub if r.category)
        out["categories"] = {
            c: {"log": cats[c] / len(requests), "subset": sub_cats.get(c, 0) / len(sub)} for c in sorted(cats)
        }
    return out


def draw_holdout(n_log: int, subset: Subset, k: int, seed: int = 1) -> list[int]:
    """Up to ``k`` requests of the log outside ``subset`` (a seeded uniform draw, indexes in log order): the sample
    of the rest the subset is checked against."""
    picked = set(subset.picked)
    rest = [i for i in range(n_log) if i not in picked]
    return sorted(random.Random(seed).sample(rest, min(k, len(rest))))


@dataclass(frozen=True)
class Measured:
    """What a ``SubsetCheck`` compares between the subset and the rest of the log."""

    key: str  # in JSON: ``subset_KEY``, ``rest_KEY``
    words: str
    digits: int  # shown with
    warning_name: str


UNREPRESENTATIVE = "subset-unrepresentative"
FLATTERS_DRAFTER = "subset-flatters-drafter"
BASELINE_TOK_PER_S = Measured("tok_per_s", "baseline tok/s", 1, UNREPRESENTATIVE)
ACCEPTED_PER_ROUND = Measured("accepted_per_round", "accepted draft tokens a round", 2, FLATTERS_DRAFTER)


@dataclass(frozen=True)
class SubsetCheck:
    """One figure (``measured``) on the subset against a sample of the rest of the log (the holdout): each side's
    interval, their ratio (subset / rest) with its interval, and ``warning`` when that interval lies beyond the gain
    the study looks for (``min_gain``), so the subset's figures may not transfer to the whole log. ``trial``: whose
    figures they are, when a config's (the acceptance check's), None for the baseline's."""

    measured: Measured
    subset: Interval
    rest: Interval
    ratio: Interval
    min_gain: float
    warning: str | None
    trial: int | None = None

    def to_dict(self) -> dict[str, object]:
        key = self.measured.key
        return {
            **({"trial": self.trial} if self.trial is not None else {}),
            f"subset_{key}": self.subset.to_dict(),
            f"rest_{key}": self.rest.to_dict(),
            "ratio": self.ratio.to_dict(),
            "min_gain": self.min_gain,
            "warning": self.warning,
            "text": self.text(),
        }

    def text(self) -> str:
        d, r = self.measured.digits, self.ratio
        whose = f"trial {self.trial}'s " if self.trial is not None else ""
        line = (
            f"{whose}{self.measured.words} on the subset {interval_text(self.subset, d)} ({self.subset.n} requests) "
            f"vs a sample of the rest {interval_text(self.rest, d)} ({self.rest.n} requests): ratio "
            f"{interval_text(r)} ({r.confidence:.0%})"
        )
        return line + (f" - WARNING {self.measured.warning_name}: {self.warning}" if self.warning else "")


def holdout_check(
    subset_tok_per_s: Sequence[float], rest_tok_per_s: Sequence[float], min_gain: float, confidence: float = 0.95
) -> SubsetCheck | None:
    """The ``SubsetCheck`` of the baseline's per-prompt tok/s on the subset and on the holdout, measured on one server
    start: each side's geometric mean with its t-interval, their ratio with a Welch interval (two independent samples
    of prompts). A warning when that interval lies wholly outside [1 / (1 + min_gain), 1 + min_gain]. None with fewer
    than 2 positive figures on either side."""
    a = [math.log(x) for x in subset_tok_per_s if x > 0]
    b = [math.log(x) for x in rest_tok_per_s if x > 0]
    if len(a) < 2 or len(b) < 2:
        return None
    ratio = two_sample_interval(a, b, confidence)
    warning = None
    bar = 1.0 + min_gain
    if ratio.low > bar or ratio.high < 1.0 / bar:
        side = "faster" if ratio.low > bar else "slower"
        warning = (
            f"the baseline is {side} on the subset than on the rest of the log by more than min_gain "
            f"({min_gain:.0%}) at {confidence:.0%} confidence; pick more requests (benchmark.requests) or check the "
            "log's mix"
        )
    subset, rest = speedup_interval(a, confidence), speedup_interval(b, confidence)
    return SubsetCheck(BASELINE_TOK_PER_S, subset, rest, ratio, min_gain, warning)


def acceptance_check(
    trial: int,
    subset_accept_lengths: Sequence[float | None],
    rest_accept_lengths: Sequence[float | None],
    min_gain: float,
    confidence: float = 0.95,
) -> SubsetCheck | None:
    """The ``SubsetCheck`` of a config's per-request acceptance lengths on the subset (its search trial) and on the
    holdout (the winner's one more start after confirmation), as accepted draft tokens per verify round (acceptance
    length - 1: the bonus token is free): each side's mean with its t-interval, their ratio with a delta-method Welch
    interval. A warning when the ratio's interval lies wholly above 1 + min_gain (the subset flatters the drafter).
    None with fewer than 2 reported on either side or nothing accepted on either."""
    a = [x - 1.0 for x in subset_accept_lengths if x is not None]
    b = [x - 1.0 for x in rest_accept_lengths if x is not None]
    if len(a) < 2 or len(b) < 2 or sum(a) <= 0 or sum(b) <= 0:
        return None
    ratio = ratio_of_means_interval(a, b, confidence)
    warning = None
    if ratio.low > 1.0 + min_gain:
        warning = (
            f"the drafter accepts fewer draft tokens a round on the rest of the log than on the subset, by more than "
            f"min_gain ({min_gain:.0%}) at {confidence:.0%} confidence: the subset flatters it and the speedup may "
            "not transfer; pick more requests (benchmark.requests) or check the log's mix"
        )
    subset, rest = mean_interval(a, confidence), mean_interval(b, confidence)
    return SubsetCheck(ACCEPTED_PER_ROUND, subset, rest, ratio, min_gain, warning, trial)


# ---------------------------------------------------------------------------------------------- guards


@dataclass(frozen=True)
class Guard:
    """A named reason the measurement may not transfer to production (shown in the plan and the report)."""

    name: str
    text: str


#: share of requests with a near-duplicate above which a log looks synthetic
NEAR_DUPLICATE_SHARE = 0.2
#: share of requests that look like random tokens above which the guard fires
RANDOM_SHARE = 0.1
#: share of requests that are one template with a short fill above which the guard fires
TEMPLATED_SHARE = 0.3
#: share of logged answers cut at max_tokens above which the lengths are forced
FORCED_SHARE = 0.5
#: share of requests whose logged answers reasoned without the request saying so
THINKING_SHARE = 0.2


def _shingles(text: str, k: int = 5) -> set[int]:
    words = re.findall(r"\w+", text.lower())
    if len(words) < k:
        return {zlib.crc32(" ".join(words).encode())}
    return {zlib.crc32(" ".join(words[i : i + k]).encode()) for i in range(len(words) - k + 1)}


def near_duplicates(texts: Sequence[str], threshold: float = 0.9, bands: int = 16, rows: int = 4) -> list[int]:
    """Indexes of texts with another text of word-5-gram Jaccard similarity at least ``threshold`` (MinHash with
    banded locality-sensitive hashing: about linear time; the candidates a band pairs are checked exactly)."""
    import numpy as np

    n_hash = bands * rows
    rng = np.random.default_rng(1)
    a = rng.integers(1, 1 << 31, n_hash, dtype=np.uint64)[:, None]
    b = rng.integers(0, 1 << 31, n_hash, dtype=np.uint64)[:, None]
    prime = np.uint64((1 << 31) - 1)
    sets = [_shingles(t) for t in texts]
    buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        x = np.fromiter(s, dtype=np.uint64, count=len(s))[None, :] % prime
        sig = ((a * x + b) % prime).min(axis=1)
        for band in range(bands):
            buckets[(band, sig[band * rows : (band + 1) * rows].tobytes())].append(i)
    dup: set[int] = set()
    checked: set[tuple[int, int]] = set()
    for group in buckets.values():
        for x_ in range(len(group)):
            for y_ in range(x_ + 1, len(group)):
                i, j = group[x_], group[y_]
                if (i, j) in checked:
                    continue
                checked.add((i, j))
                if len(sets[i] & sets[j]) / max(1, len(sets[i] | sets[j])) >= threshold:
                    dup.update((i, j))
    return sorted(dup)


_WORD = re.compile(r"[^\W\d_]+")
_VOWELS = frozenset("aeiouyAEIOUY")
#: a Latin word's shapes in prose and code: lower, Capitalised, UPPER, camelCase, PascalCase, HTTPServer
_LATIN_SHAPE = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]*)*|[A-Z]+(?:[a-z]+)?(?:[A-Z][a-z]*)*s?")


def _script(c: str) -> str:
    return "LATIN" if c.isascii() else unicodedata.name(c, "?").split(" ")[0]


def random_token_score(text: str) -> float:
    """The share of a text's letters (by characters) in words no language or code writes: a word in another
    script than the text's own or mixing scripts, a Latin word of 3+ letters without a vowel, or with a case shape
    no prose or identifier has (``ICAgICAg``). Decoded random token ids score high; prose and code near 0. A text
    of fewer than 8 words scores 0 (too short to tell)."""
    words = _WORD.findall(text)
    if len(words) < 8:
        return 0.0
    scripts = Counter(_script(c) for w in words for c in w)
    main = scripts.most_common(1)[0][0]
    odd = total = 0
    for w in words:
        total += len(w)
        if {_script(c) for c in w} != {main}:
            odd += len(w)
        elif main == "LATIN" and ((len(w) >= 3 and not (set(w) & _VOWELS)) or not _LATIN_SHAPE.fullmatch(w)):
            odd += len(w)
    return odd / total


def _templated(asks: Sequence[str]) -> list[int]:
    """Indexes of requests that share a long prefix and suffix with a neighbour and differ only in a short middle
    (one template, filled in): 70% or more of the text is the shared frame."""

    def lcp(a: str, b: str) -> int:
        n = min(len(a), len(b))
        i = 0
        while i < n and a[i] == b[i]:
            i += 1
        return i

    order = sorted(range(len(asks)), key=lambda i: asks[i])
    prefix = [0] * len(asks)
    for x, y in zip(order, order[1:], strict=False):
        c = lcp(asks[x], asks[y])
        prefix[x], prefix[y] = max(prefix[x], c), max(prefix[y], c)
    rev = [a[::-1] for a in asks]
    order = sorted(range(len(asks)), key=lambda i: rev[i])
    suffix = [0] * len(asks)
    for x, y in zip(order, order[1:], strict=False):
        c = lcp(rev[x], rev[y])
        suffix[x], suffix[y] = max(suffix[x], c), max(suffix[y], c)
    return [i for i, a in enumerate(asks) if len(a) >= 40 and (prefix[i] + suffix[i]) >= 0.7 * len(a)]


def guards(requests: Sequence[LoggedRequest], *, api: str = "chat") -> list[Guard]:
    """Every validity guard that fires on ``requests`` measured through ``api`` (see each constant)."""
    n = len(requests)
    out: list[Guard] = []
    asks = [r.ask for r in requests]
    dups = near_duplicates(asks)
    if n and len(dups) / n > NEAR_DUPLICATE_SHARE:
        out.append(
            Guard(
                "near-duplicates",
                f"{len(dups)} of {n} requests ({len(dups) / n:.0%}) have a near-duplicate "
                "(word 5-grams, Jaccard >= 0.9): "
                "a synthetic or replayed log measures the cache and the drafter on repeats, not your traffic",
            )
        )
    odd = [i for i, a in enumerate(asks) if random_token_score(a) > 0.3]
    if n and len(odd) / n > RANDOM_SHARE:
        out.append(
            Guard(
                "random-tokens",
                f"{len(odd)} of {n} requests ({len(odd) / n:.0%}) read as random tokens "
                f"(e.g. line {requests[odd[0]].line}): "
                "a drafter accepts almost nothing on them, so the speedup measured says nothing of real prompts",
            )
        )
    distinct = sorted(set(asks))  # a repeated request is a duplicate, not a template
    framed = {distinct[i] for i in _templated(distinct)}
    tpl = [i for i, a in enumerate(asks) if a in framed]
    if n and len(tpl) / n > TEMPLATED_SHARE:
        out.append(
            Guard(
                "templated",
                f"{len(tpl)} of {n} requests ({len(tpl) / n:.0%}) are one template with a short fill (e.g. line "
                f"{requests[tpl[0]].line}): acceptance on them is far above what varied traffic gets",
            )
        )
    logged = [r for r in requests if r.finish_reason is not None or (r.output_tokens is not None and r.max_tokens)]
    cut = [
        r for r in logged if r.finish_reason == "length" or (r.max_tokens and (r.output_tokens or 0) >= r.max_tokens)
    ]
    if logged and len(cut) / len(logged) > FORCED_SHARE:
        out.append(
            Guard(
                "forced-length",
                f"{len(cut)} of {len(logged)} logged answers ({len(cut) / len(logged):.0%}) stopped at max_tokens: the "
                "output lengths are forced by the limit, not chosen by the model; raise max_tokens or say why not",
            )
        )
    chats = sum(r.is_chat for r in requests)
    if api != "chat" and chats:
        out.append(
            Guard(
                "no-chat-template",
                f"{chats} of {n} logged requests are chat requests, measured with api: {api} (no chat template): a "
                "chat-tuned drafter accepts less without its template; set benchmark.api: chat",
            )
        )
    unasked = [r for r in requests if r.reasoned and r.thinking is None]
    off = [r for r in requests if r.reasoned and r.thinking is False]
    if n and (len(unasked) + len(off)) / n > THINKING_SHARE:
        out.append(
            Guard(
                "thinking-mode",
                f"{len(unasked) + len(off)} of {n} logged answers reasoned (<think> or reasoning_content) while their "
                "requests "
                + ("did not say enable_thinking" if unasked else "said enable_thinking: false")
                + ": the server's default thinking mode decides what is measured, and it may not be production's",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------- results by length


LENGTH_SIDES = {"input": "prompt_tokens", "output": "completion_tokens"}


@dataclass(frozen=True)
class LengthThird:
    """A config's speedup over its baseline on one length third of the prompts (``by_length``): the prompts' range
    of ``side`` tokens (input: the prompt's, output: the baseline's answer's), each side's aggregate tok/s and their
    ratio."""

    bucket: str
    prompts: int
    side: str
    tokens: tuple[int, int]
    baseline_tok_per_s: float
    tok_per_s: float
    speedup: float | None

    def to_dict(self) -> dict[str, object]:
        return {
            "bucket": self.bucket,
            "prompts": self.prompts,
            f"{self.side}_tokens": list(self.tokens),
            "baseline_tok_per_s": self.baseline_tok_per_s,
            "tok_per_s": self.tok_per_s,
            "speedup": self.speedup,
        }


def by_length(config: Sequence[Any], baseline: Sequence[Any], side: str = "input") -> list[LengthThird]:
    """A config's speedup over its baseline by length third of the prompts, by ``side`` ``input`` (the prompt's
    tokens) or ``output`` (the baseline's answer's). ``config``, ``baseline``: ``PromptResult``s of the same
    prompts; [] when under 3 prompts pair up or the server reported no lengths."""
    field = LENGTH_SIDES[side]
    mine = {r.index: r for r in config}
    pairs = [(b, mine[b.index]) for b in baseline if b.index in mine and getattr(b, field) and b.seconds > 0]
    if len(pairs) < 3:
        return []
    edges = _tertile_edges([float(getattr(b, field)) for b, _ in pairs])
    out = []
    for k, name in enumerate(LENGTH_BUCKETS):
        part = [(b, c) for b, c in pairs if _bucket(float(getattr(b, field)), edges) == k]
        if not part:
            continue
        base = sum(b.completion_tokens for b, _ in part) / sum(b.seconds for b, _ in part)
        spec_s = sum(c.seconds for _, c in part)
        spec = sum(c.completion_tokens for _, c in part) / spec_s if spec_s > 0 else 0.0
        lengths = [getattr(b, field) for b, _ in part]
        speedup = spec / base if base > 0 else None
        out.append(LengthThird(name, len(part), side, (min(lengths), max(lengths)), base, spec, speedup))
    return out


def length_text(rows: Sequence[LengthThird], side: str = "input") -> str | None:
    """One line of the per-length speedups, with a warning where a third loses to the baseline: for inputs the
    longest (a drafter that collapses at long context), for outputs any third (the answers of that length are
    served slower than without speculation)."""
    if not rows:
        return None
    parts = [
        f"{r.bucket} {side}s ({r.tokens[0]}-{r.tokens[1]} tokens, {r.prompts} prompts) {r.speedup:.2f}x"
        for r in rows
        if r.speedup is not None
    ]
    text = f"by {side} length (search measurement): " + "; ".join(parts)
    if side == "input":
        last = rows[-1]
        if last.bucket == "long" and last.speedup is not None and last.speedup < 1:
            text += f" - WARNING: the longest inputs lose to the baseline ({last.speedup:.2f}x)"
        return text
    losing = [r for r in rows if r.speedup is not None and r.speedup < 1]
    if losing:
        named = ", ".join(f"{r.bucket} ({r.speedup:.2f}x)" for r in losing)
        text += f" - WARNING: answers of these lengths lose to the baseline: {named}"
    return text


# ---------------------------------------------------------------------------------------------- acceptance far below

#: a drafter's accepted draft tokens per round (acceptance length - 1) below this share of what it reached elsewhere
#: (its best input-length third in the study, or its reference) fire the ``acceptance-far-below`` guard
FAR_BELOW = 0.5
ACCEPTANCE_FAR_BELOW = "acceptance-far-below"


def acceptance_guards(
    trials: Sequence[tuple[str, int, Sequence[Any]]], references: dict[str, float] | None = None
) -> list[Guard]:
    """``acceptance-far-below`` for each drafter whose acceptance in the study is far below what it reached
    elsewhere, as accepted draft tokens per round: the worst input-length third (of 2+ prompts) against the best
    (a drafter that collapses at long context), or the mean against ``references`` (its
    ``drafters[].reference_acceptance``: a wrong chat template or thinking mode, a drafter trained for another
    target). ``trials``: per drafter, (name, trial number, ``PromptResult``s) of the trial that judges it."""
    out = []
    refs = references or {}
    for name, number, results in trials:
        rows = [r for r in results if r.accept_length is not None]
        if not rows:
            continue
        mean = sum(r.accept_length for r in rows) / len(rows)
        with_len = [r for r in rows if r.prompt_tokens]
        if len(with_len) >= 6:
            edges = _tertile_edges([float(r.prompt_tokens) for r in with_len])
            thirds = [[r for r in with_len if _bucket(float(r.prompt_tokens), edges) == k] for k in range(3)]
            means = {
                LENGTH_BUCKETS[k]: sum(r.accept_length for r in part) / len(part)
                for k, part in enumerate(thirds)
                if len(part) >= 2
            }
            if len(means) >= 2:
                best, worst = max(means, key=lambda k: means[k]), min(means, key=lambda k: means[k])
                if means[best] > 1 and means[worst] - 1 < FAR_BELOW * (means[best] - 1):
                    out.append(
                        Guard(
                            ACCEPTANCE_FAR_BELOW,
                            f"{name} (trial {number}): acceptance length {means[worst]:.2f} on the {worst} inputs "
                            f"against {means[best]:.2f} on the {best} ones ({means[worst] - 1:.2f} accepted draft "
                            f"tokens a round against {means[best] - 1:.2f}, under {FAR_BELOW:.0%}): the drafter fails "
                            "on part of the traffic; its speedup there is not the study's",
                        )
                    )
        ref = refs.get(name)
        if ref is not None and mean - 1 < FAR_BELOW * (ref - 1):
            out.append(
                Guard(
                    ACCEPTANCE_FAR_BELOW,
                    f"{name} (trial {number}): acceptance length {mean:.2f} against the {ref:.2f} it reaches elsewhere "
                    f"(drafters[].reference_acceptance; {mean - 1:.2f} accepted draft tokens a round against "
                    f"{ref - 1:.2f}, under {FAR_BELOW:.0%}): check the chat template, the thinking mode and that the "
                    "drafter was trained for this target",
                )
            )
    return out

"""The space file's ``benchmark`` and ``objective`` sections: the prompts (inline or from a file beside the space:
YAML/JSON list, JSON lines, or one prompt per line), the request settings, the load levels, and the objective's
weights per level and latency limits. ``SpaceReader`` (``autotune.space.validate``) reads the whole file with it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from autotune.errors import SpaceError
from autotune.space.checker import Checker, Validator
from autotune.space.describe import join
from autotune.space.loader import LineSeq, item_line, key_line, parse_yaml, read_text
from autotune.space.model import BenchmarkSpec, ObjectiveSpec, Prompt, SloSpec, TrafficInfo

#: requests picked from a request log when the space does not say (``benchmark.requests``)
DEFAULT_REQUESTS = 32

__all__ = ["BenchmarkSection", "_json_lines"]


class BenchmarkSection(Checker):
    """Validators of the ``benchmark`` section (``benchmark``, its prompts and load levels) and of ``objective``."""

    def benchmark(self, v: Any, f: str, line: int | None) -> BenchmarkSpec:
        schema: dict[str, Validator] = {
            "prompts": self.prompts,
            "prompts_file": self.optional(self.str_),
            "requests_file": self.optional(self.str_),
            "requests": lambda x, p, ln: self.int_(x, p, ln, 1),
            "holdout": lambda x, p, ln: self.int_(x, p, ln, 0),
            "max_tokens": lambda x, p, ln: self.int_(x, p, ln, 1),
            "temperature": lambda x, p, ln: self.num(x, p, ln, 0),
            "warmup_requests": lambda x, p, ln: self.int_(x, p, ln, 0),
            "warmup_passes": self.warmup_passes,
            "api": lambda x, p, ln: self.enum(x, p, ln, ("completions", "chat")),
            "retries": lambda x, p, ln: self.int_(x, p, ln, 0),
            "concurrency": self.concurrency,
        }
        d = self.fields(v, f, line, schema, complete=True)
        file_ = d.pop("prompts_file", None)
        file_field, file_line = join(f, "prompts_file"), key_line(v, "prompts_file", line)
        log = d.pop("requests_file", None)
        n_requests = d.pop("requests", None)
        n_holdout = d.pop("holdout", None)
        given = [k for k, x in (("prompts", d.get("prompts")), ("prompts_file", file_), ("requests_file", log)) if x]
        if len(given) > 1:
            raise self.error(
                file_field if file_ else join(f, "requests_file"),
                file_line or line,
                f"give one of prompts, prompts_file or requests_file, not {' and '.join(given)}",
            )
        for key, given_n, what in (
            ("requests", n_requests, "how many to pick"),
            ("holdout", n_holdout, "how many to check the subset against"),
        ):
            if given_n is not None and log is None:
                raise self.error(
                    join(f, key),
                    key_line(v, key, line),
                    f"{key} ({what}) needs requests_file (the log to pick them from)",
                )
        if file_ is not None:
            d["prompts"], d["prompts_file"] = self.prompts_file(file_, file_field, file_line)
        if log is not None:
            explicit_api = isinstance(v, dict) and "api" in v
            n = n_requests or DEFAULT_REQUESTS
            d["prompts"], d["prompts_file"], d["traffic"], d["holdout"], chat = self.requests_file(
                log,
                n,
                n if n_holdout is None else n_holdout,
                d.get("api", "completions") if explicit_api else None,
                join(f, "requests_file"),
                key_line(v, "requests_file", line),
            )
            if not explicit_api and chat:
                d["api"] = "chat"  # a log of chat requests is replayed through the chat template
        if "prompts" not in d:
            raise self.error(
                join(f, "prompts"),
                line,
                "no prompts; expected prompts (a list), prompts_file (a file next to the space) "
                "or requests_file (a request log to pick them from)",
            )
        return BenchmarkSpec(**d)

    def requests_file(
        self, v: str, n: int, holdout: int, api: str | None, f: str, line: int | None
    ) -> tuple[tuple[Prompt, ...], str, TrafficInfo, tuple[Prompt, ...], bool]:
        """The prompts picked from the request log ``v`` (``autotune.traffic``: its formats, the subset, the guards),
        the log's path, what the plan and report say of it, the ``holdout`` requests drawn from the rest of the log
        (as many as it has, at most), and whether its requests are chat requests."""
        from autotune.traffic import LoggedRequest, draw_holdout, guards, pick_subset, read_requests, representativeness

        target = (self.base_dir / os.path.expanduser(v)).resolve()
        if not target.is_file():
            raise self.error(
                f,
                line,
                f"expected a request log, but {target} {'is not a file' if target.exists() else 'does not exist'} "
                "(relative paths are read from the space file's folder)",
            )
        log = read_requests(target)  # a bad log: SpaceError naming its own file, line and field
        subset = pick_subset(log, n, seed=0)
        chat = sum(r.is_chat for r in log) * 2 > len(log)

        def prompt(r: LoggedRequest) -> Prompt:
            return Prompt(
                id=r.id,
                text=r.text if r.messages is None else r.ask,
                category=r.category,
                max_tokens=r.max_tokens,
                temperature=r.temperature,
                top_p=r.top_p,
                messages=None if r.messages is None else tuple((t.role, t.content) for t in r.messages),
                thinking=r.thinking,
            )

        prompts = tuple(prompt(log[i]) for i in subset.picked)
        held = tuple(prompt(log[i]) for i in draw_holdout(len(log), subset, holdout, seed=1))
        fired = guards(log, api=api or ("chat" if chat else "completions"))
        info = TrafficInfo(
            path=str(target),
            log_requests=len(log),
            picked=len(prompts),
            by=subset.by,
            representativeness=representativeness(log, subset),
            guards=tuple((g.name, g.text) for g in fired),
            holdout=len(held),
        )
        return prompts, str(target), info, held, chat

    def warmup_passes(self, v: Any, f: str, line: int | None) -> int:
        """A whole number of untimed passes of the prompts (``autotune.warmup``)."""
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 20:
            raise self.expected(f, line, "a number of passes (a whole number 0-20)", v)
        return v

    def concurrency(self, v: Any, f: str, line: int | None) -> tuple[int, ...]:
        """Load levels: distinct whole numbers >= 1, in increasing order (measured lowest first)."""
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "a non-empty list of load levels (streams at once), e.g. [1, 8, 32, 64]", v)
        levels = [self.int_(x, f"{f}[{i}]", item_line(v, i, line), 1, 4096) for i, x in enumerate(v)]
        if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
            raise self.expected(f, line, "distinct levels in increasing order, e.g. [1, 8, 32, 64]", v)
        if levels[0] != 1:
            raise self.expected(
                f,
                line,
                "a list starting with 1 (one stream at a time is always measured first: the drafter alarm and the "
                "lossless check need single-stream answers; give it weight 0 in objective.weights if it does not "
                "matter to you)",
                v,
            )
        return tuple(levels)

    def objective(
        self,
        v: Any,
        f: str,
        line: int | None,
        levels: tuple[int, ...] | None,
        prompts: tuple[Prompt, ...] | None = None,
    ) -> ObjectiveSpec:
        schema: dict[str, Validator] = {"weights": self.optional(self.weights), "slo": self.slo}
        d = self.fields(v, f, line, schema)
        weights = d.get("weights")
        wf, wl = join(f, "weights"), key_line(v, "weights", line)
        if weights is not None and all(isinstance(k, str) for k in weights):
            self.category_weights(weights, wf, v.get("weights"), wl, levels, prompts)
        elif weights is not None and levels is not None:
            missing = [c for c in weights if c not in levels]
            if missing:
                raise self.error(
                    wf, wl, f"level {missing[0]} is not in benchmark.concurrency {list(levels)}; weigh those levels"
                )
            if sum(weights.get(c, 0.0) for c in levels) <= 0:
                raise self.error(wf, wl, "expected at least one positive weight")
        return ObjectiveSpec(**d)

    def category_weights(
        self,
        weights: dict[str, float],
        f: str,
        raw: Any,
        line: int | None,
        levels: tuple[int, ...] | None,
        prompts: tuple[Prompt, ...] | None,
    ) -> None:
        """Weights over prompt categories: every key a category of the prompts, every prompt with a category, one
        stream only (weights are per load level or per category, not both), at least one positive weight."""
        if levels is not None and levels != (1,):
            raise self.error(
                f,
                line,
                f"weights over prompt categories need benchmark.concurrency [1] (it is {list(levels)}); weigh "
                "either load levels or prompt categories",
            )
        if prompts is None:
            return
        names = sorted({p.category for p in prompts if p.category})
        for key in weights:
            if key not in names:
                have = ", ".join(names) if names else "none: no prompt has a category"
                raise self.error(
                    join(f, key),
                    key_line(raw, key, line),
                    f"'{key}' is not a category of the prompts (their categories: {have})",
                )
        bare = [p.id for p in prompts if not p.category]
        if bare:
            raise self.error(
                f,
                line,
                f"prompt '{bare[0]}' has no category ({len(bare)} without one); with weights over categories every "
                "prompt needs one (give it a category with weight 0 to measure it without counting it)",
            )
        if sum(weights.values()) <= 0:
            raise self.error(f, line, "expected at least one positive weight")

    def weights(self, v: Any, f: str, line: int | None) -> dict[Any, float]:
        what = "a mapping of load level to weight, e.g. {1: 0.2, 32: 0.8}, or of prompt category to weight"
        if not isinstance(v, dict) or not v:
            raise self.expected(f, line, what + ", e.g. {code: 0.7, chat: 0.3}", v)
        by_category = any(isinstance(k, str) for k in v)
        out: dict[Any, float] = {}
        for key, w in v.items():
            kl = key_line(v, key, line)
            if by_category and not isinstance(key, str):
                raise self.expected(
                    f, kl, "either load levels or prompt categories as keys, not both (here both are given)", key
                )
            if not by_category and (isinstance(key, bool) or not isinstance(key, int) or key < 1):
                raise self.expected(f, kl, "load levels (whole numbers >= 1) or prompt categories as keys", key)
            out[key] = self.num(w, join(f, str(key)), kl, 0)
        return out

    def slo(self, v: Any, f: str, line: int | None) -> SloSpec:
        schema: dict[str, Validator] = {
            "itl_p99_ms": self.optional(self.pos),
            "ttft_p99_ms": self.optional(self.pos),
        }
        return SloSpec(**self.fields(v, f, line, schema))

    def prompts(self, v: Any, f: str, line: int | None) -> tuple[Prompt, ...]:
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "a non-empty list of prompts (strings or {id, text, category})", v)
        out: list[Prompt] = []
        first: dict[str, int | None] = {}
        for i, item in enumerate(v):
            p, il = f"{f}[{i}]", item_line(v, i, line)
            prompt, idl = self.prompt(item, i, p, il)
            if prompt.id in first:
                raise self.error(
                    f"{p}.id", idl, f"duplicate prompt id '{prompt.id}' (first at line {first[prompt.id]})"
                )
            first[prompt.id] = idl
            out.append(prompt)
        return tuple(out)

    def prompt(self, v: Any, i: int, f: str, line: int | None) -> tuple[Prompt, int | None]:
        """Prompt ``i`` (a text or a mapping ``{id, text, category}``) and the line of its id."""
        if isinstance(v, str):
            return Prompt(id=f"p{i}", text=self.str_(v, f, line, "a non-empty prompt text")), line
        if not isinstance(v, dict):
            raise self.expected(f, line, "a prompt text or a mapping {id, text, category}", v)
        schema: dict[str, Validator] = {
            "id": self.name,
            "text": lambda x, q, ln: self.str_(x, q, ln, "a non-empty prompt text"),
            "category": self.optional(self.name),
        }
        d = self.fields(v, f, line, schema, required={"text": "the prompt text"}, complete=True)
        d.setdefault("id", f"p{i}")
        return Prompt(**d), key_line(v, "id", line)

    def prompts_file(self, v: str, f: str, line: int | None) -> tuple[tuple[Prompt, ...], str]:
        """The prompts of the file ``v`` names (YAML/JSON list, JSON lines, or one prompt per line) and its path."""
        target = (self.base_dir / os.path.expanduser(v)).resolve()
        if not target.is_file():
            raise self.error(
                f,
                line,
                f"expected a prompts file, but {target} "
                f"{'is not a file' if target.exists() else 'does not exist'} "
                f"(relative paths are read from the space file's folder)",
            )
        sub = type(self)(str(target), target.parent)  # the same reader, for the file's own lines
        text = read_text(target, str(target))
        suffix = target.suffix.lower()
        if suffix in (".yaml", ".yml", ".json"):
            data = parse_yaml(text, str(target))
            if isinstance(data, dict) and set(data) == {"prompts"}:
                data = data["prompts"]
            prompts = sub.attempt(lambda: sub.prompts(data, "", getattr(data, "line", None)))
        elif suffix == ".jsonl":
            items = _json_lines(text, str(target))
            if not items:
                raise self.error(f, line, f"the prompts file {target} has no prompts")
            prompts = sub.attempt(lambda: sub.prompts(items, "", 1))
        else:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if not lines:
                raise self.error(f, line, f"the prompts file {target} has no prompts (one prompt per line)")
            prompts = tuple(Prompt(id=f"p{i}", text=t) for i, t in enumerate(lines))
        errors = sub.recorded_errors()
        if errors:
            raise errors[0]
        return prompts, str(target)


def _json_lines(text: str, shown: str) -> LineSeq:
    """The JSON value of each non-blank line, with its line number."""
    items = LineSeq()
    items.item_lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            items.append(json.loads(raw))
        except ValueError as e:
            raise SpaceError(f"invalid JSON: {e}", path=shown, line=n) from None
        items.item_lines.append(n)
    return items

"""The space file's schema: a parsed file in, a ``Space`` or every error in file order out.

``SpaceReader`` reads the top level, the server, the drafters and the study's settings; its bases read the sections:
``SearchSection`` the ``search`` section (the knobs a backend searches, their domains and its method catalogue come
from ``autotune.servers``), ``BenchmarkSection`` the ``benchmark`` and ``objective`` sections.
``docs/space-reference.md`` documents every key.
"""

from __future__ import annotations

import json
import os
import re
from functools import partial
from pathlib import Path
from typing import Any

from autotune.errors import SpaceError
from autotune.servers import (
    KnobDomain,
    backend_names,
    drafter_algorithms,
    knob_domains,
    method_catalogue,
    server_class,
    version_lacks,
)
from autotune.space.checker import Checker, Recorded, Validator, fmt_num, is_int, is_num, is_plain_number, join, suggest
from autotune.space.loader import LineSeq, describe, item_line, key_line, parse_yaml, read_text
from autotune.space.model import (
    BenchmarkSpec,
    BudgetSpec,
    Choices,
    DrafterSpec,
    FloatRange,
    IntRange,
    MethodSpec,
    ObjectiveSpec,
    ParamSpec,
    Prompt,
    PruningSpec,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    SloSpec,
    Space,
    TrafficInfo,
    VerdictSpec,
)

#: a knob no backend declares (only reachable while the server section is invalid): any plain value
_ANY = KnobDomain()


class SearchSection(Checker):
    """Validators of the ``search`` section (``search``) and of a knob's values (``param``)."""

    #: search keys that a space with search.methods takes too (the rest are given per method)
    COMMON_KEYS = ("cuda_graph",)
    #: search keys that were removed, and what to do instead (an error naming them, not "unknown knob")
    REMOVED_KEYS = {
        "share_starts": "removed (shared server starts are gone: every trial gets its own start); delete the key",
    }

    def search(
        self,
        v: Any,
        f: str,
        line: int | None,
        backend: str | None,
        drafter_names: tuple[str, ...] | None,
        version: str | None = None,
    ) -> SearchSpec:
        if v is None:
            return SearchSpec(drafters=drafter_names or ())
        domains = knob_domains(backend)  # without a valid server section: every backend's knobs
        valid = ("drafters", "methods", *self.COMMON_KEYS, *(domains if backend else ()))
        m = self.mapping(v, f, line, valid)
        drafters: tuple[str, ...] = drafter_names or ()
        cuda_graph: tuple[bool, ...] = (True,)
        knobs: dict[str, ParamSpec] = {}
        methods: dict[str, MethodSpec] = {}
        if "methods" in m:
            for key in m:
                if key != "methods" and key not in self.COMMON_KEYS and key not in self.REMOVED_KEYS:
                    raise self.error(
                        join(f, key),
                        key_line(m, key, line),
                        f"{key} is given per method with search.methods (search.methods.NAME.{key})",
                    )
        for key, value in m.items():
            kl, p = key_line(m, key, line), join(f, key)
            if key == "methods":
                methods = self.attempt(partial(self.methods, value, p, kl, backend, drafter_names, version), methods)
            elif key == "drafters":
                drafters = self.attempt(partial(self.search_drafters, value, p, kl, drafter_names), drafters)
            elif key == "cuda_graph":
                cuda_graph = self.attempt(partial(self.bool_choices, value, p, kl), cuda_graph)
            elif key in self.REMOVED_KEYS:
                self.errors.append(self.error(p, kl, self.REMOVED_KEYS[key]))
            else:
                spec = self.attempt(partial(self.knob, key, value, p, kl, backend, domains))
                if spec is not None:
                    knobs[key] = spec
        if methods:
            return SearchSpec(drafters=(), cuda_graph=cuda_graph, methods=methods)
        return SearchSpec(drafters=drafters, cuda_graph=cuda_graph, knobs=knobs)

    def methods(
        self,
        v: Any,
        f: str,
        line: int | None,
        backend: str | None,
        drafter_names: tuple[str, ...] | None,
        version: str | None,
    ) -> dict[str, MethodSpec]:
        """``search.methods``: a mapping of method names of the backend's catalogue to ``{drafters, KNOB: ...}``."""
        catalogue = method_catalogue(backend)
        if backend and not catalogue:
            raise self.error(f, line, f"backend {backend} has no method catalogue; search its drafters' knobs instead")
        if not isinstance(v, dict) or not v:
            raise self.expected(
                f, line, "a mapping of method names (" + ", ".join(catalogue) + ") to their drafters and knobs", v
            )
        out: dict[str, MethodSpec] = {}
        for name, body in v.items():
            p, nl = join(f, str(name)), key_line(v, name, line)
            if name not in catalogue:
                raise self.error(
                    p,
                    nl,
                    f"unknown method {describe(name)} for backend {backend}{suggest(name, tuple(catalogue))}; "
                    f"expected one of {', '.join(catalogue)}",
                )
            spec = self.attempt(partial(self.method, name, body, p, nl, catalogue[name], drafter_names, version))
            if spec is not None:
                out[name] = spec
        return out

    def method(
        self,
        name: str,
        v: Any,
        f: str,
        line: int | None,
        method: Any,
        drafter_names: tuple[str, ...] | None,
        version: str | None,
    ) -> MethodSpec:
        """One method: its drafters (only where it needs one) and its own knobs; a method or knob the space's
        ``server.version`` predates is refused, naming the version that added it."""
        if version_lacks(version, method.since):
            raise self.error(
                f,
                line,
                f"method {name} ({method.label}) needs server version {method.since} or newer; server.version is "
                f"{version}{method.since_note}",
            )
        body = {} if v is None else v
        valid = ("drafters", *method.knobs) if method.needs_drafter else tuple(method.knobs)
        m = self.mapping(body, f, line, valid)
        drafters: tuple[str, ...] = ()
        knobs: dict[str, ParamSpec] = {}
        for key, value in m.items():
            kl, p = key_line(m, key, line), join(f, key)
            if key == "drafters":
                if not method.needs_drafter:
                    raise self.error(p, kl, f"method {name} ({method.label}) runs no drafter; remove drafters")
                drafters = self.search_drafters(value, p, kl, drafter_names)
                continue
            if key not in method.knobs:
                raise self.unknown(key, p, kl, valid, "knob", f" for method {name}")
            if version_lacks(version, method.knob_since.get(key)):
                raise self.error(
                    p, kl, f"{key} needs server version {method.knob_since[key]} or newer; server.version is {version}"
                )
            knobs[key] = self.param(value, p, kl, method.knobs[key])
        if method.needs_drafter and not drafters:
            raise self.error(
                join(f, "drafters"),
                line,
                f"method {name} ({method.label}) needs {method.drafter_kind}: list its names from drafters",
            )
        return MethodSpec(name=name, drafters=drafters, knobs=knobs)

    def knob(
        self, key: Any, v: Any, f: str, line: int | None, backend: str | None, domains: dict[str, KnobDomain]
    ) -> ParamSpec:
        """Knob ``key`` of the search section (one of the backend's)."""
        if backend and key not in domains:
            raise self.unknown(key, f, line, ("drafters", "cuda_graph", *domains), "knob", f" for backend {backend}")
        if not isinstance(key, str):
            raise self.expected(f, line, "a knob name", key)
        return self.param(v, f, line, domains.get(key, _ANY))

    def search_drafters(self, v: Any, f: str, line: int | None, names: tuple[str, ...] | None) -> tuple[str, ...]:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not items:
            raise self.expected(f, line, "a non-empty list of drafter names", v)
        out: list[str] = []
        for i, item in enumerate(items):
            p, il = f"{f}[{i}]", item_line(items, i, line)
            if names is not None and item not in names:
                raise self.expected(
                    p, il, "one of the drafters' names (" + ", ".join(names) + ")", item, suggest(item, names)
                )
            if not isinstance(item, str):
                raise self.expected(p, il, "a drafter name", item)
            if item in out:
                raise self.error(p, il, f"drafter '{item}' is listed twice")
            out.append(item)
        return tuple(out)

    def bool_choices(self, v: Any, f: str, line: int | None) -> tuple[bool, ...]:
        if isinstance(v, bool):
            return (v,)
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "true, false or a non-empty list of them", v)
        out: list[bool] = []
        for i, item in enumerate(v):
            il = item_line(v, i, line)
            self.bool_(item, f"{f}[{i}]", il)
            if item in out:
                raise self.error(f"{f}[{i}]", il, f"{describe(item)} is listed twice")
            out.append(item)
        return tuple(out)

    def param(self, v: Any, f: str, line: int | None, domain: KnobDomain) -> ParamSpec:
        """A knob's values: a range ``{low, high, step, log}``, a list of choices, or one value."""
        if isinstance(v, dict):
            return self.range_(v, f, line, domain)
        if isinstance(v, list):
            if not v:
                raise self.expected(f, line, "a non-empty list of choices or a range {low, high}", v)
            out: list[Any] = []
            for i, item in enumerate(v):
                il = item_line(v, i, line)
                value = self.knob_value(item, f"{f}[{i}]", il, domain)
                if value in out and type(value) is type(out[out.index(value)]):
                    raise self.error(f"{f}[{i}]", il, f"{describe(item)} is listed twice")
                out.append(value)
            return Choices(tuple(out))
        return Choices((self.knob_value(v, f, line, domain),))

    def knob_value(self, v: Any, f: str, line: int | None, domain: KnobDomain) -> Any:
        kind, lo, hi = domain.kind, domain.low, domain.high
        if kind == "int":
            return self.int_(v, f, line, None if lo is None else int(lo), None if hi is None else int(hi))
        if kind == "float":
            return self.num(v, f, line, lo, hi)
        if kind == "str":
            return self.str_(v, f, line)
        if isinstance(v, str | bool) or is_num(v):
            return v
        raise self.expected(f, line, "a plain value (string, number or boolean)", v)

    def range_(self, v: dict[Any, Any], f: str, line: int | None, domain: KnobDomain) -> ParamSpec:
        if domain.kind == "str":
            raise self.expected(f, line, "a list of choices (ranges are only for numeric knobs)", v)
        integer = domain.kind == "int" or (domain.kind == "any" and is_int(v.get("low")) and is_int(v.get("high")))
        required = {"low": "the lowest value", "high": "the highest value"}
        d = self.fields(v, f, line, self.range_schema(integer, domain), required=required, complete=True)
        low, high, log = d["low"], d["high"], d.get("log", False)
        if high < low:
            raise self.expected(
                join(f, "high"),
                key_line(v, "high", line),
                f"{'an integer' if integer else 'a number'} >= low ({fmt_num(low)})",
                v["high"],
            )
        if log and low <= 0:
            raise self.expected(
                join(f, "low"), key_line(v, "low", line), "a value > 0 for a log-scaled range", v["low"]
            )
        if not integer:
            return FloatRange(float(low), float(high), log=log)
        step = d.get("step", 1)
        if log and step != 1:
            raise self.error(
                join(f, "step"),
                key_line(v, "step", line),
                "expected no step (or 1) for a log-scaled range, got " + describe(step),
            )
        return IntRange(int(low), int(high), step=step, log=log)

    def range_schema(self, integer: bool, domain: KnobDomain) -> dict[str, Validator]:
        """The keys of a range: ``low``/``high`` within the knob's domain, ``step`` (integer ranges), ``log``."""
        lo, hi = domain.low, domain.high
        if not integer:
            number = partial(self.num, lo=lo, hi=hi)
            return {"low": number, "high": number, "log": self.bool_}
        whole = partial(self.int_, lo=None if lo is None else int(lo), hi=None if hi is None else int(hi))
        return {"low": whole, "high": whole, "step": partial(self.int_, lo=1), "log": self.bool_}


#: requests picked from a request log when the space does not say (``benchmark.requests``)
DEFAULT_REQUESTS = 32


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

        target = self.beside(v, f, line, "a request log")
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

    def beside(self, v: str, f: str, line: int | None, what: str) -> Path:
        """The file ``v`` names, relative to the space file's folder."""
        target = (self.base_dir / os.path.expanduser(v)).resolve()
        if not target.is_file():
            where = "is not a file" if target.exists() else "does not exist"
            msg = f"expected {what}, but {target} {where} (relative paths are read from the space file's folder)"
            raise self.error(f, line, msg)
        return target

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
        target = self.beside(v, f, line, "a prompts file")
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


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP_KEYS = (
    "name",
    "storage",
    "server",
    "drafters",
    "search",
    "benchmark",
    "objective",
    "pruning",
    "budget",
    "verdict",
    "simulate",
)
_REQUIRED_TOP_KEYS = (
    ("name", "a study name"),
    ("server", "a server mapping"),
    ("drafters", "a list of drafters"),
    ("benchmark", "a benchmark mapping"),
)


class SpaceReader(SearchSection, BenchmarkSection):
    """Validates a parsed space file. Errors are collected; ``load_space`` raises the first in file order."""

    # -- the whole file ---------------------------------------------------------------------------------

    def space(self, doc: Any) -> Space | None:
        top = self.top_level(doc)
        name = self.section(top, "name", self.name)
        storage = self.section(top, "storage", self.optional(self.storage))
        server = self.section(top, "server", self.server)
        backend = server.backend if server is not None else None
        drafters = self.section(top, "drafters", partial(self.drafters, backend=backend))
        names = tuple(d.name for d in drafters) if drafters is not None else None
        version = server.version if server is not None else None
        search = partial(self.search, backend=backend, drafter_names=names, version=version)
        rest = {
            "search": self.section(top, "search", search, SearchSpec(drafters=names or ())),
            "benchmark": self.section(top, "benchmark", self.benchmark),
            "pruning": self.section(top, "pruning", self.pruning, PruningSpec()),
            "budget": self.section(top, "budget", self.budget, BudgetSpec()),
            "verdict": self.section(top, "verdict", self.verdict, VerdictSpec()),
            "simulate": self.section(top, "simulate", self.optional(self.simulate)),
        }
        bench = rest["benchmark"]
        levels = bench.concurrency if bench is not None else None
        prompts = bench.prompts if bench is not None else None
        if server is not None and bench is not None and bench.loaded:
            for problem in server_class(server.backend).level_flag_problems(server.extra_args, max(bench.concurrency)):
                line = key_line(top.get("server"), "extra_args", None)
                self.errors.append(self.error("server.extra_args", line, problem))
        rest["objective"] = self.section(
            top, "objective", partial(self.objective, levels=levels, prompts=prompts), ObjectiveSpec()
        )
        if self.errors:
            return None
        return Space(name=name, server=server, drafters=drafters, storage=storage, path=self.path, **rest)

    def top_level(self, doc: Any) -> dict[Any, Any]:
        """The file's mapping; unknown and missing top-level keys are recorded."""
        if doc is None:
            raise self.error(
                "", None, "the file is empty; expected a mapping with name, server, drafters, search and benchmark"
            )
        top = self.mapping(doc, "", getattr(doc, "line", 1), _TOP_KEYS)
        for key in top:
            if key not in _TOP_KEYS:
                self.errors.append(self.unknown(key, join("", key), key_line(top, key, None), _TOP_KEYS))
        for key, what in _REQUIRED_TOP_KEYS:
            if key not in top:
                self.errors.append(self.error(key, None, f"missing; expected {what}"))
        return top

    def section(self, top: dict[Any, Any], key: str, fn: Validator, default: Any = None) -> Any:
        """Top-level section ``key`` validated by ``fn`` (``default`` when absent or invalid)."""
        if key not in top:
            return default
        return self.attempt(lambda: fn(top[key], key, key_line(top, key, None)), default)

    # -- server -----------------------------------------------------------------------------------------

    def server(self, v: Any, f: str, line: int | None) -> ServerSpec:
        schema: dict[str, Validator] = {
            "backend": lambda x, p, ln: self.enum(x, p, ln, backend_names()),
            "model_path": lambda x, p, ln: self.str_(x, p, ln, "a model directory or hub id"),
            "version": self.optional(lambda x, p, ln: self.str_(x, p, ln, 'a version string like "0.5.23"')),
            "launcher": self.optional(self.launcher),
            "host": self.str_,
            "port": lambda x, p, ln: self.int_(x, p, ln, 1, 65535),
            "extra_args": self.optional(
                lambda x, p, ln: self.str_list(x, p, ln, "a list of strings", coerce_numbers=True)
            ),
            "env": self.optional(self.env),
            "startup_timeout_s": self.pos,
            "request_timeout_s": self.pos,
            "port_busy": lambda x, p, ln: self.enum(x, p, ln, ("fail", "wait", "next")),
            "port_wait_s": self.pos,
        }
        d = self.fields(v, f, line, schema, required={"model_path": "the model directory or hub id"})
        spec = ServerSpec(**{k: x for k, x in d.items() if x is not None})  # null: the default
        if "extra_args" in d and ("backend" in d or "backend" not in v):
            self.attempt(lambda: self.managed_flags(spec, v, f, line))
        return spec

    def launcher(self, v: Any, f: str, line: int | None) -> tuple[str, ...]:
        out = self.str_list(v, f, line, "a list of strings (an argv prefix)")
        if not out:
            raise self.expected(f, line, "a non-empty list of strings (an argv prefix) or null", v)
        return out

    def env(self, v: Any, f: str, line: int | None) -> dict[str, str]:
        if not isinstance(v, dict):
            raise self.expected(f, line, "a mapping of variable names to strings", v)
        out: dict[str, str] = {}
        for key, value in v.items():
            kl = key_line(v, key, line)
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise self.expected(join(f, key), kl, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", key)
            if is_plain_number(value):
                value = str(value)
            if not isinstance(value, str):
                hint = " (quote it)" if isinstance(value, bool) else ""
                raise self.expected(join(f, key), kl, "a string", value, hint)
            out[key] = value
        return out

    def managed_flags(self, spec: ServerSpec, raw: Any, f: str, line: int | None) -> None:
        """No item of ``extra_args`` is a flag the backend sets itself (``Backend.managed_flags``)."""
        extra = raw.get("extra_args") or []
        sets_flag = server_class(spec.backend).sets_flag
        for i, arg in enumerate(spec.extra_args):
            if sets_flag(arg):
                raise self.error(
                    f"{join(f, 'extra_args')}[{i}]",
                    item_line(extra, i, line),
                    f"{arg} is set by autotune itself (from the server, drafters and search "
                    f"sections); remove it from extra_args",
                )

    # -- drafters ---------------------------------------------------------------------------------------

    def drafters(self, v: Any, f: str, line: int | None, backend: str | None = None) -> tuple[DrafterSpec, ...]:
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "a list of at least one drafter {name, path}", v)
        out: list[DrafterSpec] = []
        first: dict[str, int | None] = {}
        ok = True
        for i, item in enumerate(v):
            p, il = f"{f}[{i}]", item_line(v, i, line)
            try:
                d = self.drafter(item, p, il, backend)
            except SpaceError as e:  # this drafter is abandoned; report the others' problems too
                self.errors.append(e)
                ok = False
                continue
            name, nl = d.name, key_line(item, "name", il)
            if name == "none":
                raise self.error(f"{p}.name", nl, "the name 'none' is reserved for the baseline; pick another")
            if name in first:
                raise self.error(f"{p}.name", nl, f"duplicate drafter name '{name}' (first at line {first[name]})")
            first[name] = nl
            out.append(d)
        if not ok:
            raise Recorded()
        return tuple(out)

    def drafter(self, v: Any, f: str, line: int | None, backend: str | None) -> DrafterSpec:
        schema: dict[str, Validator] = {
            "name": self.name,
            "path": lambda x, q, ln: self.str_(x, q, ln, "the checkpoint directory"),
            "algorithm": self.optional(partial(self.algorithm, algorithms=drafter_algorithms(backend))),
            "reference_acceptance": self.optional(lambda x, q, ln: self.num(x, q, ln, 1, lo_open=True)),
        }
        required = {"name": "a drafter name", "path": "the drafter checkpoint directory"}
        return DrafterSpec(**self.fields(v, f, line, schema, required=required, complete=True))

    def algorithm(self, v: Any, f: str, line: int | None, algorithms: tuple[str, ...] = ()) -> str:
        """A drafter's forced algorithm: one the backend takes (``Backend.drafter_algorithms``), upper-cased."""
        if isinstance(v, str) and v.upper() in algorithms:
            return v.upper()
        raise self.expected(
            f,
            line,
            "one of " + ", ".join(algorithms) + " (or leave it out to derive it)",
            v,
            suggest(v.upper() if isinstance(v, str) else v, algorithms),
        )

    # -- the study's settings ---------------------------------------------------------------------------

    def pruning(self, v: Any, f: str, line: int | None) -> PruningSpec:
        schema: dict[str, Validator] = {
            "enabled": self.bool_,
            "confidence": self.confidence,
            "min_prompts": lambda x, p, ln: self.int_(x, p, ln, 1),
            "zero_accept_max": lambda x, p, ln: self.num(x, p, ln, 1),
            "start_noise": lambda x, p, ln: self.num(x, p, ln, 0, 0.5),
            "leader": self.bool_,
            "leader_margin": lambda x, p, ln: self.num(x, p, ln, 0, 0.5),
        }
        return PruningSpec(**self.fields(v, f, line, schema))

    def budget(self, v: Any, f: str, line: int | None) -> BudgetSpec:
        schema: dict[str, Validator] = {
            "n_trials": lambda x, p, ln: self.int_(x, p, ln, 1),
            "timeout_s": self.optional(self.pos),
            "refine_trials": self.optional(lambda x, p, ln: self.int_(x, p, ln, 0)),
            "design_trials": self.optional(lambda x, p, ln: self.int_(x, p, ln, 0)),
            "stop_when_settled": self.bool_,
        }
        return BudgetSpec(**self.fields(v, f, line, schema))

    def verdict(self, v: Any, f: str, line: int | None) -> VerdictSpec:
        schema: dict[str, Validator] = {
            "min_gain": lambda x, p, ln: self.num(x, p, ln, 0),
            "confirm_top": lambda x, p, ln: self.int_(x, p, ln, 0),
            "repeats": lambda x, p, ln: self.int_(x, p, ln, 1),
            "max_repeats": self.optional(lambda x, p, ln: self.int_(x, p, ln, 1)),
            "race_confidence": self.confidence,
            "confidence": self.confidence,
            "tie_tolerance": self.optional(lambda x, p, ln: self.num(x, p, ln, 0)),
            "lossless_min_prefix": lambda x, p, ln: self.num(x, p, ln, 0, 1),
        }
        spec = VerdictSpec(**self.fields(v, f, line, schema))
        if spec.max_repeats is not None and spec.max_repeats < spec.repeats:
            raise self.error(
                join(f, "max_repeats"),
                key_line(v, "max_repeats", line),
                f"expected at least repeats ({spec.repeats}: every candidate gets that many rounds), "
                f"got {spec.max_repeats}",
            )
        return spec

    def simulate(self, v: Any, f: str, line: int | None) -> SimulateSpec:
        schema: dict[str, Validator] = {
            "scenario": self.name,
            "time_scale": self.pos,
            "seed": lambda x, p, ln: self.int_(x, p, ln, 0),
            "near_ties": self.optional(lambda x, p, ln: self.num(x, p, ln, 0, 1)),
        }
        return SimulateSpec(**self.fields(v, f, line, schema))

    def storage(self, v: Any, f: str, line: int | None) -> str:
        if isinstance(v, str) and "://" in v:
            return v
        raise self.expected(f, line, "an Optuna storage URL like sqlite:///studies/x.db or postgresql://host/db", v)


def _load(path: str | os.PathLike[str]) -> tuple[Space | None, list[SpaceError]]:
    """(the space, []) or (None, every error in file order). Errors without a line (missing top-level keys) and
    errors in a prompts file come last. An unreadable file or invalid YAML gives one error."""
    shown = os.fspath(path)
    try:
        doc = parse_yaml(read_text(Path(shown), shown), shown)
    except SpaceError as e:
        return None, [e]
    reader = SpaceReader(shown, Path(shown).resolve().parent)
    space = reader.attempt(lambda: reader.space(doc))
    errors = reader.recorded_errors()
    if not errors:
        return space, []
    return None, sorted(errors, key=lambda e: (e.path != shown, e.line is None, e.line or 0))


def space_errors(path: str | os.PathLike[str]) -> list[SpaceError]:
    """Every error found in a space file, in file order (empty when the file is valid)."""
    return _load(path)[1]


def load_space(path: str | os.PathLike[str]) -> Space:
    """Read and validate a space file. Raises SpaceError (the first problem in file order)."""
    space, errors = _load(path)
    if errors:
        raise errors[0]
    assert space is not None
    return space

"""The space file's ``search`` section: the drafters and CUDA-graph settings searched, each knob's values (a range,
choices or one value within the backend's domain for it), and ``search.methods`` (each method of the backend's
catalogue with its drafters and knobs, refused where ``server.version`` predates it). ``SpaceReader``
(``autotune.space.validate``) reads the whole file with it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from autotune.servers import KnobDomain, knob_domains, method_catalogue, version_lacks
from autotune.space.checker import Checker, Validator
from autotune.space.describe import describe, fmt_num, is_int, is_num, join, suggest
from autotune.space.loader import item_line, key_line
from autotune.space.model import Choices, FloatRange, IntRange, MethodSpec, ParamSpec, SearchSpec

__all__ = ["_ANY", "SearchSection"]

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
        if isinstance(m, dict) and "methods" in m:
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
                raise self.error(
                    p,
                    kl,
                    f"unknown knob {describe(key)} for method {name}{suggest(key, valid)}; "
                    f"expected one of {', '.join(valid) or '(none)'}",
                )
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
            valid = ("drafters", "cuda_graph", *domains)
            raise self.error(
                f,
                line,
                f"unknown knob {describe(key)} for backend {backend}{suggest(key, valid)}; "
                f"expected one of {', '.join(valid)}",
            )
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
            return {
                "low": lambda x, p, ln: self.num(x, p, ln, lo, hi),
                "high": lambda x, p, ln: self.num(x, p, ln, lo, hi),
                "log": self.bool_,
            }
        ilo, ihi = (None if lo is None else int(lo)), (None if hi is None else int(hi))
        return {
            "low": lambda x, p, ln: self.int_(x, p, ln, ilo, ihi),
            "high": lambda x, p, ln: self.int_(x, p, ln, ilo, ihi),
            "step": lambda x, p, ln: self.int_(x, p, ln, 1),
            "log": self.bool_,
        }

"""The space file's schema: a parsed file in, a ``Space`` or every error in file order out.

``load_space`` reads and validates a file; every error is a ``SpaceError`` naming the file, the line, the field
path and what was expected. ``docs/space-reference.md`` documents every key. The knobs a backend searches, the
values they take and the flags it sets itself come from the backend (``autotune.backends.registry``).

``SpaceReader`` reads the file's top level, the server, the drafters and the study's settings here; the ``search``
section (knobs, ranges, methods) through ``autotune.space.validate_search`` and the ``benchmark`` and ``objective``
sections (prompts, load levels) through ``autotune.space.validate_benchmark``.
"""

from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path
from typing import Any

from autotune.errors import SpaceError
from autotune.servers import backend_names, drafter_algorithms, server_class
from autotune.space.checker import Recorded, Validator
from autotune.space.describe import is_plain_number, join, suggest
from autotune.space.loader import item_line, key_line, parse_yaml, read_text
from autotune.space.model import (
    BudgetSpec,
    DrafterSpec,
    ObjectiveSpec,
    PruningSpec,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    Space,
    VerdictSpec,
)
from autotune.space.validate_benchmark import BenchmarkSection
from autotune.space.validate_search import SearchSection

__all__ = [
    "_ENV_NAME",
    "_REQUIRED_TOP_KEYS",
    "_TOP_KEYS",
    "SpaceReader",
    "_load",
    "load_space",
    "space_errors",
]

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
                self.errors.append(self.unknown_key(key, "", key_line(top, key, None), _TOP_KEYS))
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
                d = self.drafter_fields(item, p, il, backend)
            except SpaceError as e:  # this drafter is abandoned; report the others' problems too
                self.errors.append(e)
                ok = False
                continue
            name, nl = d["name"], key_line(item, "name", il)
            if name == "none":
                raise self.error(f"{p}.name", nl, "the name 'none' is reserved for the baseline; pick another")
            if name in first:
                raise self.error(f"{p}.name", nl, f"duplicate drafter name '{name}' (first at line {first[name]})")
            first[name] = nl
            out.append(DrafterSpec(**d))
        if not ok:
            raise Recorded()
        return tuple(out)

    def drafter_fields(self, v: Any, f: str, line: int | None, backend: str | None = None) -> dict[str, Any]:
        schema: dict[str, Validator] = {
            "name": self.name,
            "path": lambda x, q, ln: self.str_(x, q, ln, "the checkpoint directory"),
            "algorithm": self.optional(partial(self.algorithm, algorithms=drafter_algorithms(backend))),
            "reference_acceptance": self.optional(lambda x, q, ln: self.num(x, q, ln, 1, lo_open=True)),
        }
        required = {"name": "a drafter name", "path": "the drafter checkpoint directory"}
        return self.fields(v, f, line, schema, required=required, complete=True)

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

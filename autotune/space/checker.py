"""Checking parsed YAML values one field at a time, collecting every error with its field path and line.

A validator is ``fn(value, field, line) -> typed value``: it returns the value in its typed form or raises a
``SpaceError`` naming the field, the line and what was expected. ``Checker`` holds the generic ones; the wording of
values in their messages lives here too.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from autotune.errors import SpaceError
from autotune.space.loader import describe, item_line, key_line


def suggest(word: Any, options: tuple[str, ...] | list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options``, or ``""``."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if not close and word.lower() in options:
        close = [word.lower()]
    return f" (did you mean '{close[0]}'?)" if close else ""


def join(parent: str, key: Any) -> str:
    """The field path of ``key`` under ``parent`` (``server.port``)."""
    key = key if isinstance(key, str) else describe(key)
    return f"{parent}.{key}" if parent else key


def fmt_num(x: float | None) -> str:
    """A bound as written in a message: ``2`` rather than ``2.0``."""
    if x is None:
        return ""
    if isinstance(x, float) and x.is_integer():
        return str(int(x)) if abs(x) < 1e15 else repr(x)
    return str(x) if not isinstance(x, int) or x.bit_length() <= 128 else "a very large integer"


def flow(items: list[str]) -> str:
    """A YAML flow list of strings, quoting the items YAML would not read back as strings."""

    def plain(item: str) -> bool:
        try:
            return isinstance(yaml.safe_load(item), str) and "," not in item and item == item.strip()
        except yaml.YAMLError:
            return False

    return "[" + ", ".join(item if plain(item) else json.dumps(item) for item in items) + "]"


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> TypeGuard[int | float]:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and (not isinstance(v, float) or math.isfinite(v))


def is_plain_number(v: Any) -> bool:
    """A number that may stand for its string form (argv items, env values)."""
    return is_num(v) and (not isinstance(v, int) or v.bit_length() <= 128)


Validator = Callable[[Any, str, "int | None"], Any]

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class Recorded(SpaceError):
    """Raised after errors were already recorded, to abandon a value without recording anything more."""

    def __init__(self) -> None:
        super().__init__("(already recorded)")


class Checker:
    """Generic validators over one file's values. Errors are collected in ``errors``; a validator that raises
    abandons only its own value (``attempt``)."""

    def __init__(self, path: str, base_dir: Path) -> None:
        self.path = path
        self.base_dir = base_dir
        self.errors: list[SpaceError] = []

    # -- errors -----------------------------------------------------------------------------------------

    def error(self, field: str, line: int | None, message: str) -> SpaceError:
        return SpaceError(message, path=self.path, line=line, field=field or None)

    def expected(self, field: str, line: int | None, what: str, got: Any, hint: str = "") -> SpaceError:
        return self.error(field, line, f"expected {what}, got {describe(got)}{hint}")

    def attempt(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one validation; a SpaceError is recorded and ``default`` returned."""
        try:
            return fn()
        except SpaceError as e:
            self.errors.append(e)
            return default

    # -- scalars ----------------------------------------------------------------------------------------

    def int_(self, v: Any, f: str, line: int | None, lo: int | None = None, hi: int | None = None) -> int:
        if is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi):
            return v
        if lo is not None and hi is not None:
            what = f"an integer between {lo} and {hi}"
        elif lo is not None:
            what = f"an integer >= {lo}"
        else:
            what = "an integer"
        raise self.expected(f, line, what, v)

    def num(
        self,
        v: Any,
        f: str,
        line: int | None,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> float:
        ok = is_num(v)
        if ok and lo is not None:
            ok = v > lo if lo_open else v >= lo
        if ok and hi is not None:
            ok = v < hi if hi_open else v <= hi
        if ok:
            return float(v)
        raise self.expected(f, line, _number_between(lo, hi, lo_open, hi_open), v)

    def pos(self, v: Any, f: str, line: int | None) -> float:
        """A positive number of seconds."""
        return self.num(v, f, line, lo=0, lo_open=True)

    def confidence(self, v: Any, f: str, line: int | None) -> float:
        return self.num(v, f, line, 0, 1, lo_open=True, hi_open=True)

    def bool_(self, v: Any, f: str, line: int | None) -> bool:
        if isinstance(v, bool):
            return v
        raise self.expected(f, line, "true or false", v)

    def str_(self, v: Any, f: str, line: int | None, what: str = "a non-empty string") -> str:
        if isinstance(v, str) and v.strip():
            return v
        hint = ""
        if is_num(v):
            hint = f' (quote it: "{v}")'
        raise self.expected(f, line, what, v, hint)

    def enum(self, v: Any, f: str, line: int | None, options: tuple[str, ...]) -> str:
        if isinstance(v, str) and v in options:
            return v
        raise self.expected(f, line, "one of " + ", ".join(options), v, suggest(v, options))

    def name(self, v: Any, f: str, line: int | None) -> str:
        if isinstance(v, str) and _NAME.fullmatch(v) and len(v) <= 100:
            return v
        raise self.expected(f, line, "a name of letters, digits, '_', '.' and '-' (at most 100)", v)

    def optional(self, fn: Validator) -> Validator:
        return lambda v, f, line: None if v is None else fn(v, f, line)

    # -- mappings ---------------------------------------------------------------------------------------

    def mapping(self, v: Any, f: str, line: int | None, keys: tuple[str, ...]) -> dict[Any, Any]:
        if isinstance(v, dict):
            return v
        raise self.expected(f, line, "a mapping with keys " + ", ".join(keys), v)

    def unknown(
        self, key: Any, f: str, line: int | None, keys: tuple[str, ...], kind: str = "key", owner: str = ""
    ) -> SpaceError:
        """``key`` (field ``f``) is none of ``keys``; ``owner`` follows it in the message (`` for backend x``)."""
        expected = ", ".join(keys) or "(none)"
        return self.error(
            f, line, f"unknown {kind} {describe(key)}{owner}{suggest(key, keys)}; expected one of {expected}"
        )

    def fields(
        self,
        v: Any,
        f: str,
        line: int | None,
        schema: Mapping[str, Validator],
        required: Mapping[str, str] | None = None,
        complete: bool = False,
    ) -> dict[str, Any]:
        """Validate a mapping key by key in file order; returns the valid values (errors are recorded).
        With ``complete``, any invalid or missing key abandons the whole mapping (raises ``Recorded``)."""
        keys = tuple(schema)
        m = self.mapping(v, f, line, keys)
        n_errors = len(self.errors)
        out: dict[str, Any] = {}
        for key, value in m.items():
            kl = key_line(m, key, line)
            if key not in schema:
                self.errors.append(self.unknown(key, join(f, key), kl, keys))
                continue
            try:
                out[key] = schema[key](value, join(f, key), kl)
            except SpaceError as e:
                self.errors.append(e)
        for key, what in (required or {}).items():
            if key not in m:
                self.errors.append(self.error(join(f, key), line, f"missing; expected {what}"))
        if complete and len(self.errors) > n_errors:
            raise Recorded()
        return out

    # -- lists ------------------------------------------------------------------------------------------

    def str_list(self, v: Any, f: str, line: int | None, what: str, coerce_numbers: bool = False) -> tuple[str, ...]:
        if isinstance(v, str):
            hint = "; argv lists only, a shell string is never split"
            try:
                hint += f": write {flow(shlex.split(v))}"
            except ValueError:
                pass
            raise self.expected(f, line, what, v, hint)
        if not isinstance(v, list):
            raise self.expected(f, line, what, v)
        out: list[str] = []
        for i, item in enumerate(v):
            il = item_line(v, i, line)
            if coerce_numbers and is_plain_number(item):
                item = str(item)
            if not isinstance(item, str) or item == "":
                raise self.expected(f"{f}[{i}]", il, "a non-empty string", item)
            out.append(item)
        return tuple(out)

    def recorded_errors(self) -> list[SpaceError]:
        """The errors to show (without the ``Recorded`` markers)."""
        return [e for e in self.errors if not isinstance(e, Recorded)]


def _number_between(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    """What ``Checker.num`` expected: "a number >= 0", "a number strictly between 0 and 1", ..."""
    lo_s, hi_s = fmt_num(lo), fmt_num(hi)
    if lo is not None and hi is not None:
        if lo_open and hi_open:
            return f"a number strictly between {lo_s} and {hi_s}"
        if not lo_open and not hi_open:
            return f"a number between {lo_s} and {hi_s}"
        return f"a number {'>' if lo_open else '>='} {lo_s} and {'<' if hi_open else '<='} {hi_s}"
    if lo is not None:
        return f"a number {'>' if lo_open else '>='} {lo_s}"
    return "a number"

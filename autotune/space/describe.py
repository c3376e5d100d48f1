"""How values are worded in space-file error messages ("expected ..., got ...") and what counts as a number."""

from __future__ import annotations

import difflib
import json
import math
from typing import Any, TypeGuard

import yaml

__all__ = ["describe", "flow", "fmt_num", "is_int", "is_num", "is_plain_number", "join", "suggest"]


def describe(v: Any) -> str:
    """How a value is shown after "got" in an error message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        if v == "":
            return "an empty string"
        return repr(v if len(v) <= 60 else v[:57] + "...")
    if isinstance(v, int):
        return str(v) if v.bit_length() <= 128 else "a very large integer"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, dict):
        return "an empty mapping" if not v else "a mapping"
    if isinstance(v, list):
        return "an empty list" if not v else "a list"
    return f"a value of type {type(v).__name__}"


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

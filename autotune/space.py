"""Space files: one YAML file describes the server, the drafters, the knobs and the benchmark.

The dataclasses below are the validated, typed form every other module uses. ``load_space`` reads and
validates a file; every error is a ``SpaceError`` naming the file, the line, the field path and what was
expected. ``docs/space-reference.md`` documents every key.

Reading is defensive: ``yaml.safe_load`` semantics only (no Python tags), files over ``MAX_BYTES`` are
refused before parsing, text must be UTF-8, duplicate keys are errors, and YAML aliases are refused
outright (no "billion laughs").
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from autotune.backends import KNOBS, backend_names
from autotune.errors import SpaceError

__all__ = [
    "MAX_BYTES",
    "BenchmarkSpec",
    "BudgetSpec",
    "Choices",
    "DrafterSpec",
    "FloatRange",
    "IntRange",
    "ParamSpec",
    "Prompt",
    "PruningSpec",
    "SearchSpec",
    "ServerSpec",
    "SimulateSpec",
    "Space",
    "VerdictSpec",
    "load_space",
    "redact_env",
    "space_errors",
]


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    step: int = 1
    log: bool = False

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class Choices:
    values: tuple[Any, ...]


ParamSpec = IntRange | FloatRange | Choices


@dataclass(frozen=True)
class ServerSpec:
    backend: str = "sglang"  # sglang | llamacpp | vllm
    model_path: str = ""
    version: str | None = None  # server version targeted (flag spelling); None = probe or newest known
    launcher: tuple[str, ...] = ()  # argv prefix overriding the backend's default (e.g. a venv's python)
    host: str = "127.0.0.1"
    port: int = 30000
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 600.0
    port_busy: str = "fail"  # fail | wait | next
    port_wait_s: float = 60.0


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    path: str
    algorithm: str | None = None  # forced algorithm; None = derived from the checkpoint's config.json


@dataclass(frozen=True)
class SearchSpec:
    drafters: tuple[str, ...] = ()  # names from ``drafters``; default all
    cuda_graph: tuple[bool, ...] = (True,)
    knobs: Mapping[str, ParamSpec] = field(default_factory=dict)  # backend knob name -> range/choices


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    category: str | None = None  # code, math, chat, summarization, creative (used by the simulator)


@dataclass(frozen=True)
class BenchmarkSpec:
    prompts: tuple[Prompt, ...] = ()
    max_tokens: int = 1024
    temperature: float = 0.0
    warmup_requests: int = 1
    api: str = "completions"  # completions | chat
    retries: int = 2  # per request, for HTTP errors and truncated streams
    prompts_file: str | None = None  # absolute path of the file the prompts came from, if any


@dataclass(frozen=True)
class PruningSpec:
    enabled: bool = True
    confidence: float = 0.95
    min_prompts: int = 2
    zero_accept_max: float = 1.1  # acceptance length at or below this after the first prompt: drafter not engaged
    # sd of the log speedup between one server start and another that a single start's prompts cannot show (each
    # start's whole speed moves by ~2.5%: sqrt(2) * 2.5% for a trial/baseline pair); widens the prune bound
    start_noise: float = 0.035


@dataclass(frozen=True)
class BudgetSpec:
    n_trials: int = 30
    timeout_s: float | None = None
    #: the last trials of the budget picked by the surrogate (expected improvement over the best measured
    #: config's posterior mean) instead of the sampler; None = half of n_trials (SGLang spaces; backends
    #: that cannot enumerate their space leave every trial to the sampler)
    refine_trials: int | None = None


@dataclass(frozen=True)
class VerdictSpec:
    min_gain: float = 0.02
    confirm_top: int = 3
    repeats: int = 4
    #: after ``repeats`` rounds, candidates not clearly slower than the leader race on, up to this many rounds
    #: (None = twice ``repeats``; equal to ``repeats`` = no race)
    max_repeats: int | None = None
    #: one-sided confidence that a dropped candidate is slower than the leader of the race
    race_confidence: float = 0.8
    confidence: float = 0.95
    #: a divergence from the baseline's answer at a token where the baseline's best and the other's token are
    #: within this many nats is a near-tie flip (numerics), not a failure; None: from the target's data type
    #: (``autotune.lossless.TIE_TOLERANCE``)
    tie_tolerance: float | None = None
    #: without log-probabilities to classify a divergence: an answer matching the baseline's for less than this
    #: fraction is flagged
    lossless_min_prefix: float = 0.9

    @property
    def max_rounds(self) -> int:
        return 2 * self.repeats if self.max_repeats is None else max(self.repeats, self.max_repeats)


@dataclass(frozen=True)
class SimulateSpec:
    scenario: str = "kimi-k25-rtxpro6000"
    time_scale: float = 50.0
    seed: int = 0
    #: probability that a prompt has a near tie (None: the scenario's, normally 0); passed as --near-ties
    near_ties: float | None = None


@dataclass(frozen=True)
class Space:
    name: str
    server: ServerSpec
    drafters: tuple[DrafterSpec, ...]
    search: SearchSpec
    benchmark: BenchmarkSpec
    pruning: PruningSpec = field(default_factory=PruningSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    verdict: VerdictSpec = field(default_factory=VerdictSpec)
    simulate: SimulateSpec | None = None
    storage: str | None = None
    path: str | None = None  # the file it was loaded from

    def drafter(self, name: str) -> DrafterSpec:
        for d in self.drafters:
            if d.name == name:
                return d
        raise KeyError(name)

    def storage_url(self) -> str:
        """``storage``, or the default ``sqlite:///studies/<name>.db`` (relative to the working directory)."""
        return self.storage or f"sqlite:///studies/{self.name}.db"


# -- secrets ---------------------------------------------------------------------------------------------

_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` whose secret-looking values (the name contains TOKEN, KEY, SECRET, PASSWORD,
    PASSWD or CREDENTIAL, any case) are replaced with ``"***"``. Use it wherever env is stored or printed."""
    return {k: ("***" if any(w in str(k).upper() for w in _SECRET_WORDS) else v) for k, v in env.items()}


# -- reading YAML with line numbers ---------------------------------------------------------------------

#: files larger than this are refused before parsing (space files and prompts files)
MAX_BYTES = 1 << 20
_MAX_DEPTH = 50


class _Map(dict):
    """A mapping from the YAML file that remembers the 1-based line of each key."""

    line: int | None = None
    key_lines: dict[Any, int]


class _Seq(list):
    """A sequence from the YAML file that remembers the 1-based line of each item."""

    line: int | None = None
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, merge keys and deep nesting, rejects duplicate keys, records lines."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(
                None,
                None,
                f"YAML aliases (*{event.anchor}) are not allowed in space files; write the value out",
                event.start_mark,
            )
        if self._depth >= _MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {_MAX_DEPTH} levels deep", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_map(loader: _Loader, node: Node) -> _Map:
    if not isinstance(node, MappingNode):
        raise ConstructorError(None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
    m = _Map()
    m.line = node.start_mark.line + 1
    m.key_lines = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise ConstructorError(None, None, "merge keys (<<) are not allowed in space files", key_node.start_mark)
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise ConstructorError(
                None, None, "a mapping key must be a plain value, not a list or mapping", key_node.start_mark
            ) from None
        if key in m:
            raise ConstructorError(
                None,
                None,
                f"duplicate key {_describe(key)} (first at line {m.key_lines[key]})",
                key_node.start_mark,
            )
        m[key] = loader.construct_object(value_node, deep=True)
        m.key_lines[key] = key_node.start_mark.line + 1
    return m


def _construct_seq(loader: _Loader, node: Node) -> _Seq:
    if not isinstance(node, SequenceNode):
        raise ConstructorError(None, None, f"expected a sequence node, but found {node.id}", node.start_mark)
    s = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    s.line = node.start_mark.line + 1
    s.item_lines = [child.start_mark.line + 1 for child in node.value]
    return s


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def _read_text(path: Path, shown: str) -> str:
    """The file's text: at most MAX_BYTES, UTF-8 (a BOM is dropped)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpaceError("no such file", path=shown) from None
    except IsADirectoryError:
        raise SpaceError("is a directory, expected a YAML file", path=shown) from None
    except OSError as e:
        raise SpaceError(f"cannot read the file: {e.strerror or e}", path=shown) from None
    if len(data) > MAX_BYTES:
        raise SpaceError(f"the file is larger than {MAX_BYTES} bytes (1 MiB); refusing to read it", path=shown)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpaceError(
            f"not UTF-8 text: byte 0x{data[e.start]:02x} cannot be decoded; save the file as UTF-8",
            path=shown,
            line=line,
        ) from None


def _parse_yaml(text: str, shown: str) -> Any:
    """Parse one YAML document with ``_Loader``; every failure is a SpaceError with a line."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = e.problem or "invalid YAML"
        tag = re.match(r"could not determine a constructor for the tag '(.*)'", problem)
        if "'\\t'" in problem:
            msg = "invalid YAML: a tab character; YAML indentation must use spaces"
        elif tag:
            shown_tag = tag.group(1).replace("tag:yaml.org,2002:", "!!")
            msg = f"the tag {shown_tag} is not allowed; space files are plain YAML (no Python objects)"
        elif isinstance(e, ComposerError | ConstructorError) and not e.context:
            msg = problem  # our own messages (aliases, duplicate keys, merge keys) and tag errors
        else:
            msg = f"invalid YAML: {problem}" + (f" ({e.context})" if e.context else "")
            if problem.startswith("mapping values are not allowed"):
                msg += "; check the indentation, and quote values that contain ': '"
        raise SpaceError(msg, path=shown, line=line) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise SpaceError(
            f"invalid YAML: the control character U+{e.character:04X} is not allowed in YAML text",
            path=shown,
            line=line,
        ) from None
    except RecursionError:
        raise SpaceError("invalid YAML: nested too deeply", path=shown) from None
    except Exception as e:  # noqa: BLE001 - PyYAML raises ValueError & co. for odd explicit tags
        raise SpaceError(f"invalid YAML: {type(e).__name__}: {e}", path=shown) from None
    finally:
        if loader is not None:
            loader.dispose()


# -- describing values ------------------------------------------------------------------------------------


def _describe(v: Any) -> str:
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


def _suggest(word: Any, options: tuple[str, ...] | list[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if not close and word.lower() in options:
        close = [word.lower()]
    return f" (did you mean '{close[0]}'?)" if close else ""


def _key_line(m: Any, key: Any, default: int | None) -> int | None:
    lines = getattr(m, "key_lines", None)
    return lines.get(key, default) if lines else default


def _item_line(s: Any, i: int, default: int | None) -> int | None:
    lines = getattr(s, "item_lines", None)
    return lines[i] if lines and i < len(lines) else default


def _join(parent: str, key: Any) -> str:
    key = key if isinstance(key, str) else _describe(key)
    return f"{parent}.{key}" if parent else key


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and (not isinstance(v, float) or math.isfinite(v))


def _is_plain_number(v: Any) -> bool:
    """A number that may stand for its string form (argv items, env values)."""
    return _is_num(v) and (not isinstance(v, int) or v.bit_length() <= 128)


# -- the knobs' value domains -------------------------------------------------------------------------------
# kind, minimum, maximum. Knobs a backend adds without an entry here take any plain scalar.

_KNOB_DOMAINS: dict[str, tuple[str, float | None, float | None]] = {
    # SGLang: tree depth S, branching k, verified nodes N (the root counts, so N >= 2)
    "num_steps": ("int", 1, None),
    "topk": ("int", 1, None),
    "num_draft_tokens": ("int", 2, None),
    # llama.cpp
    "spec_type": ("str", None, None),
    "draft_n_max": ("int", 1, None),
    "draft_n_min": ("int", 0, None),
    "draft_p_min": ("float", 0.0, 1.0),
    # vLLM
    "method": ("str", None, None),
    "num_speculative_tokens": ("int", 1, None),
}

#: flags autotune sets itself; in ``server.extra_args`` they would fight the search (or hide the EAGLE trap)
_MANAGED_FLAGS: dict[str, tuple[str, ...]] = {
    "sglang": ("--speculative-*", "--port", "--host", "--model-path", "--model", "--disable-cuda-graph"),
    "llamacpp": ("--spec-*", "--draft-*", "--port", "--host", "-m", "--model", "-md", "--model-draft"),
    "vllm": ("--speculative-config", "--port", "--host"),
}

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
_TOP_KEYS = ("name", "storage", "server", "drafters", "search", "benchmark", "pruning", "budget", "verdict", "simulate")

_Validator = Callable[[Any, str, "int | None"], Any]


class _Reader:
    """Validates a parsed space file. Errors are collected; ``load_space`` raises the first in file order."""

    def __init__(self, path: str, base_dir: Path) -> None:
        self.path = path
        self.base_dir = base_dir
        self.errors: list[SpaceError] = []

    # -- errors -----------------------------------------------------------------------------------------

    def error(self, field: str, line: int | None, message: str) -> SpaceError:
        return SpaceError(message, path=self.path, line=line, field=field or None)

    def expected(self, field: str, line: int | None, what: str, got: Any, hint: str = "") -> SpaceError:
        return self.error(field, line, f"expected {what}, got {_describe(got)}{hint}")

    def attempt(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one validation; a SpaceError is recorded and ``default`` returned."""
        try:
            return fn()
        except SpaceError as e:
            self.errors.append(e)
            return default

    # -- scalars ----------------------------------------------------------------------------------------

    def int_(self, v: Any, f: str, line: int | None, lo: int | None = None, hi: int | None = None) -> int:
        if _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi):
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
        ok = _is_num(v)
        if ok and lo is not None:
            ok = v > lo if lo_open else v >= lo
        if ok and hi is not None:
            ok = v < hi if hi_open else v <= hi
        if ok:
            return float(v)
        lo_s, hi_s = _fmt_num(lo), _fmt_num(hi)
        if lo is not None and hi is not None:
            if lo_open and hi_open:
                what = f"a number strictly between {lo_s} and {hi_s}"
            elif not lo_open and not hi_open:
                what = f"a number between {lo_s} and {hi_s}"
            else:
                what = f"a number {'>' if lo_open else '>='} {lo_s} and {'<' if hi_open else '<='} {hi_s}"
        elif lo is not None:
            what = f"a number {'>' if lo_open else '>='} {lo_s}"
        else:
            what = "a number"
        raise self.expected(f, line, what, v)

    def pos(self, v: Any, f: str, line: int | None) -> float:
        """A positive number of seconds."""
        return self.num(v, f, line, lo=0, lo_open=True)

    def bool_(self, v: Any, f: str, line: int | None) -> bool:
        if isinstance(v, bool):
            return v
        raise self.expected(f, line, "true or false", v)

    def str_(self, v: Any, f: str, line: int | None, what: str = "a non-empty string") -> str:
        if isinstance(v, str) and v.strip():
            return v
        hint = ""
        if _is_num(v):
            hint = f' (quote it: "{v}")'
        raise self.expected(f, line, what, v, hint)

    def enum(self, v: Any, f: str, line: int | None, options: tuple[str, ...]) -> str:
        if isinstance(v, str) and v in options:
            return v
        raise self.expected(f, line, "one of " + ", ".join(options), v, _suggest(v, options))

    def name(self, v: Any, f: str, line: int | None) -> str:
        if isinstance(v, str) and _NAME.fullmatch(v) and len(v) <= 100:
            return v
        raise self.expected(f, line, "a name of letters, digits, '_', '.' and '-' (at most 100)", v)

    def optional(self, fn: _Validator) -> _Validator:
        return lambda v, f, line: None if v is None else fn(v, f, line)

    # -- mappings ---------------------------------------------------------------------------------------

    def mapping(self, v: Any, f: str, line: int | None, keys: tuple[str, ...]) -> dict:
        if isinstance(v, dict):
            return v
        raise self.expected(f, line, "a mapping with keys " + ", ".join(keys), v)

    def unknown_key(self, key: Any, f: str, line: int | None, keys: tuple[str, ...]) -> SpaceError:
        return self.error(
            _join(f, key), line, f"unknown key {_describe(key)}{_suggest(key, keys)}; expected one of {', '.join(keys)}"
        )

    def fields(
        self,
        v: Any,
        f: str,
        line: int | None,
        schema: Mapping[str, _Validator],
        required: Mapping[str, str] | None = None,
        complete: bool = False,
    ) -> dict[str, Any]:
        """Validate a mapping key by key in file order; returns the valid values (errors are recorded).
        With ``complete``, any invalid or missing key abandons the whole mapping (raises ``_Recorded``)."""
        keys = tuple(schema)
        m = self.mapping(v, f, line, keys)
        n_errors = len(self.errors)
        out: dict[str, Any] = {}
        for key, value in m.items():
            kl = _key_line(m, key, line)
            if key not in schema:
                self.errors.append(self.unknown_key(key, f, kl, keys))
                continue
            try:
                out[key] = schema[key](value, _join(f, key), kl)
            except SpaceError as e:
                self.errors.append(e)
        for key, what in (required or {}).items():
            if key not in m:
                self.errors.append(self.error(_join(f, key), line, f"missing; expected {what}"))
        if complete and len(self.errors) > n_errors:
            raise _Recorded()
        return out

    # -- lists ------------------------------------------------------------------------------------------

    def str_list(self, v: Any, f: str, line: int | None, what: str, coerce_numbers: bool = False) -> tuple:
        if isinstance(v, str):
            hint = "; argv lists only, a shell string is never split"
            try:
                hint += f": write {_flow(shlex.split(v))}"
            except ValueError:
                pass
            raise self.expected(f, line, what, v, hint)
        if not isinstance(v, list):
            raise self.expected(f, line, what, v)
        out = []
        for i, item in enumerate(v):
            il = _item_line(v, i, line)
            if coerce_numbers and _is_plain_number(item):
                item = str(item)
            if not isinstance(item, str) or item == "":
                raise self.expected(f"{f}[{i}]", il, "a non-empty string", item)
            out.append(item)
        return tuple(out)

    # -- sections -----------------------------------------------------------------------------------------

    def server(self, v: Any, f: str, line: int | None) -> ServerSpec:
        schema: dict[str, _Validator] = {
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
            kl = _key_line(v, key, line)
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise self.expected(_join(f, key), kl, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", key)
            if _is_plain_number(value):
                value = str(value)
            if not isinstance(value, str):
                hint = " (quote it)" if isinstance(value, bool) else ""
                raise self.expected(_join(f, key), kl, "a string", value, hint)
            out[key] = value
        return out

    def managed_flags(self, spec: ServerSpec, raw: Any, f: str, line: int | None) -> None:
        extra = raw.get("extra_args") or []
        for i, arg in enumerate(spec.extra_args):
            for flag in _MANAGED_FLAGS.get(spec.backend, ()):
                hit = arg.startswith(flag[:-1]) if flag.endswith("*") else (arg == flag or arg.startswith(flag + "="))
                if hit:
                    raise self.error(
                        f"{_join(f, 'extra_args')}[{i}]",
                        _item_line(extra, i, line),
                        f"{arg} is set by autotune itself (from the server, drafters and search "
                        f"sections); remove it from extra_args",
                    )

    def drafters(self, v: Any, f: str, line: int | None) -> tuple[DrafterSpec, ...]:
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "a list of at least one drafter {name, path}", v)
        out: list[DrafterSpec] = []
        first: dict[str, int | None] = {}
        ok = True
        for i, item in enumerate(v):
            p, il = f"{f}[{i}]", _item_line(v, i, line)
            try:
                d = self.fields(
                    item,
                    p,
                    il,
                    {
                        "name": self.name,
                        "path": lambda x, q, ln: self.str_(x, q, ln, "the checkpoint directory"),
                        "algorithm": self.optional(self.algorithm),
                    },
                    required={"name": "a drafter name", "path": "the drafter checkpoint directory"},
                    complete=True,
                )
            except SpaceError as e:  # this drafter is abandoned; report the others' problems too
                self.errors.append(e)
                ok = False
                continue
            name = d["name"]
            nl = _key_line(item, "name", il)
            if name == "none":
                raise self.error(f"{p}.name", nl, "the name 'none' is reserved for the baseline; pick another")
            if name in first:
                raise self.error(f"{p}.name", nl, f"duplicate drafter name '{name}' (first at line {first[name]})")
            first[name] = nl
            out.append(DrafterSpec(**d))
        if not ok:
            raise _Recorded()
        return tuple(out)

    def algorithm(self, v: Any, f: str, line: int | None) -> str:
        if isinstance(v, str) and v.upper() in _ALGORITHMS:
            return v.upper()
        raise self.expected(
            f,
            line,
            "one of " + ", ".join(_ALGORITHMS) + " (or leave it out to derive it)",
            v,
            _suggest(v.upper() if isinstance(v, str) else v, _ALGORITHMS),
        )

    def search(
        self, v: Any, f: str, line: int | None, backend: str | None, drafter_names: tuple[str, ...] | None
    ) -> SearchSpec:
        if v is None:
            return SearchSpec(drafters=drafter_names or ())
        knob_names = KNOBS.get(backend, ()) if backend else ()
        valid = ("drafters", "cuda_graph", *knob_names)
        m = self.mapping(v, f, line, valid)
        drafters: tuple[str, ...] = drafter_names or ()
        cuda_graph: tuple[bool, ...] = (True,)
        knobs: dict[str, ParamSpec] = {}
        for key, value in m.items():
            kl = _key_line(m, key, line)
            p = _join(f, key)
            if key == "drafters":
                drafters = self.attempt(
                    lambda value=value, p=p, kl=kl: self.search_drafters(value, p, kl, drafter_names), drafters
                )
            elif key == "cuda_graph":
                cuda_graph = self.attempt(lambda value=value, p=p, kl=kl: self.bool_choices(value, p, kl), cuda_graph)
            elif backend and key not in knob_names:
                self.errors.append(
                    self.error(
                        p,
                        kl,
                        f"unknown knob {_describe(key)} for backend {backend}{_suggest(key, valid)}; "
                        f"expected one of {', '.join(valid)}",
                    )
                )
            elif not isinstance(key, str):
                self.errors.append(self.expected(p, kl, "a knob name", key))
            else:
                spec = self.attempt(lambda key=key, value=value, p=p, kl=kl: self.param(value, p, kl, key))
                if spec is not None:
                    knobs[key] = spec
        return SearchSpec(drafters=drafters, cuda_graph=cuda_graph, knobs=knobs)

    def search_drafters(self, v: Any, f: str, line: int | None, names: tuple[str, ...] | None) -> tuple[str, ...]:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not items:
            raise self.expected(f, line, "a non-empty list of drafter names", v)
        out: list[str] = []
        for i, item in enumerate(items):
            p, il = f"{f}[{i}]", _item_line(items, i, line)
            if names is not None and item not in names:
                raise self.expected(
                    p, il, "one of the drafters' names (" + ", ".join(names) + ")", item, _suggest(item, names)
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
            il = _item_line(v, i, line)
            self.bool_(item, f"{f}[{i}]", il)
            if item in out:
                raise self.error(f"{f}[{i}]", il, f"{_describe(item)} is listed twice")
            out.append(item)
        return tuple(out)

    def param(self, v: Any, f: str, line: int | None, knob: str) -> ParamSpec:
        kind, lo, hi = _KNOB_DOMAINS.get(knob, ("any", None, None))
        if isinstance(v, dict):
            return self.range_(v, f, line, kind, lo, hi)
        if isinstance(v, list):
            if not v:
                raise self.expected(f, line, "a non-empty list of choices or a range {low, high}", v)
            out: list[Any] = []
            for i, item in enumerate(v):
                il = _item_line(v, i, line)
                value = self.knob_value(item, f"{f}[{i}]", il, kind, lo, hi)
                if value in out and type(value) is type(out[out.index(value)]):
                    raise self.error(f"{f}[{i}]", il, f"{_describe(item)} is listed twice")
                out.append(value)
            return Choices(tuple(out))
        return Choices((self.knob_value(v, f, line, kind, lo, hi),))

    def knob_value(self, v: Any, f: str, line: int | None, kind: str, lo: float | None, hi: float | None) -> Any:
        if kind == "int":
            return self.int_(v, f, line, None if lo is None else int(lo), None if hi is None else int(hi))
        if kind == "float":
            return self.num(v, f, line, lo, hi)
        if kind == "str":
            return self.str_(v, f, line)
        if isinstance(v, str | bool) or _is_num(v):
            return v
        raise self.expected(f, line, "a plain value (string, number or boolean)", v)

    def range_(self, v: dict, f: str, line: int | None, kind: str, lo: float | None, hi: float | None) -> ParamSpec:
        if kind == "str":
            raise self.expected(f, line, "a list of choices (ranges are only for numeric knobs)", v)
        is_int = kind == "int" or (kind == "any" and _is_int(v.get("low")) and _is_int(v.get("high")))
        ilo, ihi = (None if lo is None else int(lo)), (None if hi is None else int(hi))
        schema: dict[str, _Validator]
        if is_int:
            schema = {
                "low": lambda x, p, ln: self.int_(x, p, ln, ilo, ihi),
                "high": lambda x, p, ln: self.int_(x, p, ln, ilo, ihi),
                "step": lambda x, p, ln: self.int_(x, p, ln, 1),
                "log": self.bool_,
            }
        else:
            schema = {
                "low": lambda x, p, ln: self.num(x, p, ln, lo, hi),
                "high": lambda x, p, ln: self.num(x, p, ln, lo, hi),
                "log": self.bool_,
            }
        required = {"low": "the lowest value", "high": "the highest value"}
        d = self.fields(v, f, line, schema, required=required, complete=True)
        low, high, log = d["low"], d["high"], d.get("log", False)
        if high < low:
            raise self.expected(
                _join(f, "high"),
                _key_line(v, "high", line),
                f"{'an integer' if is_int else 'a number'} >= low ({_fmt_num(low)})",
                v["high"],
            )
        if log and low <= 0:
            raise self.expected(
                _join(f, "low"), _key_line(v, "low", line), "a value > 0 for a log-scaled range", v["low"]
            )
        if is_int:
            step = d.get("step", 1)
            if log and step != 1:
                raise self.error(
                    _join(f, "step"),
                    _key_line(v, "step", line),
                    "expected no step (or 1) for a log-scaled range, got " + _describe(step),
                )
            return IntRange(int(low), int(high), step=step, log=log)
        return FloatRange(float(low), float(high), log=log)

    def benchmark(self, v: Any, f: str, line: int | None) -> BenchmarkSpec:
        schema: dict[str, _Validator] = {
            "prompts": self.prompts,
            "prompts_file": self.optional(self.str_),
            "max_tokens": lambda x, p, ln: self.int_(x, p, ln, 1),
            "temperature": lambda x, p, ln: self.num(x, p, ln, 0),
            "warmup_requests": lambda x, p, ln: self.int_(x, p, ln, 0),
            "api": lambda x, p, ln: self.enum(x, p, ln, ("completions", "chat")),
            "retries": lambda x, p, ln: self.int_(x, p, ln, 0),
        }
        d = self.fields(v, f, line, schema, complete=True)
        file_ = d.pop("prompts_file", None)
        if file_ is not None and "prompts" in d:
            raise self.error(
                _join(f, "prompts_file"),
                _key_line(v, "prompts_file", line),
                "give either prompts or prompts_file, not both",
            )
        if file_ is not None:
            d["prompts"], d["prompts_file"] = self.prompts_file(
                file_, _join(f, "prompts_file"), _key_line(v, "prompts_file", line)
            )
        if "prompts" not in d:
            raise self.error(
                _join(f, "prompts"),
                line,
                "no prompts; expected prompts (a list) or prompts_file (a file next to the space)",
            )
        return BenchmarkSpec(**d)

    def prompts(self, v: Any, f: str, line: int | None) -> tuple[Prompt, ...]:
        if not isinstance(v, list) or not v:
            raise self.expected(f, line, "a non-empty list of prompts (strings or {id, text, category})", v)
        out: list[Prompt] = []
        first: dict[str, int | None] = {}
        for i, item in enumerate(v):
            p, il = f"{f}[{i}]", _item_line(v, i, line)
            if isinstance(item, str):
                prompt = Prompt(id=f"p{i}", text=self.str_(item, p, il, "a non-empty prompt text"))
                idl = il
            elif isinstance(item, dict):
                d = self.fields(
                    item,
                    p,
                    il,
                    {
                        "id": self.name,
                        "text": lambda x, q, ln: self.str_(x, q, ln, "a non-empty prompt text"),
                        "category": self.optional(self.name),
                    },
                    required={"text": "the prompt text"},
                    complete=True,
                )
                d.setdefault("id", f"p{i}")
                prompt = Prompt(**d)
                idl = _key_line(item, "id", il)
            else:
                raise self.expected(p, il, "a prompt text or a mapping {id, text, category}", item)
            if prompt.id in first:
                raise self.error(
                    f"{p}.id", idl, f"duplicate prompt id '{prompt.id}' (first at line {first[prompt.id]})"
                )
            first[prompt.id] = idl
            out.append(prompt)
        return tuple(out)

    def prompts_file(self, v: str, f: str, line: int | None) -> tuple[tuple[Prompt, ...], str]:
        target = (self.base_dir / os.path.expanduser(v)).resolve()
        if not target.is_file():
            raise self.error(
                f,
                line,
                f"expected a prompts file, but {target} "
                f"{'is not a file' if target.exists() else 'does not exist'} "
                f"(relative paths are read from the space file's folder)",
            )
        sub = _Reader(str(target), target.parent)
        text = _read_text(target, str(target))
        suffix = target.suffix.lower()
        if suffix in (".yaml", ".yml", ".json"):
            data = _parse_yaml(text, str(target))
            if isinstance(data, dict) and set(data) == {"prompts"}:
                data = data["prompts"]
            prompts = sub.attempt(lambda: sub.prompts(data, "", getattr(data, "line", None)))
        elif suffix == ".jsonl":
            items: _Seq = _Seq()
            items.item_lines = []
            for n, raw in enumerate(text.splitlines(), 1):
                if not raw.strip():
                    continue
                try:
                    items.append(json.loads(raw))
                except ValueError as e:
                    raise SpaceError(f"invalid JSON: {e}", path=str(target), line=n) from None
                items.item_lines.append(n)
            if not items:
                raise self.error(f, line, f"the prompts file {target} has no prompts")
            prompts = sub.attempt(lambda: sub.prompts(items, "", 1))
        else:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if not lines:
                raise self.error(f, line, f"the prompts file {target} has no prompts (one prompt per line)")
            prompts = tuple(Prompt(id=f"p{i}", text=t) for i, t in enumerate(lines))
        errors = [e for e in sub.errors if not isinstance(e, _Recorded)]
        if errors:
            raise errors[0]
        return prompts, str(target)

    def pruning(self, v: Any, f: str, line: int | None) -> PruningSpec:
        return PruningSpec(
            **self.fields(
                v,
                f,
                line,
                {
                    "enabled": self.bool_,
                    "confidence": self.confidence,
                    "min_prompts": lambda x, p, ln: self.int_(x, p, ln, 1),
                    "zero_accept_max": lambda x, p, ln: self.num(x, p, ln, 1),
                    "start_noise": lambda x, p, ln: self.num(x, p, ln, 0, 0.5),
                },
            )
        )

    def budget(self, v: Any, f: str, line: int | None) -> BudgetSpec:
        return BudgetSpec(
            **self.fields(
                v,
                f,
                line,
                {
                    "n_trials": lambda x, p, ln: self.int_(x, p, ln, 1),
                    "timeout_s": self.optional(self.pos),
                    "refine_trials": self.optional(lambda x, p, ln: self.int_(x, p, ln, 0)),
                },
            )
        )

    def verdict(self, v: Any, f: str, line: int | None) -> VerdictSpec:
        spec = VerdictSpec(
            **self.fields(
                v,
                f,
                line,
                {
                    "min_gain": lambda x, p, ln: self.num(x, p, ln, 0),
                    "confirm_top": lambda x, p, ln: self.int_(x, p, ln, 0),
                    "repeats": lambda x, p, ln: self.int_(x, p, ln, 1),
                    "max_repeats": self.optional(lambda x, p, ln: self.int_(x, p, ln, 1)),
                    "race_confidence": self.confidence,
                    "confidence": self.confidence,
                    "tie_tolerance": self.optional(lambda x, p, ln: self.num(x, p, ln, 0)),
                    "lossless_min_prefix": lambda x, p, ln: self.num(x, p, ln, 0, 1),
                },
            )
        )
        if spec.max_repeats is not None and spec.max_repeats < spec.repeats:
            raise self.error(
                _join(f, "max_repeats"),
                _key_line(v, "max_repeats", line),
                f"expected at least repeats ({spec.repeats}: every candidate gets that many rounds), "
                f"got {spec.max_repeats}",
            )
        return spec

    def simulate(self, v: Any, f: str, line: int | None) -> SimulateSpec:
        return SimulateSpec(
            **self.fields(
                v,
                f,
                line,
                {
                    "scenario": self.name,
                    "time_scale": self.pos,
                    "seed": lambda x, p, ln: self.int_(x, p, ln, 0),
                    "near_ties": self.optional(lambda x, p, ln: self.num(x, p, ln, 0, 1)),
                },
            )
        )

    def confidence(self, v: Any, f: str, line: int | None) -> float:
        return self.num(v, f, line, 0, 1, lo_open=True, hi_open=True)

    def storage(self, v: Any, f: str, line: int | None) -> str:
        if isinstance(v, str) and "://" in v:
            return v
        raise self.expected(f, line, "an Optuna storage URL like sqlite:///studies/x.db or postgresql://host/db", v)

    # -- the whole file ---------------------------------------------------------------------------------

    def space(self, doc: Any) -> Space | None:
        if doc is None:
            raise self.error(
                "", None, "the file is empty; expected a mapping with name, server, drafters, search and benchmark"
            )
        top = self.mapping(doc, "", getattr(doc, "line", 1), _TOP_KEYS)
        for key in top:
            if key not in _TOP_KEYS:
                self.errors.append(self.unknown_key(key, "", _key_line(top, key, None), _TOP_KEYS))
        for key, what in (
            ("name", "a study name"),
            ("server", "a server mapping"),
            ("drafters", "a list of drafters"),
            ("benchmark", "a benchmark mapping"),
        ):
            if key not in top:
                self.errors.append(self.error(key, None, f"missing; expected {what}"))

        def section(key: str, fn: _Validator, default: Any = None) -> Any:
            if key not in top:
                return default
            return self.attempt(lambda: fn(top[key], key, _key_line(top, key, None)), default)

        name = section("name", self.name)
        storage = section("storage", self.optional(self.storage))
        server = section("server", self.server)
        drafters = section("drafters", self.drafters)
        backend = server.backend if server is not None else None
        names = tuple(d.name for d in drafters) if drafters is not None else None
        search = section(
            "search", lambda v, f, ln: self.search(v, f, ln, backend, names), SearchSpec(drafters=names or ())
        )
        benchmark = section("benchmark", self.benchmark)
        pruning = section("pruning", self.pruning, PruningSpec())
        budget = section("budget", self.budget, BudgetSpec())
        verdict = section("verdict", self.verdict, VerdictSpec())
        simulate = section("simulate", self.optional(self.simulate))
        if self.errors:
            return None
        return Space(
            name=name,
            server=server,
            drafters=drafters,
            search=search,
            benchmark=benchmark,
            pruning=pruning,
            budget=budget,
            verdict=verdict,
            simulate=simulate,
            storage=storage,
            path=self.path,
        )


class _Recorded(SpaceError):
    """Raised after errors were already recorded, to abandon a value without recording anything more."""

    def __init__(self) -> None:
        super().__init__("(already recorded)")


def _fmt_num(x: float | None) -> str:
    if x is None:
        return ""
    if isinstance(x, float) and x.is_integer():
        return str(int(x)) if abs(x) < 1e15 else repr(x)
    return str(x) if not isinstance(x, int) or x.bit_length() <= 128 else "a very large integer"


def _flow(items: list[str]) -> str:
    """A YAML flow list of strings, quoting the items YAML would not read back as strings."""

    def plain(item: str) -> bool:
        try:
            return isinstance(yaml.safe_load(item), str) and "," not in item and item == item.strip()
        except yaml.YAMLError:
            return False

    return "[" + ", ".join(item if plain(item) else json.dumps(item) for item in items) + "]"


def _load(path: str | os.PathLike[str]) -> tuple[Space | None, list[SpaceError]]:
    """(the space, []) or (None, every error in file order). Errors without a line (missing top-level keys) and
    errors in a prompts file come last. An unreadable file or invalid YAML gives one error."""
    shown = os.fspath(path)
    try:
        doc = _parse_yaml(_read_text(Path(shown), shown), shown)
    except SpaceError as e:
        return None, [e]
    reader = _Reader(shown, Path(shown).resolve().parent)
    space = reader.attempt(lambda: reader.space(doc))
    errors = [e for e in reader.errors if not isinstance(e, _Recorded)]
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

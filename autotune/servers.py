"""The servers autotune knows, as the space file sees them: knobs (``KnobDomain``), speculative methods (``Method``),
drafter algorithms and flags autotune sets itself. A server's backend module is imported the first time its facts are
asked for (``server_class``): this module imports no other module of autotune, so the space layer reads the facts
without importing the backends.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol


@dataclass(frozen=True)
class KnobDomain:
    """The values a knob takes in a space file: ``kind`` ``"int"``, ``"float"``, ``"str"`` or ``"any"`` (any plain
    scalar), between ``low`` and ``high`` inclusive (None: unbounded). The space validator checks values and ranges
    against it; the backend's own rules (``resolve``) come on top."""

    kind: str = "any"
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("int", "float", "str", "any"):
            raise ValueError(f"kind must be int, float, str or any but got {self.kind!r}")


@dataclass(frozen=True)
class Method:
    """One way of speculating a backend offers.

    ``name``: the key in ``search.methods``; ``label``: how reports name it ("EAGLE-3", "n-gram");
    ``needs_drafter``: the method runs a checkpoint from the space's ``drafters`` (``drafter_kind`` says which: "an
    EAGLE head", "a small draft model"); ``knobs``: the knobs ``search.methods.NAME`` may search, with their domains;
    ``defaults``: the server's own value of each knob (what a launch without the flag runs); ``adaptive``: the
    engine's runtime controller (compared in reports with the tuned static config it competes with); ``since``:
    the first server version that has the method (None: every version autotune targets); ``knob_since``: the same
    per knob; ``adapts``: the static method an adaptive method without a drafter adapts (SGLang's adaptive MTP:
    ``mtp``)."""

    name: str
    label: str
    needs_drafter: bool
    knobs: Mapping[str, KnobDomain] = field(default_factory=dict)
    defaults: Mapping[str, float | str] = field(default_factory=dict)
    adaptive: bool = False
    since: str | None = None
    knob_since: Mapping[str, str] = field(default_factory=dict)
    drafter_kind: str = "a drafter"
    #: what the version note says when ``since`` was assumed rather than read from the server's source
    since_note: str = ""
    #: an adaptive method without a drafter: the static method it adapts (a report compares the two)
    adapts: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.defaults) - set(self.knobs))
        if unknown:
            raise ValueError(f"method {self.name}: defaults for unknown knobs {unknown}")


def version_lacks(version: str | None, since: str | None) -> bool:
    """Whether server ``version`` predates ``since`` (False when either is unknown)."""
    if not version or not since:
        return False
    a, b = _numbers(version), _numbers(since)
    return bool(a and b and a < b)


def _numbers(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)``: the leading numeric components."""
    out: list[int] = []
    for piece in version.strip().lstrip("vVb").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        out.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(out)


class ServerFacts(Protocol):
    """What the space layer reads of a server (a ``Backend`` subclass provides it)."""

    name: ClassVar[str]
    knob_domains: ClassVar[Mapping[str, KnobDomain]]
    methods: ClassVar[Mapping[str, Method]]
    drafter_algorithms: ClassVar[tuple[str, ...]]

    @classmethod
    def level_flag_problems(cls, extra_args: tuple[str, ...], top: int) -> list[str]: ...

    @classmethod
    def sets_flag(cls, arg: str) -> bool: ...


#: name -> (module, class name), or the class itself once registered by ``register_backend``
_BACKENDS: dict[str, tuple[str, str] | type[ServerFacts]] = {
    "sglang": ("autotune.backends.sglang", "SGLangBackend"),
    "llamacpp": ("autotune.backends.llamacpp", "LlamaCppBackend"),
    "vllm": ("autotune.backends.vllm", "VLLMBackend"),
}
#: the backend of a space file that names none (``server.backend``)
DEFAULT_BACKEND = "sglang"


def register_backend(name: str, cls: type[ServerFacts]) -> None:
    """Add backend ``name`` (a ``Backend`` subclass whose ``name`` is ``name``); ValueError when the name is taken.
    Its knob names must not be another backend's (the space file's ``search`` keys are per backend)."""
    if name in _BACKENDS:
        raise ValueError(f"backend {name!r} is already registered")
    if cls.name != name:
        raise ValueError(f"backend class {cls.__name__} has name {cls.name!r}, not {name!r}")
    taken = set(knob_domains()) & set(cls.knob_domains)
    if taken:
        raise ValueError(f"backend {name!r} declares knobs other backends have: {sorted(taken)}")
    _BACKENDS[name] = cls


def unregister_backend(name: str) -> None:
    """Remove a backend added by ``register_backend`` (KeyError for an unknown name; the built-in ones stay)."""
    if not isinstance(_BACKENDS[name], type):
        raise ValueError(f"backend {name!r} is built in")
    del _BACKENDS[name]


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def server_class(name: str) -> type[ServerFacts]:
    """The class of server ``name``, its backend (KeyError for an unknown name)."""
    entry = _BACKENDS[name]
    if isinstance(entry, type):
        return entry
    module, cls = entry
    facts: type[ServerFacts] = getattr(importlib.import_module(module), cls)
    return facts


def knob_domains(name: str | None = None) -> dict[str, KnobDomain]:
    """The searchable knobs of backend ``name`` and the values each takes, in the backend's order; with None,
    every backend's (knob names are unique across backends)."""
    names = backend_names() if name is None else (name,)
    out: dict[str, KnobDomain] = {}
    for n in names:
        out.update(server_class(n).knob_domains)
    return out


def method_catalogue(name: str | None) -> Mapping[str, Method]:
    """Backend ``name``'s speculative methods (``Backend.methods``); empty for None or a backend without any."""
    return server_class(name).methods if name else {}  # a mapping that may look up more than it lists


def drafter_algorithms(name: str | None = None) -> tuple[str, ...]:
    """The algorithms a drafter of backend ``name``'s spaces may be forced to; with None, every backend's."""
    names = backend_names() if name is None else (name,)
    out: list[str] = []
    for n in names:
        out += [a for a in server_class(n).drafter_algorithms if a not in out]
    return tuple(out)

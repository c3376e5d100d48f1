"""Which server backends exist, and where each one lives. Adding a server is one module plus one line here (or a
call to ``register_backend``, e.g. from a test or a plugin).

A backend module is imported the first time it is asked for: the space validator reads each backend's knob
domains and managed flags through here, and the backend modules use the space's types, so importing them at
module level here would make a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from autotune.backends.base import Backend, KnobDomain
    from autotune.backends.methods import Method

__all__ = [
    "DEFAULT_BACKEND",
    "backend_class",
    "backend_names",
    "drafter_algorithms",
    "get_backend",
    "knob_domains",
    "register_backend",
    "unregister_backend",
]

#: name -> (module, class name), or the class itself once registered by ``register_backend``
_BACKENDS: dict[str, tuple[str, str] | type[Backend]] = {
    "sglang": ("autotune.backends.sglang", "SGLangBackend"),
    "llamacpp": ("autotune.backends.llamacpp", "LlamaCppBackend"),
    "vllm": ("autotune.backends.vllm", "VLLMBackend"),
}
#: the backend of a space file that names none (``server.backend``)
DEFAULT_BACKEND = "sglang"


def register_backend(name: str, cls: type[Backend]) -> None:
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


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name`` (KeyError for an unknown name)."""
    entry = _BACKENDS[name]
    if isinstance(entry, type):
        return entry
    module, cls = entry
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str) -> Backend:
    """A new instance of backend ``name`` with its defaults (KeyError for an unknown name)."""
    return backend_class(name)()


def knob_domains(name: str | None = None) -> dict[str, KnobDomain]:
    """The searchable knobs of backend ``name`` and the values each takes, in the backend's order; with None,
    every backend's (knob names are unique across backends)."""
    names = backend_names() if name is None else (name,)
    out: dict[str, KnobDomain] = {}
    for n in names:
        out.update(backend_class(n).knob_domains)
    return out


def method_catalogue(name: str | None) -> Mapping[str, Method]:
    """Backend ``name``'s speculative methods (``Backend.methods``); empty for None or a backend without any."""
    return backend_class(name).methods if name else {}  # a mapping that may look up more than it lists


def drafter_algorithms(name: str | None = None) -> tuple[str, ...]:
    """The algorithms a drafter of backend ``name``'s spaces may be forced to; with None, every backend's."""
    names = backend_names() if name is None else (name,)
    out: list[str] = []
    for n in names:
        out += [a for a in backend_class(n).drafter_algorithms if a not in out]
    return tuple(out)

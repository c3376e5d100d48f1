"""Which server backends exist, and where each one lives. Adding a server is one module plus one line here.

A backend module is imported the first time it is asked for: the space validator reads each backend's knob
domains and managed flags through here, and the backend modules use the space's types, so importing them at
module level here would make a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.backends.base import Backend, KnobDomain

__all__ = ["backend_class", "backend_names", "get_backend", "knob_domains"]

_BACKENDS = {
    "sglang": ("autotune.backends.sglang", "SGLangBackend"),
    "llamacpp": ("autotune.backends.llamacpp", "LlamaCppBackend"),
    "vllm": ("autotune.backends.vllm", "VLLMBackend"),
}


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name`` (KeyError for an unknown name)."""
    module, cls = _BACKENDS[name]
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

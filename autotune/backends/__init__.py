"""Server backends: the ``Backend`` ABC (``base``), one module per server, and the registry of their names."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import Backend, KnobDomain
from autotune.backends.openai_stream import ChunkParser
from autotune.backends.registry import (
    DEFAULT_BACKEND,
    backend_class,
    backend_names,
    get_backend,
    knob_domains,
    register_backend,
    unregister_backend,
)

__all__ = [
    "DEFAULT_BACKEND",
    "KNOBS",
    "Backend",
    "ChunkParser",
    "KnobDomain",
    "backend_class",
    "backend_names",
    "get_backend",
    "knob_domains",
    "register_backend",
    "unregister_backend",
]


def __getattr__(name: str) -> Any:
    # KNOBS (knob names per backend) is read from the backend classes on first use: importing their modules here
    # would import autotune.space, whose validator imports this package
    if name == "KNOBS":
        return {n: backend_class(n).knob_names for n in backend_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

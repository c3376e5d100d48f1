"""Server backends: the ``Backend`` ABC (``base``), one module per server, and the registry of their names."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import Backend, ChunkParser, KnobDomain
from autotune.backends.registry import backend_class, backend_names, get_backend, knob_domains

__all__ = [
    "KNOBS",
    "Backend",
    "ChunkParser",
    "KnobDomain",
    "backend_class",
    "backend_names",
    "get_backend",
    "knob_domains",
]


def __getattr__(name: str) -> Any:
    # KNOBS (knob names per backend) is read from the backend classes on first use: importing their modules here
    # would import autotune.space, whose validator imports this package
    if name == "KNOBS":
        knobs: dict[str, tuple[str, ...]] = {n: backend_class(n).knob_names for n in backend_names()}
        globals()["KNOBS"] = knobs
        return knobs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

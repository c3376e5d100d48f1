"""Progress events: what the study tells its listener (the live view, logs, benchmark timers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    """Progress for live views and logs; the loop never depends on who listens.

    Kinds: ``trial-start`` (``config``: its label), ``launched`` (``startup_s``), ``prompt`` (``index``, ``of``,
    ``tok_per_s``, ``accept_length``), ``trial-end`` (``state``, ``reason``, ``tok_per_s``, ``speedup``, ``budget``:
    it used a place in the budget, ``duplicate``, ``not_launched``: the launch gate kept it from a start,
    ``seeded``; once per trial, the last thing it does), ``confirm-start``, ``confirm-measure``, ``verdict``,
    ``note`` (``message``)."""

    kind: str
    trial: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[Event], None]


def quiet(_: Event) -> None:
    return None

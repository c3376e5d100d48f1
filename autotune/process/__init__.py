"""Real server processes behind the ``Runner`` seam: ``runner`` launches and measures them (``ProcessRunner``,
``ProcessSession``), ``server`` starts, waits for and stops exactly what was started (``ServerProcess``) and reaps
what a SIGKILLed orchestrator left behind (``PidRecord``, ``reap_leftovers``).

Both names load on first use: the CLI's signal handler imports ``autotune.process.server`` in every command, and
an in-process study never needs the runner's HTTP client (httpx: ~0.1 CPU-s of a process)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.process.runner import ProcessRunner
    from autotune.process.server import reap_leftovers

__all__ = ["ProcessRunner", "reap_leftovers"]


def __getattr__(name: str) -> Any:
    if name == "ProcessRunner":
        from autotune.process.runner import ProcessRunner

        return ProcessRunner
    if name == "reap_leftovers":
        from autotune.process.server import reap_leftovers

        return reap_leftovers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

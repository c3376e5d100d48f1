"""Real server processes behind the ``Runner`` seam: ``runner`` launches and measures them (``ProcessRunner``,
``ProcessSession``), ``server`` starts, waits for and stops exactly what was started (``ServerProcess``) and reaps
what a SIGKILLed orchestrator left behind (``PidRecord``, ``reap_leftovers``)."""

from autotune.process.runner import ProcessRunner
from autotune.process.server import reap_leftovers

__all__ = ["ProcessRunner", "reap_leftovers"]

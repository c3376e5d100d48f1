"""One library function per CLI command, each returning what ``autotune.cli`` renders (the CLI parses the flags,
makes one call here, renders the result and picks the exit code).

- ``context``: ``CommandOptions`` (a command's typed options), ``Context`` (built from them once), ``reap``
  (leftover servers of ours), ``preflight`` (ports)
- ``study``: ``validate``, ``run_study``, ``run_worker``, ``run_confirm``, ``load_report``
- ``measure``: ``bench``, ``reverify`` (with its ``ReverifyOptions``)
- ``deploy``: ``export``, ``dashboard``
"""

from autotune.commands.context import CommandOptions, Context, Note, preflight, reap
from autotune.commands.deploy import ExportResult, dashboard, deploy_space, export, recommended_command
from autotune.commands.measure import BenchResult, ReverifyOptions, bench, parse_value, reverify
from autotune.commands.study import (
    StudyResult,
    WorkerResult,
    load_report,
    run_confirm,
    run_study,
    run_worker,
    validate,
)

__all__ = [
    "BenchResult",
    "CommandOptions",
    "Context",
    "ExportResult",
    "Note",
    "ReverifyOptions",
    "StudyResult",
    "WorkerResult",
    "bench",
    "dashboard",
    "deploy_space",
    "export",
    "load_report",
    "parse_value",
    "preflight",
    "reap",
    "recommended_command",
    "reverify",
    "run_confirm",
    "run_study",
    "run_worker",
    "validate",
]

"""Trial -> deployment: the recommended config (or a chosen trial) as a launch command, server args as YAML/JSON, an
env file, a docker-compose service or a Kubernetes Deployment, each stamped with the same provenance, which
``autotune reverify`` reads back. ``autotune.export_bundle`` gathers what is exported, ``autotune.export_formats``
renders it; this module exports and writes. Secret-looking env values never appear in an export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._io import atomic_write_all, output_problem
from autotune.backends.base import Backend
from autotune.export_bundle import Options, bundle
from autotune.export_formats import FORMATS, _server_formats, fitting_formats, fmt_command, format_problem
from autotune.space import Space
from autotune.study.result import StudyResult


@dataclass(frozen=True)
class Exported:
    """An export: its text and the files a launch reads, to be written beside it (``write``)."""

    text: str
    files: dict[str, str]


def export(
    space: Space,
    backend: Backend,
    result: StudyResult,
    fmt: str,
    *,
    trial: int | None = None,
    options: Options | None = None,
    read_space: Space | None = None,
    schedule: Mapping[str, Any] | None = None,
) -> Exported:
    """The export in format ``fmt`` and its files. ``schedule`` (``autotune.schedule.build``): every format
    launches it (``Backend.schedule_launch``), the text formats with its table after their comment block; its
    static config is the recommended one, or when the baseline is recommended the config of its first level with
    speculation on. Another server's format translates the study (``Backend.portable`` / ``translate``).
    ``result``: the study's (``autotune.study.result``). ValueError: the format does not fit."""
    problem = format_problem(backend, fmt)
    if problem:
        raise ValueError(problem)
    owner = _server_formats().get(fmt)
    server = owner() if owner is not None and not isinstance(backend, owner) else None
    if schedule is not None and trial is None and not (result.recommended.config or {}).get("drafter"):
        on = [x for x in schedule["levels"] if x.get("draft")]
        trial = on[0]["trial"] if on else None
    try:
        b = bundle(space, backend, result, trial=trial, read_space=read_space, schedule=schedule, server=server)
    except ValueError as e:
        if server is None:
            raise
        here = backend.display_name or backend.name
        raise ValueError(
            f"--format {fmt}: no faithful translation of this {here} study to {server.display_name}: {e}; "
            f"formats that fit: {', '.join(f for f in fitting_formats(backend) if f != fmt)}"
        ) from None
    text = FORMATS.get(fmt, fmt_command)(b, options or Options())
    if schedule is not None and fmt not in ("json", "yaml"):
        from autotune import schedule as schedule_

        # the schedule's table after the comment block, before what runs
        table = ["# " + line for line in schedule_.render_text(schedule).splitlines()]
        lines = text.splitlines(keepends=True)
        at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
        text = "".join([*lines[:at], *(line + "\n" for line in table), *lines[at:]])
    return Exported(text, dict(b.launch.get("files", {})))


def write(path: Path, text: str, files_: dict[str, str]) -> list[Path]:
    """The export to ``path`` and each of its files beside it, all or none (``atomic_write_all``); returns the files'
    paths. ValueError (nothing written) when one of them cannot be written there."""
    beside = {path.parent / name: content for name, content in files_.items()}
    for target in (path, *beside):
        problem = output_problem(target)
        if problem:
            raise ValueError(f"{target}: {problem}")
    try:
        atomic_write_all({path: text, **beside})
    except OSError as e:
        raise ValueError(f"{e.filename or path}: {e.strerror or e}") from None
    return list(beside)

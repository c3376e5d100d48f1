"""Trial -> deployment: the recommended config (or a chosen trial) as a launch command, server args as YAML/JSON, an
env file, a docker-compose service or a Kubernetes Deployment, each stamped with its provenance.

``bundle`` gathers everything (pure over the study's result, ``autotune.study.result.StudyResult``, apart from
probing the server for flag spellings and reading checkpoint fingerprints); one function per format turns it into
text (``FORMATS``: adding a format is one entry). A server adds its own format (``Backend.export_format``: its
launch command); a format fits a study of its own server, and another server's only as a faithful translation
(``Backend.portable`` -> ``Backend.translate``), else the study's formats are named (``fitting_formats``). With load
levels every format launches the schedule (``Backend.schedule_launch``). The files a launch reads
(``Backend.files``, a schedule's) are named in every format (beside a script, mounted in a container) and written
beside the export by ``autotune export -o`` (``write``). In a container or pod the server listens on
``CONTAINER_HOST``. Every format carries the same ``provenance`` (YAML/JSON: a key; compose: ``x-autotune``;
Kubernetes: the annotation ``autotune/provenance``; command and env file: a ``# autotune-provenance: {json}`` line),
which is what ``autotune reverify`` reads back (``read_provenance``). Secret-looking env values never appear: the
command and compose file take them from the deploying shell, the env file leaves them to be set, Kubernetes reads a
Secret.

The bundle and provenance live in ``autotune.export_bundle``, the formats in ``autotune.export_formats``; this
module exports and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._io import atomic_write_all, output_problem
from autotune.backends.base import Backend
from autotune.export_bundle import Options, bundle, choose
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
    return Exported(text, dict(b["launch"].get("files", {})))


def render(
    space: Space,
    backend: Backend,
    result: StudyResult,
    fmt: str,
    *,
    trial: int | None = None,
    options: Options | None = None,
    read_space: Space | None = None,
) -> str:
    """The export's text in format ``fmt`` (``export``)."""
    return export(space, backend, result, fmt, trial=trial, options=options, read_space=read_space).text


def files(space: Space, backend: Backend, result: StudyResult, *, trial: int | None = None) -> dict[str, str]:
    """The files the exported config's server reads at launch (``Backend.files``): name -> text."""
    return backend.files(choose(result, trial).config, space)


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


__all__ = [
    "Exported",
    "export",
    "files",
    "render",
    "write",
]

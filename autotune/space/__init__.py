"""Space files: one YAML file describes the server, the drafters, the knobs and the benchmark.

- ``model``: the validated, typed form every other module uses (frozen dataclasses, ``Space`` at the top);
- ``loader``: reading YAML defensively with the line of every key (``MAX_BYTES``, no aliases, no Python tags);
- ``checker``: generic validators that collect every error with its field path and line, and the wording of values
  in their messages;
- ``validate``: the space file's schema (``SpaceReader`` with its ``search`` and ``benchmark`` sections);
  ``load_space`` reads and validates a file, raising a ``SpaceError`` that names the file, the line, the field path
  and what was expected.

``docs/space-reference.md`` documents every key.
"""

from __future__ import annotations

from autotune.redact import redact_env
from autotune.space.loader import MAX_BYTES
from autotune.space.model import (
    BenchmarkSpec,
    BudgetSpec,
    Choices,
    DrafterSpec,
    FloatRange,
    IntRange,
    MethodSpec,
    ObjectiveSpec,
    ParamSpec,
    Prompt,
    PruningSpec,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    SloSpec,
    Space,
    VerdictSpec,
)
from autotune.space.validate import load_space, space_errors

__all__ = [
    "MAX_BYTES",
    "BenchmarkSpec",
    "BudgetSpec",
    "Choices",
    "DrafterSpec",
    "FloatRange",
    "IntRange",
    "MethodSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "Prompt",
    "PruningSpec",
    "SearchSpec",
    "ServerSpec",
    "SimulateSpec",
    "SloSpec",
    "Space",
    "VerdictSpec",
    "load_space",
    "redact_env",
    "space_errors",
]

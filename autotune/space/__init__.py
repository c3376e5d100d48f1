"""Space files: one YAML file describes the server, the drafters, the knobs and the benchmark.

``model`` holds the validated, typed form every other module uses (``Space`` at the top); ``loader`` reads YAML
defensively with the line of every key; ``checker`` holds generic validators that collect every error with its field
path and line; ``validate`` is the space file's schema: ``load_space`` reads and validates a file, raising a
``SpaceError`` that names the file, the line, the field path and what was expected. ``docs/space-reference.md``
documents every key.
"""

from __future__ import annotations

from autotune.space.model import (
    BenchmarkSpec,
    BudgetSpec,
    Choices,
    DrafterSpec,
    FloatRange,
    IntRange,
    ParamSpec,
    Prompt,
    SearchSpec,
    ServerSpec,
    SimulateSpec,
    Space,
    VerdictSpec,
)
from autotune.space.validate import load_space

__all__ = [
    "BenchmarkSpec",
    "BudgetSpec",
    "Choices",
    "DrafterSpec",
    "FloatRange",
    "IntRange",
    "ParamSpec",
    "Prompt",
    "SearchSpec",
    "ServerSpec",
    "SimulateSpec",
    "Space",
    "VerdictSpec",
    "load_space",
]

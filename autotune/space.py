"""Space files: one YAML file describes the server, the drafters, the knobs and the benchmark.

The dataclasses below are the validated, typed form every other module uses. ``load_space`` reads and
validates a file; every error is a ``SpaceError`` naming the file, the line, the field path and what was
expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import SpaceError


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    step: int = 1
    log: bool = False

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class Choices:
    values: tuple[Any, ...]


ParamSpec = IntRange | FloatRange | Choices


@dataclass(frozen=True)
class ServerSpec:
    backend: str = "sglang"  # sglang | llamacpp | vllm
    model_path: str = ""
    version: str | None = None  # server version targeted (flag spelling); None = probe or newest known
    launcher: tuple[str, ...] = ()  # argv prefix overriding the backend's default (e.g. a venv's python)
    host: str = "127.0.0.1"
    port: int = 30000
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 600.0
    port_busy: str = "fail"  # fail | wait | next
    port_wait_s: float = 60.0


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    path: str
    algorithm: str | None = None  # forced algorithm; None = derived from the checkpoint's config.json


@dataclass(frozen=True)
class SearchSpec:
    drafters: tuple[str, ...] = ()  # names from ``drafters``; default all
    cuda_graph: tuple[bool, ...] = (True,)
    knobs: Mapping[str, ParamSpec] = field(default_factory=dict)  # backend knob name -> range/choices


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    category: str | None = None  # code, math, chat, summarization, creative (used by the simulator)


@dataclass(frozen=True)
class BenchmarkSpec:
    prompts: tuple[Prompt, ...] = ()
    max_tokens: int = 1024
    temperature: float = 0.0
    warmup_requests: int = 1
    api: str = "completions"  # completions | chat
    retries: int = 2  # per request, for HTTP errors and truncated streams


@dataclass(frozen=True)
class PruningSpec:
    enabled: bool = True
    confidence: float = 0.95
    min_prompts: int = 2
    zero_accept_max: float = 1.1  # acceptance length at or below this after the first prompt: drafter not engaged


@dataclass(frozen=True)
class BudgetSpec:
    n_trials: int = 30
    timeout_s: float | None = None


@dataclass(frozen=True)
class VerdictSpec:
    min_gain: float = 0.02
    confirm_top: int = 2
    repeats: int = 3
    confidence: float = 0.95
    lossless_min_prefix: float = 0.9  # a trial whose output matches the baseline's for less than this fraction is flagged


@dataclass(frozen=True)
class SimulateSpec:
    scenario: str = "kimi-k25-rtxpro6000"
    time_scale: float = 50.0
    seed: int = 0


@dataclass(frozen=True)
class Space:
    name: str
    server: ServerSpec
    drafters: tuple[DrafterSpec, ...]
    search: SearchSpec
    benchmark: BenchmarkSpec
    pruning: PruningSpec = field(default_factory=PruningSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    verdict: VerdictSpec = field(default_factory=VerdictSpec)
    simulate: SimulateSpec | None = None
    storage: str | None = None
    path: str | None = None  # the file it was loaded from

    def drafter(self, name: str) -> DrafterSpec:
        for d in self.drafters:
            if d.name == name:
                return d
        raise KeyError(name)


def load_space(path: str) -> Space:
    """Read and validate a space file. Raises SpaceError."""
    raise SpaceError("space loading is not written yet", path=path)

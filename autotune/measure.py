"""Measuring one config at the seam: launch -> warm-up -> the prompts in order -> close, whatever happens.

``measure_config`` is the whole of it (confirmation rounds, ``autotune bench``, the benchmark scripts); the study's
trial, which checks the server between launch and warm-up and prunes between prompts, uses ``run_prompts`` on a
session it launched itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from autotune.config import LaunchInfo, PromptResult, TrialConfig, summarize
from autotune.runner import Runner, Session
from autotune.space import Space

#: called after each prompt with its index, its result and the results so far (itself included); may raise to stop
OnPrompt = Callable[[int, PromptResult, list[PromptResult]], None]


@dataclass(frozen=True)
class Measurement:
    info: LaunchInfo
    results: list[PromptResult]

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.results)

    @property
    def tok_per_s(self) -> float:
        return self.summary["tok_per_s"]


@contextlib.contextmanager
def started(runner: Runner, config: TrialConfig) -> Iterator[Session]:
    """A server for ``config``, stopped when the block ends (LaunchError when it does not start)."""
    session = runner.launch(config)
    try:
        yield session
    finally:
        session.close()


def run_prompts(session: Session, n: int, *, on_prompt: OnPrompt | None = None) -> list[PromptResult]:
    """The warm-up requests, then prompts ``0..n-1`` measured in order."""
    session.warmup()
    results: list[PromptResult] = []
    for i in range(n):
        r = session.run_prompt(i)
        results.append(r)
        if on_prompt is not None:
            on_prompt(i, r, results)
    return results


def measure_config(
    runner: Runner, config: TrialConfig, space: Space, *, on_prompt: OnPrompt | None = None
) -> Measurement:
    """Launch ``config``, warm up, measure every prompt of ``space``, stop the server."""
    with started(runner, config) as session:
        results = run_prompts(session, len(space.benchmark.prompts), on_prompt=on_prompt)
        return Measurement(session.info, results)

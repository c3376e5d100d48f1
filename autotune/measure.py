"""Measuring one config at the seam: launch -> warm-up -> the prompts in order -> close, whatever happens.

``measure_config`` is the whole of it (``autotune bench``, the benchmark scripts; ``measure_fresh`` adds fresh starts
when one fails: confirmation rounds, ``autotune reverify``); the study's
trial, which checks the server between launch and warm-up and prunes between prompts, uses ``run_prompts`` on a
session it launched itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from autotune import warmup as warm
from autotune.config import LaunchInfo, LevelResult, PromptResult, TrialConfig, summarize
from autotune.errors import BenchmarkError, LaunchError, StartsFailed, Unstable, crash_line, is_crash, server_seconds
from autotune.objective import Objective
from autotune.seam import Runner, Session
from autotune.space import Space
from autotune.warmup import WarmUp

#: called after each prompt with its index, its result and the results so far (itself included); may raise to stop
OnPrompt = Callable[[int, PromptResult, list[PromptResult]], None]


#: called after each load level beyond 1 with its result and the levels so far (itself included); may raise to stop
OnLevel = Callable[[LevelResult, list[LevelResult]], None]


@dataclass(frozen=True)
class Measurement:
    info: LaunchInfo
    results: list[PromptResult]
    levels: tuple[LevelResult, ...] = ()  # with load levels: every level (level 1 from ``results``)
    objective: Objective = Objective()
    #: the untimed passes of the prompts before the timed ones (``autotune.warmup``)
    warmup: WarmUp = WarmUp()
    #: the server seconds of the starts that failed before this one (``measure_fresh``)
    failed_s: tuple[float, ...] = ()

    def pass_tok_per_s(self) -> list[list[float]]:
        """The per-prompt tok/s as ``StartRecord`` keeps them (one list: the start's pass of the prompts)."""
        return [[r.tok_per_s for r in self.results]]

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.results)

    @property
    def tok_per_s(self) -> float:
        """The start's objective (``autotune.objective.Objective.value``): tok/s over the prompt set, or over the load
        levels or the prompt categories by their weights."""
        return self.objective.value(self.results, self.levels)


def run_levels(
    session: Session,
    space: Space,
    results: list[PromptResult],
    *,
    on_level: OnLevel | None = None,
    done: Sequence[LevelResult] = (),
) -> list[LevelResult]:
    """Level 1 from the prompts measured one after another (``results``), then each higher level of
    ``benchmark.concurrency`` in order on the same server (``Session.run_level``: its own warm-up first); the
    levels in ``done`` (measured on an earlier start of the same config) are kept, not measured again."""
    levels = [LevelResult.sequential(results), *done]
    have = {lv.level for lv in done}
    for c in space.benchmark.concurrency:
        if c <= 1 or c in have:
            continue
        lv = session.run_level(c)
        levels.append(lv)
        if on_level is not None:
            on_level(lv, levels)
    return levels


@contextlib.contextmanager
def started(runner: Runner, config: TrialConfig) -> Iterator[Session]:
    """A server for ``config``, stopped when the block ends (LaunchError when it does not start)."""
    session = runner.launch(config)
    try:
        yield session
    finally:
        session.close()


def warmup_rule(space: Space) -> warm.Rule:
    """How a start of ``space``'s server warms up: ``benchmark.warmup_passes``, else the server's default."""
    from autotune.backends import backend_class  # the backends import this module's callers' types

    server = backend_class(space.server.backend)  # class attributes: no backend made per trial
    return warm.resolve(space.benchmark.warmup_passes, server.warmup_passes, server.display_name or server.name)


def warm_up(
    session: Session, n: int, rule: warm.Rule | None, first: Callable[[PromptResult], None] | None = None
) -> WarmUp:
    """The session's warm-up requests, then untimed passes of prompts ``0..n-1`` as ``rule`` says (none: the
    requests only); ``first`` sees the first pass's first answer (the drafter alarm: a drafter that is not engaged
    is caught after one request, not after a pass), and may raise to stop."""
    session.warmup()
    if rule is None or n == 0:
        return WarmUp()
    passes: list[tuple[float, ...]] = []
    seconds = 0.0
    while not rule.done(passes):
        results = []
        for i in range(n):
            results.append(session.run_prompt(i))
            if first is not None and not passes and i == 0:
                first(results[0])
        passes.append(tuple(r.tok_per_s for r in results))
        seconds += sum(r.seconds for r in results)
    return WarmUp(tuple(passes), seconds)


def run_prompts(
    session: Session,
    n: int,
    *,
    on_prompt: OnPrompt | None = None,
    done: Sequence[PromptResult] = (),
    warmup: warm.Rule | None = None,
    on_warmup: Callable[[WarmUp], None] | None = None,
    check_first: Callable[[PromptResult], None] | None = None,
) -> list[PromptResult]:
    """The warm-up (``warm_up``: the requests, then ``warmup``'s untimed passes, ``check_first`` on their first
    answer; ``on_warmup`` gets what they measured), then prompts ``0..n-1`` measured in order (those in ``done``,
    measured on an earlier start of the same config, are kept)."""
    w = warm_up(session, n, warmup, check_first)
    if on_warmup is not None:
        on_warmup(w)
    results: list[PromptResult] = list(done)
    for i in range(len(done), n):
        r = session.run_prompt(i)
        results.append(r)
        if on_prompt is not None:
            on_prompt(i, r, results)
    return results


def measure_config(
    runner: Runner, config: TrialConfig, space: Space, *, on_prompt: OnPrompt | None = None
) -> Measurement:
    """Launch ``config``, warm up (``warmup_rule``), measure every prompt of ``space``, stop the server."""
    warmed: list[WarmUp] = []
    timed: list[float] = []  # each timed prompt's and level's seconds so far: a failed start's cost

    def prompt_done(i: int, r: PromptResult, results: list[PromptResult]) -> None:
        timed.append(r.seconds)
        if on_prompt is not None:
            on_prompt(i, r, results)

    with started(runner, config) as session:
        try:
            n = len(space.benchmark.prompts)
            warm = warmup_rule(space)
            results = run_prompts(session, n, on_prompt=prompt_done, warmup=warm, on_warmup=warmed.append)
            levels: list[LevelResult] = []
            if space.benchmark.loaded:
                levels = run_levels(session, space, results, on_level=lambda lv, _: timed.append(lv.seconds))
        except BenchmarkError as e:  # the start is lost, and what it ran with it
            e.server_s = (session.info.startup_s or 0.0) + sum(w.seconds for w in warmed) + sum(timed)
            raise
        return Measurement(session.info, results, tuple(levels), Objective.of(space), warmup=warmed[0])


#: fresh starts one measurement gets when its server fails: the first and one more (confirmation and ``reverify``
#: retry any failure, a trial only a crash: ``autotune.study.trial``)
FRESH_STARTS = 2

_T = TypeVar("_T")


def with_fresh_starts(
    attempt: Callable[[], _T],
    *,
    retried: Callable[[Exception], bool],
    on_retry: Callable[[Exception, list[Exception]], None],
    give_up: Callable[[list[Exception]], Exception],
) -> _T:
    """``attempt()``, and a fresh one while it fails with a server failure (``LaunchError``, ``BenchmarkError``) that
    ``retried`` accepts, up to ``FRESH_STARTS`` in all: ``on_retry`` hears of each failure but the last (and the
    failures so far), ``give_up``'s error is raised from the last. The one retry of a failed start."""
    failures: list[Exception] = []
    while True:
        try:
            return attempt()
        except (LaunchError, BenchmarkError) as e:
            if not retried(e):
                raise
            failures.append(e)
            if len(failures) >= FRESH_STARTS:
                raise give_up(failures) from e
            on_retry(e, failures)


def failure_line(e: Exception) -> str:
    return crash_line(e) if is_crash(e) else f"{getattr(e, 'kind', '')}: {str(e)[:200]}"


def measure_fresh(
    runner: Runner, config: TrialConfig, space: Space, *, on_retry: Callable[[str], None] | None = None
) -> Measurement:
    """``measure_config`` with ``with_fresh_starts`` on any failure (``on_retry`` gets the failure's line); then
    ``StartsFailed`` with every start's line, ``unstable`` when each crashed. A server that served before may fail
    on a later start (llama.cpp's CUDA build: "an illegal instruction was encountered")."""
    lost: list[float] = []  # each failed start's server seconds

    def retry(e: Exception, _: list[Exception]) -> None:
        lost.append(server_seconds(e))
        if on_retry is not None:
            on_retry(failure_line(e))

    def give_up(failures: list[Exception]) -> StartsFailed:
        kind = Unstable.kind if all(map(is_crash, failures)) else getattr(failures[-1], "kind", "")
        seconds = tuple(server_seconds(e) for e in failures)
        return StartsFailed(" | ".join(map(failure_line, failures)), kind, seconds)

    m = with_fresh_starts(
        lambda: measure_config(runner, config, space), retried=lambda e: True, on_retry=retry, give_up=give_up
    )
    return dataclasses.replace(m, failed_s=tuple(lost)) if lost else m

"""Shared starts in the search: the runner keeps a server for trials differing only in per-request knobs
(``autotune.process.sharing``), and the search measures a running launch group's siblings before the next start.

- ``searching(ctx)``: around the search phase (``Orchestrator.search``), turns the runner's shared starts on when
  the space allows it (``search.share_starts``, default true) and its backend declares per-request knobs
  (``Backend.per_request``), and off afterwards (the kept server is stopped; confirmation's rounds are fresh starts
  by design). Runners that start no processes (the simulator's in-process model) share nothing.
- ``before_trial(ctx, surrogate)``: called by the search loop before each trial, under the study lock. It announces
  what the runner noted (sharing turned off: the server ignored the values) and, while a shared server is kept and
  nothing else is queued, queues one sibling of its launch group (``PerRequest.siblings``: same drafter, type and
  launch, other per-request values) not measured or queued yet: the one with the highest upper bound (mean + sd of
  log tok/s) of the search's surrogate when that bound reaches the best measured config, else none; without a
  surrogate yet (few trials), the sibling farthest from the group's measured values. At most
  ``SIBLINGS_PER_START`` siblings per start, so that the search still explores other launches. In the
  surrogate's part of the search a sibling worth a trial goes before the surrogate's own pick (it costs no start).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from optuna.trial import TrialState

from autotune import records
from autotune.config import EffectiveConfig, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.study.events import Event

if TYPE_CHECKING:
    from autotune.process.sharing import StartSharing
    from autotune.study.context import StudyContext
    from autotune.surrogate import Model

#: siblings queued per kept start (the start then serves up to this many trials more than the one that started it)
SIBLINGS_PER_START = 2
#: the ``seeded`` attr of a queued sibling
SEEDED_SIBLING = "shared start"


@runtime_checkable
class SharesStarts(Protocol):
    """A runner that can keep a server for the next trial (``autotune.process.ProcessRunner``)."""

    sharing: StartSharing | None

    def share_starts(self, on: bool) -> StartSharing | None: ...


def sharing_of(ctx: StudyContext) -> StartSharing | None:
    runner = ctx.runner
    return runner.sharing if isinstance(runner, SharesStarts) else None


@contextlib.contextmanager
def searching(ctx: StudyContext) -> Iterator[StartSharing | None]:
    """Shared starts on for the block (when the runner, backend and space allow it), off after it."""
    runner = ctx.runner
    if not isinstance(runner, SharesStarts) or not ctx.space.search.share_starts:
        yield None
        return
    state = runner.share_starts(True)
    if state is not None:
        knobs = ", ".join(state.per.knobs)
        ctx.emit(Event("note", data={"message": f"shared starts: trials differing only in {knobs} share a server"}))
    try:
        yield state
    finally:
        runner.share_starts(False)
        if state is not None:
            _announce(ctx, state)


def _announce(ctx: StudyContext, state: StartSharing) -> None:
    for message in state.take_notes():
        ctx.emit(Event("note", data={"message": message}))


def before_trial(ctx: StudyContext, surrogate: Callable[[StudyContext], Model | None]) -> bool:
    """Announce the runner's notes; queue a sibling of the kept start's launch group (see the module doc).
    True when a sibling was queued. The search's surrogate picks ask here first (``search.search``): a sibling
    worth a trial costs no start, so it goes before the pick, which waits for the next start."""
    state = sharing_of(ctx)
    if state is None:
        return False
    _announce(ctx, state)
    kept = state.kept
    if not state.on or kept is None or kept.trials > SIBLINGS_PER_START:
        return False
    if records.trials(ctx.study, (TrialState.WAITING,)):
        return False  # something else is queued (baselines, the design, the surrogate's pick): it goes first
    pick = choose_sibling(ctx, state.per.siblings(kept.launch), surrogate(ctx))
    if pick is None:
        return False
    records.enqueue_speculative(ctx.study, ctx.backend.params(pick, ctx.space), seeded=SEEDED_SIBLING)
    return True


def choose_sibling(ctx: StudyContext, siblings: list[EffectiveConfig], model: Model | None) -> EffectiveConfig | None:
    """The sibling to measure next on the kept server (None: none is worth a trial)."""
    done = _taken(ctx)
    group_keys = {s.key() for s in siblings}
    fresh = [s for s in siblings if s.key() not in done]
    if not fresh:
        return None
    if model is not None:
        mean, sd = model.predict(fresh)
        ucb = [float(m + s) for m, s in zip(mean, sd, strict=True)]
        best = max(range(len(fresh)), key=lambda i: ucb[i])
        measured = [v for _, v in _observed(ctx)]
        if measured and ucb[best] < max(measured):
            return None
        return fresh[best]
    measured_group = [TrialConfig.from_dict(e) for e in _effective_dicts(ctx) if _key(e) in group_keys]
    if not measured_group:
        return fresh[len(fresh) // 2]
    return max(fresh, key=lambda c: min(_distance(c, m) for m in measured_group))


def _distance(a: TrialConfig, b: TrialConfig) -> float:
    """Distance of two configs' numeric knobs (each relative to the larger magnitude)."""
    total = 0.0
    for name, va in a.knob_dict.items():
        vb = b.knob(name)
        if isinstance(va, bool) or not isinstance(va, int | float) or not isinstance(vb, int | float):
            continue
        scale = max(abs(float(va)), abs(float(vb)), 1e-9)
        total += ((float(va) - float(vb)) / scale) ** 2
    return math.sqrt(total)


def _effective_dicts(ctx: StudyContext) -> list[dict[str, Any]]:
    out = []
    for t in records.trials(ctx.study):
        eff = records.TrialRecord(t).effective
        if eff:
            out.append(eff)
    return out


def _key(effective: dict[str, Any]) -> str:
    try:
        return TrialConfig.from_dict(effective).key()
    except (KeyError, TypeError, ValueError):
        return ""


def _observed(ctx: StudyContext) -> list[tuple[str, float]]:
    """(config key, log tok/s) of the measured speculative trials."""
    out = []
    for t in records.trials(ctx.study, (TrialState.COMPLETE,)):
        r = records.TrialRecord(t)
        if r.effective and t.value and t.value > 0 and not r.is_baseline:
            out.append((_key(r.effective), math.log(float(t.value))))
    return out


def _taken(ctx: StudyContext) -> set[str]:
    """Config keys measured, running or queued (queued ones by their params, resolved)."""
    keys = {_key(e) for e in _effective_dicts(ctx)}
    for t in records.trials(ctx.study, (TrialState.WAITING,)):
        with contextlib.suppress(InfeasibleConfig, KeyError, TypeError, ValueError):
            keys.add(ctx.backend.resolve(_from_params(ctx, t.params), ctx.space).key())
    return keys


def _from_params(ctx: StudyContext, params: dict[str, Any]) -> TrialConfig:
    """A queued trial's config from its params (``Backend.suggest`` on a fixed trial)."""
    import optuna

    return ctx.backend.suggest(optuna.trial.FixedTrial(params), ctx.space)


__all__ = ["SEEDED_SIBLING", "SIBLINGS_PER_START", "SharesStarts", "before_trial", "choose_sibling", "searching"]

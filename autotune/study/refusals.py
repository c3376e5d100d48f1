"""Configs not launched because of what earlier trials showed (``refuse_known_failures``, called by
``trial.Objective`` before every launch): each refusal is a FAIL or PRUNED trial with its reason and no server start.

- the same server config failed twice (one retry covers transient faults), or crashed on every start (unstable);
- a family (drafter and method, under one CUDA-graph setting) that never started: ``NEVER_STARTED`` launches of
  it failed at start-up and none started; or never served: ``NEVER_SERVED`` of its configs crashed on every start
  (unstable) and none of them was measured to the end. An incompatible drafter checkpoint fails every config of
  it, and each failed start holds the GPUs until it fails: on the simulated Kimi server a drafter that never gets
  healthy took 30 of a study's 45 starts, at the 30-minute start-up limit each (docs/benchmarks.md, failed-starts);
- the drafter was not engaged (where the server's not-engaged is per drafter);
- a tree at least as large ran out of memory.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import TrialConfig
from autotune.errors import DrafterNotEngaged, ServerOOM, Unstable
from autotune.records import TrialRecord
from autotune.study.outcomes import Infeasible, NotLaunched

#: failed starts of one family, none of which started, after which its configs are not launched
NEVER_STARTED = 3
#: configs of one family that crashed on every start (unstable), none of the family measured to the end, after
#: which its configs are not launched (each of them cost two starts)
NEVER_SERVED = 2


def family(cfg: TrialConfig) -> tuple[Any, ...]:
    """What fails to start together: the drafter, the method, the CUDA-graph setting (graph capture can fail where
    the same drafter starts without graphs)."""
    return cfg.drafter, cfg.knob(records.PARAM_METHOD), bool(cfg.cuda_graph)


def _family_of(r: TrialRecord) -> tuple[Any, ...]:
    return r.drafter, r.method, bool(r.cuda_graph)


def _numbers(trials: list[FrozenTrial]) -> str:
    return ", ".join(str(t.number) for t in trials)


def never_started(family_trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of one family's launched trials (``family_trials``), those that failed to start, when there are
    ``NEVER_STARTED`` of them and no start of the family ever got healthy; else []."""
    failed = []
    for t in family_trials:
        r = TrialRecord(t)
        if r.measured or r.startup_s is not None:
            return []
        if r.fail_kind in records.START_FAILURES:
            failed.append(t)
    return failed if len(failed) >= NEVER_STARTED else []


def never_served(family_trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of one family's launched trials, those whose server crashed on every start (a drafter that kills the server
    at its first drafts), when there are ``NEVER_SERVED`` of them and none of the family was measured to the end;
    else []."""
    shaky = []
    for t in family_trials:
        r = TrialRecord(t)
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and r.measured:
            return []
        if r.fail_kind == Unstable.kind:
            shaky.append(t)
    return shaky if len(shaky) >= NEVER_SERVED else []


def family_trials(study: optuna.Study, cfg: TrialConfig) -> list[FrozenTrial]:
    """The launched speculative trials of ``cfg``'s family that ended (no duplicates, no refusals)."""
    out = []
    for t in records.trials(study, (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        r = TrialRecord(t)
        if not (r.is_baseline or r.is_duplicate or r.not_launched) and _family_of(r) == family(cfg):
            out.append(t)
    return out


def refuse_known_failures(study: optuna.Study, eff: TrialConfig, backend: Any, size_knob: str | None) -> None:
    """Raise the refusal for ``eff`` when earlier trials showed how it would end (see the module)."""
    crashed = records.failed_twice(study, eff.key())
    if crashed:
        raise NotLaunched(
            f"the same server config failed in trials {crashed[0].number} and {crashed[1].number}; not launched again",
            TrialRecord(crashed[-1]).fail_kind,
        )
    shaky = records.unstable(study, eff.key())
    if shaky is not None:
        raise NotLaunched(
            f"the same server config crashed on every start in trial {shaky.number} (unstable); not launched again",
            Unstable.kind,
        )
    if eff.is_baseline:
        return
    graphs = "on" if eff.cuda_graph else "off"
    kin = family_trials(study, eff)
    dead = never_started(kin)
    if dead:
        kind = TrialRecord(dead[-1]).fail_kind
        raise NotLaunched(
            f"drafter {eff.drafter!r} (CUDA graphs {graphs}) never started: trials {_numbers(dead)} failed at "
            f"start-up ({kind}) and none of its configs started; not launched again",
            kind,
        )
    unserved = never_served(kin)
    if unserved:
        raise NotLaunched(
            f"drafter {eff.drafter!r} (CUDA graphs {graphs}) never served: its servers crashed on every start in "
            f"trials {_numbers(unserved)} (unstable) and none of its configs was measured; not launched again",
            Unstable.kind,
        )
    if not backend.not_engaged_is_per_drafter:
        return
    bad = records.disengaged(study, eff)
    if bad is not None:
        raise DrafterNotEngaged(
            f"drafter {eff.drafter!r} was not engaged in trial {bad.number} "
            f"({TrialRecord(bad).fail_reason or ''}); not launched again"
        )
    oom = records.predicted_oom(study, eff, size_knob)
    if oom is not None:
        oom_size = records.config_size(TrialRecord(oom).effective_config(), size_knob)
        size = records.config_size(eff, size_knob)
        raise Infeasible(
            f"trial {oom.number} ran out of memory at size {oom_size}; size {size} is at least as large",
            kind=ServerOOM.kind,
        )

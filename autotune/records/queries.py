"""Queries over a study's trials (baseline of a setting, duplicates, failed twice, drafter not engaged, predicted OOM,
launch failures in a row, exclusions, budget, level rows) and enqueueing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless
from autotune.config import TrialConfig
from autotune.errors import DrafterNotEngaged, ServerOOM, Unstable
from autotune.records.attrs import confirmation
from autotune.records.schema import (
    CLAIMED,
    CONFIG_MISMATCH,
    COUNTED,
    FAIL_REASON,
    INTERRUPTED,
    PARAM_CUDA_GRAPH,
    PARAM_METHOD,
    REQUEUED_FROM,
    RETRIED_FAILURES,
    ROLE,
    ROLE_BASELINE,
    ROLE_SPECULATIVE,
    SEEDED,
    START_FAILURES,
)
from autotune.records.store import TrialRecord


def enqueue_baseline(study: optuna.Study, cuda_graph: bool) -> None:
    study.enqueue_trial({PARAM_CUDA_GRAPH: cuda_graph}, user_attrs={ROLE: ROLE_BASELINE})


def enqueue_speculative(
    study: optuna.Study, params: dict[str, Any], *, seeded: str | None = None, requeued_from: int | None = None
) -> None:
    attrs: dict[str, Any] = {ROLE: ROLE_SPECULATIVE}
    if seeded is not None:
        attrs[SEEDED] = seeded
    if requeued_from is not None:
        attrs[REQUEUED_FROM] = requeued_from
    study.enqueue_trial(params, user_attrs=attrs)


def enqueue_retry(study: optuna.Study, lost: FrozenTrial, system_attrs: dict[str, Any]) -> None:
    """Queue the config of a lost trial again (``autotune.study.storage.RetryLostTrial``): its params, the attrs
    it was enqueued with (role, seeded) and ``requeued_from``, not what the lost attempt recorded."""
    attrs = {k: lost.user_attrs[k] for k in (ROLE, SEEDED) if k in lost.user_attrs}
    attrs[REQUEUED_FROM] = lost.number
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=lost.params,
            distributions=lost.distributions,
            user_attrs=attrs,
            system_attrs=system_attrs,
        )
    )


# ---------------------------------------------------------------------------------------------- queries


#: where ``reading`` keeps its snapshot on the study object
_SNAPSHOT = "_autotune_snapshot"


def trials(study: optuna.Study, states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
    """The study's trials (of ``states``), from the snapshot of an enclosing ``reading`` if there is one."""
    snapshot: list[FrozenTrial] | None = study.__dict__.get(_SNAPSHOT)
    if snapshot is None:
        return study.get_trials(deepcopy=False, states=states)
    return snapshot if states is None else [t for t in snapshot if t.state in states]


@contextlib.contextmanager
def reading(study: optuna.Study) -> Iterator[None]:
    """Within: every ``trials(study)`` reads one snapshot of the study, taken on entry. For a decision that only
    reads (the refusal rules before a start, the settled check between trials): each read of an RDB study
    re-reads the running trials with all their attrs (Optuna's cache), ~24 reads a trial were a third of the
    loop's CPU. Not for a wait on other workers (it would never see them change). Nested: the outer snapshot."""
    if study.__dict__.get(_SNAPSHOT) is not None:
        yield
        return
    study.__dict__[_SNAPSHOT] = study.get_trials(deepcopy=False)
    try:
        yield
    finally:
        del study.__dict__[_SNAPSHOT]


def is_baseline_trial(t: FrozenTrial) -> bool:
    """Baseline trials are enqueued with user attr role=baseline (the sampler never proposes them)."""
    return TrialRecord(t).is_baseline


def find_baseline(study: optuna.Study, cuda_graph: object) -> FrozenTrial | None:
    """The measured baseline trial (not a duplicate) for a CUDA-graph setting, or None. A finished trial never
    changes, so one found is kept on the study object (the search asks several times a trial)."""
    found: dict[object, FrozenTrial] = study.__dict__.setdefault("_autotune_baselines", {})
    if cuda_graph in found:
        return found[cuda_graph]
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline and r.cuda_graph == cuda_graph and not r.is_duplicate and t.intermediate_values:
            found[cuda_graph] = t
            return t
    return None


def is_lost(t: FrozenTrial) -> bool:
    """A trial whose worker was lost (SIGKILL, node down) mid-trial: FAIL without an outcome of ours, failed by
    Optuna's heartbeat check (``autotune.study.storage.RetryLostTrial`` queues its config once more)."""
    return t.state == TrialState.FAIL and FAIL_REASON not in t.user_attrs and not t.user_attrs.get(INTERRUPTED)


def is_counted(t: FrozenTrial) -> bool:
    """Whether a trial (of a counted state) used the budget: not interrupted, not a duplicate, not lost."""
    r = TrialRecord(t)
    return not r.interrupted and not r.is_duplicate and not is_lost(t)


def counted_trials(study: optuna.Study, *, running: bool = False) -> int:
    """Trials that used the budget: measured, failed or infeasible; not duplicates nor interrupted ones."""
    states = COUNTED + ((TrialState.RUNNING,) if running else ())
    return sum(1 for t in trials(study, states) if is_counted(t))


def used_budget(study: optuna.Study, among: list[FrozenTrial] | None = None) -> tuple[int, int]:
    """(finished trials that used the budget, running trials of any worker that claimed a place in it and may
    still use it): what a worker weighs before it starts a trial."""
    done = running = 0
    for t in trials(study) if among is None else among:
        if t.state in COUNTED and is_counted(t):
            done += 1
        elif t.state == TrialState.RUNNING and t.user_attrs.get(CLAIMED) and is_counted(t):
            running += 1
    return done, running


def running_same_config(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    """A trial of another worker that is measuring the server config ``key`` right now (not a duplicate)."""
    for t in trials(study, (TrialState.RUNNING,)):
        r = TrialRecord(t)
        if t.number != number and r.config_key == key and not r.is_duplicate:
            return t
    return None


def is_measured_speculative(t: FrozenTrial) -> bool:
    """A speculative start that measured prompts (not a duplicate)."""
    r = TrialRecord(t)
    return not r.is_baseline and not r.is_duplicate and r.measured


def find_duplicate(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    """A measured trial (COMPLETE or PRUNED, not itself a duplicate) of the server config ``key``."""
    for t in trials(study, (TrialState.COMPLETE, TrialState.PRUNED)):
        r = TrialRecord(t)
        if t.number != number and r.config_key == key and not r.is_duplicate and r.measured:
            return t
    return None


def failed_twice(study: optuna.Study, key: str) -> list[FrozenTrial]:
    """Two launched trials of this server config that failed (crash, hang, benchmark failure), else []."""
    failed = [
        t
        for t in trials(study, (TrialState.FAIL,))
        if (r := TrialRecord(t)).config_key == key
        and r.fail_kind in RETRIED_FAILURES
        and not r.interrupted
        and not r.not_launched
    ]
    return failed[:2] if len(failed) >= 2 else []


def unstable(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A trial whose server config ``key`` crashed on every start it got (``fail_kind`` ``unstable``)."""
    for t in trials(study, (TrialState.FAIL,)):
        r = TrialRecord(t)
        if r.config_key == key and r.fail_kind == Unstable.kind:
            return t
    return None


def disengaged(study: optuna.Study, config: TrialConfig, among: list[FrozenTrial] | None = None) -> FrozenTrial | None:
    """A failed trial whose drafter (``config``'s) was found not engaged."""
    for t in trials(study, (TrialState.FAIL,)) if among is None else among:
        r = TrialRecord(t)
        if (
            t.state == TrialState.FAIL
            and r.fail_kind == DrafterNotEngaged.kind
            and r.drafter == config.drafter
            and r.method == config.knob(PARAM_METHOD)
        ):
            return t
    return None


def config_size(config: TrialConfig, size_knob: str | None) -> int | None:
    """The config's tree size (its backend's ``size_knob``), None without one."""
    v = config.knob(size_knob) if size_knob else None
    return None if v is None else int(v)


def predicted_oom(
    study: optuna.Study, config: TrialConfig, size_knob: str | None, among: list[FrozenTrial] | None = None
) -> FrozenTrial | None:
    """A trial that ran out of memory with the same drafter and CUDA-graph setting at a size <= ``config``'s."""
    size = config_size(config, size_knob)
    if size is None:
        return None
    for t in trials(study, (TrialState.PRUNED,)) if among is None else among:
        r = TrialRecord(t)
        if t.state != TrialState.PRUNED or r.fail_kind != ServerOOM.kind:
            continue
        eff = TrialConfig.from_dict(r.effective or {})
        other = config_size(eff, size_knob)
        if (
            eff.drafter == config.drafter
            and eff.cuda_graph == config.cuda_graph
            and other is not None
            and size >= other
        ):
            return t
    return None


def consecutive_launch_failures(study: optuna.Study) -> int:
    """Servers that failed to start in a row since the last measured one. Once a speculative config has run, a
    failing one is that config's problem (the study goes on): then 0."""
    counted = trials(study, COUNTED)
    if any((r := TrialRecord(t)).measured and not r.is_baseline for t in counted):
        return 0
    n = 0
    for t in sorted(counted, key=lambda t: t.number, reverse=True):
        r = TrialRecord(t)
        if r.not_launched:
            continue
        if r.fail_kind in START_FAILURES:
            n += 1
        elif r.measured:
            break
    return n


def find_exclusions(study: optuna.Study) -> list[dict[str, Any]]:
    """Speculative configs the verdict cannot weigh, each with its reason: answers that diverge from the
    baseline's where the baseline was confident (lossy), drafters that were not engaged, server configs that
    failed and were never measured. A verdict with exclusions says so, and "the baseline wins" becomes
    inconclusive: an excluded config might have won."""
    everything = sorted(trials(study), key=lambda t: t.number)
    measured = {
        TrialRecord(t).config_key
        for t in everything
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and TrialRecord(t).measured
    }
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for t in everything:
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or r.interrupted:
            continue
        cfg = r.shown_config
        if t.state == TrialState.COMPLETE and r.lossy:
            out.append(
                {
                    "trial": t.number,
                    "kind": "lossy",
                    "config": cfg,
                    "speedup": r.speedup,
                    "reason": "output differs from the baseline's where the baseline was confident: "
                    + lossless.summary_line(r.lossless or {}),  # lossy: it has one
                }
            )
        elif t.state == TrialState.FAIL and r.fail_kind == DrafterNotEngaged.kind:
            key = f"drafter:{r.drafter}"
            if key not in seen:
                seen.add(key)
                out.append({"trial": t.number, "kind": "not-engaged", "config": cfg, "reason": r.fail_reason})
        elif (
            t.state == TrialState.FAIL
            and r.fail_kind in (*RETRIED_FAILURES, CONFIG_MISMATCH)
            and r.config_key not in measured
        ):
            key = f"config:{r.config_key}"
            if key not in seen:
                seen.add(key)
                out.append(
                    {"trial": t.number, "kind": "failed", "config": cfg, "reason": f"{r.fail_kind}: {r.fail_reason}"}
                )
    return out


def level_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """Measured speculative trials with load levels, as ``autotune.schedule.build`` reads them."""
    out = []
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or not r.levels:
            continue
        out.append({"trial": t.number, "config": r.effective, "levels": r.levels, "lossy": r.lossy})
    return out


def confirmed_level_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The confirmed candidates' per-level speedups (interval points) as ``autotune.schedule.build`` reads them;
    [] without a per-level confirmation. Latency limits broken in the search still count."""
    conf = confirmation(study)
    per = (conf.level_results if conf is not None else None) or {}
    out = []
    for number, ivs in per.items():
        t = next((x for x in trials(study) if x.number == int(number)), None)
        if t is None:
            continue
        r = TrialRecord(t)
        broken = {x.level: list(x.slo_broken) for x in r.level_results()}
        levels = [
            {"level": int(c), "speedup": iv["point"], "slo_broken": broken.get(int(c)) or []}
            for c, iv in ivs.items()
            if iv
        ]
        out.append({"trial": t.number, "config": r.effective, "levels": levels, "lossy": r.lossy})
    return out


def outcome_reason(t: FrozenTrial) -> str | None:
    """Why a trial ended as it did, in words, for every table and note (None: a COMPLETE trial, nothing to say).

    Every PRUNED and FAIL trial gets one, also those without an outcome of ours: a trial failed by another run or
    by Optuna's heartbeat check (``is_lost``), and one a launch error outside the trial's steps left FAIL."""
    r = TrialRecord(t)
    if r.is_duplicate:
        return f"same server config as trial {r.duplicate_of}: its measurement is copied"
    if t.state == TrialState.COMPLETE:
        return None
    if t.state == TrialState.WAITING:
        return "queued, not started yet"
    if t.state == TrialState.RUNNING:
        return "running"
    if r.interrupted:
        why = r.fail_reason or "the run stopped during this trial"
        return f"interrupted: {why} (not counted in the budget)"
    if t.state == TrialState.PRUNED:
        if r.not_worth_a_start:
            return f"not launched: {r.not_worth_a_start.get('reason')}"
        if r.infeasible:
            kind = "out of memory" if r.fail_kind == ServerOOM.kind else "infeasible"
            return f"{kind}: {r.infeasible}"
        if r.prune_reason:
            against = f" (trial {r.pruned_against})" if r.pruned_against is not None else ""
            who = "lost to the leader" if r.prune_rule == "leader" else "lost to the baseline"
            return f"{who}{against}: {r.prune_reason}"
        return "pruned (no reason recorded)"
    if r.fail_reason or r.fail_kind:
        head = r.fail_kind or "failed"
        return f"{head}: {r.fail_reason}" if r.fail_reason else head
    return (
        "no outcome recorded: the process running it stopped (killed, lost, or an error outside the trial's "
        "steps) before the trial settled; it does not use the budget"
    )

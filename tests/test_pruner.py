"""autotune.pruner: the baseline rule and the leader rule on an in-memory study (no I/O)."""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune import records
from autotune.objective import Objective
from autotune.pruner import BaselinePruner, leader_of

DIST = {
    records.PARAM_DRAFTER: CategoricalDistribution(["none", "d"]),
    records.PARAM_CUDA_GRAPH: CategoricalDistribution([True, False]),
}
PROMPT_SHAPE = [1.0, 1.3, 0.8, 1.1, 0.9]  # prompts differ; a config scales them (plus a little noise)


def _values(scale: float, wobble: float = 0.08) -> dict[int, float]:
    return {i: 100 * scale * s * (1 + wobble * math.sin(3 * i + scale)) for i, s in enumerate(PROMPT_SHAPE)}


def _add(
    study: optuna.Study,
    scale: float,
    *,
    baseline: bool = False,
    attrs: dict[str, Any] | None = None,
    state: TrialState = TrialState.COMPLETE,
    steps: int | None = None,
) -> int:
    vals = _values(scale)
    if steps is not None:
        vals = {k: v for k, v in vals.items() if k < steps}
    role = records.ROLE_BASELINE if baseline else records.ROLE_SPECULATIVE
    t = create_trial(
        state=state,
        value=sum(vals.values()) / len(vals) if state == TrialState.COMPLETE else None,
        params={records.PARAM_DRAFTER: "none" if baseline else "d", records.PARAM_CUDA_GRAPH: True},
        distributions=DIST,
        user_attrs={records.ROLE: role, records.MEASURED: True, **(attrs or {})},
        intermediate_values=vals,
    )
    study.add_trial(t)
    return len(study.trials) - 1


def _running(study: optuna.Study, ratios: list[float]) -> optuna.trial.FrozenTrial:
    """A RUNNING speculative trial whose prompt i ran at ``ratios[i]`` x the baseline's."""
    study.enqueue_trial({records.PARAM_DRAFTER: "d", records.PARAM_CUDA_GRAPH: True})
    t = study.ask(DIST)
    base = _values(1.0)
    for i, r in enumerate(ratios):
        t.report(base[i] * r, i)
    return study._storage.get_trial(t._trial_id)  # noqa: SLF001 - the frozen view the pruner gets


def _study(*scales: float) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    _add(study, 1.0, baseline=True)
    for s in scales:
        _add(study, s)
    return study


def test_baseline_rule_prunes_a_clear_loser_after_two_prompts_with_the_pool() -> None:
    study = _study(1.4, 1.5, 0.9, 1.2)  # four measured trials make the pool
    t = _running(study, [0.55, 0.75])
    d = BaselinePruner().decide(study, t)
    assert d is not None and d.prune and d.rule == "baseline" and d.n == 2
    without_pool = BaselinePruner(pooled=False).decide(study, t)
    assert without_pool is not None and not without_pool.prune  # t(0.95, 1): two prompts alone are not enough


def test_the_prior_alone_prunes_a_very_slow_first_trial_after_two_prompts() -> None:
    study = _study()  # nothing measured yet but the baseline
    d = BaselinePruner().decide(study, _running(study, [0.55, 0.65]))
    assert d is not None and d.prune


def test_leader_rule_prunes_what_beats_the_baseline_but_not_the_leader() -> None:
    study = _study(1.1, 1.6, 1.2, 1.3)
    leader = leader_of(study.get_trials(deepcopy=False))
    assert leader is not None and leader.number == 2
    t = _running(study, [1.05, 1.12])
    d = BaselinePruner().decide(study, t)
    assert d is not None and d.prune and d.rule == "leader" and d.against == 2
    off = BaselinePruner(leader=False).decide(study, t)
    assert off is not None and not off.prune and off.rule == "baseline"


def test_a_contender_level_with_the_leader_runs_on() -> None:
    study = _study(1.1, 1.6, 1.2, 1.3)
    d = BaselinePruner().decide(study, _running(study, [1.55, 1.6]))
    assert d is not None and not d.prune


def test_lossy_and_copied_trials_cannot_lead() -> None:
    study = _study(1.2)
    _add(study, 2.0, attrs={records.LOSSLESS: {"ok": False}})
    _add(study, 2.5, attrs={records.DUPLICATE_OF: 1})
    leader = leader_of(study.get_trials(deepcopy=False))
    assert leader is not None and leader.number == 1
    d = BaselinePruner().decide(study, _running(study, [1.15, 1.22]))
    assert d is not None and not d.prune  # level with the real leader (1.2), far below the lossy 2.0


def test_no_baseline_no_decision_and_disabled_never_prunes() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, 1.5)
    t = _running(study, [0.3, 0.32])
    assert BaselinePruner().decide(study, t) is None
    study = _study(1.4)
    t = _running(study, [0.3, 0.32])
    assert BaselinePruner().prune(study, t)
    assert not BaselinePruner(enabled=False).prune(study, t)


MDIST = {**DIST, records.PARAM_METHOD: CategoricalDistribution(["a", "b"])}


def _method_trial(study: optuna.Study, method: str, scale: float, *, running: bool = False) -> Any:
    """A speculative trial of ``method`` at ``scale`` x the baseline (measured, or RUNNING after two prompts)."""
    params = {records.PARAM_DRAFTER: "d", records.PARAM_CUDA_GRAPH: True, records.PARAM_METHOD: method}
    if running:
        study.enqueue_trial(params)
        t = study.ask(MDIST)
        base = _values(1.0)
        for i in range(2):
            t.report(base[i] * scale, i)
        return study._storage.get_trial(t._trial_id)  # noqa: SLF001 - the frozen view the pruner gets
    vals = _values(scale)
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=sum(vals.values()) / len(vals),
            params=params,
            distributions=MDIST,
            user_attrs={records.ROLE: records.ROLE_SPECULATIVE, records.MEASURED: True},
            intermediate_values=vals,
        )
    )
    return study.trials[-1]


def test_a_method_is_held_to_the_leader_only_on_its_own_evidence() -> None:
    """``leader_after``: a config of method b is not cut by method a's leader before b has 3 measured starts of its
    own (the trial's included); then the leader rule applies as everywhere (#46: configs of one method were pruned
    against another's leader before their method was explored)."""
    study = _study()
    for s in (2.0, 1.9, 1.95):
        _method_trial(study, "a", s)
    first = _method_trial(study, "b", 1.1, running=True)
    assert BaselinePruner().decide(study, first).prune  # without the rule: cut by method a's leader
    d = BaselinePruner(leader_after=3).decide(study, first)
    assert d is not None and not d.prune and d.rule == "baseline"
    study.tell(first.number, state=TrialState.PRUNED)
    _method_trial(study, "b", 1.05)
    third = _method_trial(study, "b", 1.1, running=True)  # b's third measured start
    d = BaselinePruner(leader_after=3).decide(study, third)
    assert d is not None and d.prune and d.rule == "leader"


def test_another_methods_leader_cuts_a_trial_only_after_every_prompt_category() -> None:
    """Against a leader of another method, a trial is held to the leader only once it measured a prompt of every
    category: one method's speed over another's differs by category (#46, landscape 32 seed 1: the EAGLE-3 configs
    truly best were pruned after two code prompts against an n-gram leader 0.81 of the best). Against a leader of
    its own method, the first prompts are enough as before."""
    study = _study()
    for s in (2.0, 1.9, 1.95):
        _method_trial(study, "a", s)
    for _ in range(2):
        _method_trial(study, "b", 1.05)
    third = _method_trial(study, "b", 1.1, running=True)  # b's third measured start, two prompts measured
    n = len(PROMPT_SHAPE)
    code_first = ("code", "code") + ("chat",) * (n - 2)
    mixed = ("code", "chat") + ("chat",) * (n - 2)
    held = BaselinePruner(leader_after=3, objective=Objective(categories=code_first)).decide(study, third)
    assert held is not None and not held.prune and held.rule == "baseline"  # no chat prompt measured yet
    cut = BaselinePruner(leader_after=3, objective=Objective(categories=mixed)).decide(study, third)
    assert cut is not None and cut.prune and cut.rule == "leader"
    own = _method_trial(study, "a", 1.1, running=True)  # the leader's own method: its first prompts suffice
    d = BaselinePruner(leader_after=3, objective=Objective(categories=code_first)).decide(study, own)
    assert d is not None and d.prune and d.rule == "leader"

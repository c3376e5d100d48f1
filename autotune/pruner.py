"""``BaselinePruner``: stop a trial once it has clearly lost, to the baseline or to the leader.

Optuna's own pruners compare a trial with the best trial (Median, Wilcoxon) by ranks or quantiles. Ours pairs a
trial prompt by prompt (``step`` = prompt index, the same prompt in every trial) with two references:

- the baseline: the non-speculative baseline measured under the same CUDA-graph setting. A config clearly slower
  than it is a loss whatever else the study finds (``rule`` ``baseline``).
- the leader: the fastest fully measured config of the study so far (baselines included; lossy trials are not
  candidates). A config clearly slower than the leader cannot be the recommendation, so the GPU time goes to
  contenders (``rule`` ``leader``).

Both are ``autotune.verdict.clearly_loses``: the baseline rule prunes once the one-sided upper confidence bound of
the paired speedup over the baseline falls below 1; the leader rule once the bound over the leader falls below
1 - ``leader_margin`` (the leader's figure is
the luckiest of many, and a config a few percent behind it may still be the optimum); in a space with
``search.methods`` only once the trial's method has ``leader_after`` measured starts of its own (the trial's
included), and against a leader of another method only once the trial has measured a prompt of every category of
the prompt set: one method's speed over another's differs by category (n-gram copies a code edit's prompt, EAGLE-3
wins open chat), so the first prompts of one category say little of the whole set (#46, landscape 32 seed 1: the
EAGLE-3 configs truly best were pruned after two code prompts against an n-gram leader 0.81 of the best). The bound
uses the study's pooled prompt-to-prompt spread (``stats.pooled_spread``: every other measured trial's per-prompt
log ratios against the same kind of reference, from a conservative prior), the trial's own where it is larger, and
the start-to-start noise. With ``objective.weights`` over prompt categories both rules use the objective's
weighted bound; with load levels the objective's bound over prompts x levels, against the baseline only
(``autotune.objective.Objective.prune``). Pruners are not stored in the storage: every
worker constructs the same one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypedDict

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from autotune.objective import Objective
from autotune.records import BASELINE_DRAFTER, TrialRecord, find_baseline, is_baseline_trial, trials
from autotune.stats import PRIOR_SPREAD, START_NOISE, Spread, log_ratios, pooled_spread
from autotune.verdict import PruneDecision

#: the baseline's drafter param (``autotune.records.BASELINE_DRAFTER``)
BASELINE = BASELINE_DRAFTER


def paired_values(trial: FrozenTrial, baseline: FrozenTrial) -> tuple[list[float], list[float]]:
    steps = sorted(s for s in trial.intermediate_values if s in baseline.intermediate_values)
    return ([trial.intermediate_values[s] for s in steps], [baseline.intermediate_values[s] for s in steps])


def _measured(trials: Sequence[FrozenTrial], exclude: int) -> list[FrozenTrial]:
    """Trials whose prompts count as evidence: measured starts (complete or pruned), not copies, not ``exclude``."""
    out = []
    for t in trials:
        if t.number == exclude or t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        r = TrialRecord(t)
        if r.is_duplicate or len(t.intermediate_values) < 2:
            continue
        out.append(t)
    return out


def _own(trials: Sequence[FrozenTrial], method: object, exclude: int) -> int:
    """How many measured starts (complete or pruned after its prompts, not copies) ``method`` has besides
    ``exclude``."""
    return sum(1 for t in _measured(trials, exclude) if TrialRecord(t).method == method)


def leader_of(trials: Sequence[FrozenTrial], exclude: int = -1) -> FrozenTrial | None:
    """The fastest fully measured trial (COMPLETE, not a copy, not lossy), baselines included; None if none."""
    best: FrozenTrial | None = None
    best_value = 0.0
    for t in trials:
        if t.number == exclude or t.state != TrialState.COMPLETE or not t.intermediate_values or not t.value:
            continue
        r = TrialRecord(t)
        if r.is_duplicate or r.lossy:
            continue
        if best is None or t.value > best_value:
            best, best_value = t, t.value
    return best


def spread_vs_baselines(study: optuna.Study, trials: Sequence[FrozenTrial], exclude: int) -> Spread | None:
    """The pooled spread of per-prompt log ratios of every other measured speculative trial over its baseline."""
    baselines: dict[object, FrozenTrial | None] = {}
    groups = []
    for t in _measured(trials, exclude):
        r = TrialRecord(t)
        if not r.is_speculative:
            continue
        if r.cuda_graph not in baselines:  # from the trials already read: no second storage read per setting
            baselines[r.cuda_graph] = next(
                (
                    b
                    for b in trials
                    if b.state == TrialState.COMPLETE
                    and TrialRecord(b).is_baseline
                    and TrialRecord(b).cuda_graph == r.cuda_graph
                    and not TrialRecord(b).is_duplicate
                    and b.intermediate_values
                ),
                None,
            )
        b = baselines[r.cuda_graph]
        if b is not None:
            groups.append(log_ratios(*paired_values(t, b)))
    return pooled_spread(groups, PRIOR_SPREAD)


def spread_vs(reference: FrozenTrial, trials: Sequence[FrozenTrial], exclude: int) -> Spread | None:
    """The pooled spread of per-prompt log ratios of every other measured trial over ``reference``."""
    groups = [
        log_ratios(*paired_values(t, reference)) for t in _measured(trials, exclude) if t.number != reference.number
    ]
    return pooled_spread(groups, PRIOR_SPREAD)


class _Opts(TypedDict):
    """The clearly-loses rule's settings, the same for both of ``prune_decision``'s references."""

    confidence: float
    min_prompts: int
    start_noise: float


class BaselinePruner(BasePruner):
    def __init__(
        self,
        confidence: float = 0.95,
        min_prompts: int = 2,
        enabled: bool = True,
        start_noise: float = START_NOISE,
        *,
        leader: bool = True,
        leader_margin: float = 0.05,
        pooled: bool = True,
        objective: Objective | None = None,
        leader_after: int = 0,
    ) -> None:
        if not 0 <= leader_margin < 1:
            raise ValueError(f"leader_margin must be in [0, 1) but got {leader_margin}")
        if start_noise < 0:
            raise ValueError(f"start_noise must be at least 0 but got {start_noise}")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1) but got {confidence}")
        if min_prompts < 1:  # an interval needs 2 prompts whatever is asked: 1 behaves as 2
            raise ValueError(f"min_prompts must be at least 1 but got {min_prompts}")
        self.confidence = confidence
        self.min_prompts = min_prompts
        self.enabled = enabled
        self.start_noise = start_noise
        self.leader = leader
        self.leader_margin = leader_margin
        self.pooled = pooled
        #: what is pruned on (``autotune.objective``): the steps, the bound, which prompts count
        self.objective = objective or Objective()
        if leader_after < 0:
            raise ValueError(f"leader_after must be at least 0 but got {leader_after}")
        #: a trial of a method (``search.methods``) is held to the leader only once its method has this many measured
        #: starts of its own, the trial's included: every method is explored on its own evidence before another's
        #: leader cuts it
        self.leader_after = int(leader_after)

    def decide(self, study: optuna.Study, trial: FrozenTrial) -> PruneDecision | None:
        """The decision with its numbers (the baseline rule's, or the leader rule's when that one prunes), or
        None when there is nothing to compare with."""
        r = TrialRecord(trial)
        if not r.is_speculative:
            return None
        baseline = find_baseline(study, r.cuda_graph)
        if baseline is None:
            return None
        obj = self.objective
        opts = _Opts(confidence=self.confidence, min_prompts=self.min_prompts, start_noise=self.start_noise)
        if not obj.leader_rule:  # load levels: the levels' bound against the baseline; no spread, no leader
            return obj.prune(trial.intermediate_values, baseline.intermediate_values, **opts)
        everything = trials(study)  # the snapshot of an enclosing ``records.reading``, if any
        spread = spread_vs_baselines(study, everything, trial.number) if self.pooled else None
        d = obj.prune(
            trial.intermediate_values, baseline.intermediate_values, spread=spread, against=baseline.number, **opts
        )
        if d.prune or not self.leader:
            return d
        if (
            self.leader_after
            and r.method is not None
            and 1 + _own(everything, r.method, trial.number) < self.leader_after
        ):
            return d
        lead = leader_of(everything, exclude=trial.number)
        if lead is None or lead.number == baseline.number:
            return d
        if (
            self.leader_after
            and r.method != TrialRecord(lead).method
            and not obj.every_category(trial.intermediate_values)
        ):
            return d
        spread = spread_vs(lead, everything, trial.number) if self.pooled else None
        # the leader's figures shrunk by the margin: pruned only when clearly more than the margin slower
        ref = {s: v * (1.0 - self.leader_margin) for s, v in lead.intermediate_values.items()}
        dl = obj.prune(trial.intermediate_values, ref, spread=spread, rule="leader", against=lead.number, **opts)
        if not dl.prune:
            return d
        ub = dl.upper_bound * (1.0 - self.leader_margin)
        return dataclasses.replace(
            dl,
            upper_bound=ub,
            reason=f"upper {self.confidence:.0%} bound of the speedup over the leader (trial {lead.number}) is "
            f"{ub:.3f} < {1 - self.leader_margin:.2f} after {dl.n} prompts",
        )

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if not self.enabled:
            return False
        d = self.decide(study, trial)
        return bool(d and d.prune)


__all__ = ["BASELINE", "BaselinePruner", "find_baseline", "is_baseline_trial", "leader_of", "paired_values"]

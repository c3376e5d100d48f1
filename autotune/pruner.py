"""``BaselinePruner``: stop a trial once it has clearly lost to the baseline.

Optuna's own pruners compare a trial with the best trial (Median, Wilcoxon). Ours compares it with the
non-speculative baseline measured under the same CUDA-graph setting, prompt by prompt (``step`` = prompt
index, the same prompt in every trial), and prunes once the one-sided upper confidence bound of the paired
speedup falls below 1. Pruners are not stored in the storage: every worker constructs the same one.
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial

from autotune import objective
from autotune.records import BASELINE_DRAFTER, PARAM_DRAFTER, TrialRecord, find_baseline, is_baseline_trial
from autotune.stats import START_NOISE, PruneDecision, prune_decision

#: the baseline's drafter param (``autotune.records.BASELINE_DRAFTER``)
BASELINE = BASELINE_DRAFTER


def paired_values(trial: FrozenTrial, baseline: FrozenTrial) -> tuple[list[float], list[float]]:
    steps = sorted(s for s in trial.intermediate_values if s in baseline.intermediate_values)
    return ([trial.intermediate_values[s] for s in steps], [baseline.intermediate_values[s] for s in steps])


class BaselinePruner(BasePruner):
    def __init__(
        self,
        confidence: float = 0.95,
        min_prompts: int = 2,
        enabled: bool = True,
        start_noise: float = START_NOISE,
        *,
        levels: tuple[int, ...] = (1,),
        weights: dict[int, float] | None = None,
        n_prompts: int = 0,
    ) -> None:
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
        #: load levels (``autotune.objective``): with more than one, steps are prompts x levels
        self.levels = tuple(levels)
        self.weights = dict(weights or {})
        self.n_prompts = int(n_prompts)

    def decide(self, study: optuna.Study, trial: FrozenTrial) -> PruneDecision | None:
        """The decision with its numbers, or None when there is nothing to compare with."""
        r = TrialRecord(trial)
        if r.is_baseline or PARAM_DRAFTER not in trial.params:
            return None
        baseline = find_baseline(study, r.cuda_graph)
        if baseline is None:
            return None
        if len(self.levels) > 1 and self.n_prompts > 0:
            return objective.prune_decision(
                trial.intermediate_values,
                baseline.intermediate_values,
                levels=self.levels,
                weights=self.weights,
                n_prompts=self.n_prompts,
                confidence=self.confidence,
                min_prompts=self.min_prompts,
                start_noise=self.start_noise,
            )
        t, b = paired_values(trial, baseline)
        return prune_decision(
            t, b, confidence=self.confidence, min_prompts=self.min_prompts, start_noise=self.start_noise
        )

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if not self.enabled:
            return False
        d = self.decide(study, trial)
        return bool(d and d.prune)


__all__ = ["BASELINE", "BaselinePruner", "find_baseline", "is_baseline_trial", "paired_values"]

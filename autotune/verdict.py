"""The verdict and the clearly-loses rule, each in one place; pure.

- ``clearly_loses``: a config clearly loses to a reference (its baseline, or the leader) when the one-sided upper
  confidence bound of its paired speedup over it, widened by the start-to-start noise, is below 1 (the leader
  rule: below 1 - margin). The pruner (``prune_decision``, ``autotune.objective.Objective.prune``), confirmation's
  eligibility (``autotune.study.confirm``) and the search-only verdict (``autotune.report``) all apply it; each
  passes its own confidence, noise and spread (``loses_on``).
- ``verdict``: a speedup interval -> ``Verdict``; with a config the verdict could not weigh (an exclusion, a prune
  against a search baseline that ran fast) never ``baseline-wins``. Confirmation (``autotune.study.race``), each
  load level (``autotune.study.levels``) and the report without confirmation (``search_verdict``) use it.

Lives beside ``stats`` rather than in ``autotune.study``: the pruner and the records import it, and importing
anything under ``autotune.study`` runs that package's ``__init__`` (the orchestrator, which imports both).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.stats import START_NOISE, Interval, Spread, log_ratios, upper_bound


class Verdict(enum.StrEnum):
    """What a study concludes (a ``str``: stored and printed as its value)."""

    SPECULATION_WINS = "speculation-wins"
    BASELINE_WINS = "baseline-wins"
    #: the best config's interval lies below ``1 + min_gain`` (and not wholly below 1): whatever the gain is, it is
    #: below the user's bar; the decision is made (deploy the baseline)
    NO_WORTHWHILE_GAIN = "no-worthwhile-gain"
    INCONCLUSIVE = "inconclusive"

    @property
    def deploys_baseline(self) -> bool:
        """The verdict tells the user to deploy the baseline (the decision is made)."""
        return self in (Verdict.BASELINE_WINS, Verdict.NO_WORTHWHILE_GAIN)


# ------------------------------------------------------------------------------------------------ clearly loses


def clearly_loses(upper: float, bar: float = 1.0) -> bool:
    """The rule on an upper confidence bound of a speedup over a reference: strictly below ``bar``."""
    return upper < bar


def loses_on(
    logs: Sequence[float], *, confidence: float, start_noise: float = START_NOISE, spread: Spread | None = None
) -> bool:
    """``clearly_loses`` on the upper bound (``stats.upper_bound``) of paired log ratios; fewer than 2: never."""
    return clearly_loses(upper_bound(logs, confidence, start_noise, spread))


@dataclass(frozen=True)
class PruneDecision:
    prune: bool
    upper_bound: float
    n: int
    reason: str
    #: which reference the trial was compared with: ``baseline`` or ``leader``
    rule: str = "baseline"
    #: the reference trial's number, when known
    against: int | None = None


def prune_decision(
    trial: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float,
    min_prompts: int,
    start_noise: float = START_NOISE,
    spread: Spread | None = None,
    rule: str = "baseline",
    against: int | None = None,
) -> PruneDecision:
    """Prune once the trial clearly loses to the reference after at least ``max(2, min_prompts)`` paired prompts.

    ``trial`` and ``baseline`` (the reference: the baseline of the same CUDA-graph setting, or the leader) are
    per-prompt tok/s for the same prompts in the same order.
    """
    logs = log_ratios(trial, baseline)
    n = len(logs)
    what = "the baseline" if rule == "baseline" else f"the leader (trial {against})" if against is not None else rule
    if n < max(2, min_prompts):
        return PruneDecision(False, math.inf, n, f"only {n} paired prompts (need {max(2, min_prompts)})", rule, against)
    ub = upper_bound(logs, confidence, start_noise, spread)
    if clearly_loses(ub):
        return PruneDecision(
            True,
            ub,
            n,
            f"upper {confidence:.0%} bound of the speedup over {what} is {ub:.3f} < 1 after {n} prompts",
            rule,
            against,
        )
    return PruneDecision(False, ub, n, f"upper bound {ub:.3f} over {what} >= 1 after {n} prompts", rule, against)


# ------------------------------------------------------------------------------------------------ the verdict


def verdict(interval: Interval | None, min_gain: float, *, unweighed: bool = False) -> Verdict:
    """speculation-wins when the interval's low end clears 1 + min_gain; baseline-wins when its high end is below
    1; no-worthwhile-gain when its high end is below 1 + min_gain (a gain, if any, under the bar); otherwise (the
    interval straddles the bar) inconclusive. No interval (nothing left to confirm) is baseline-wins.
    ``unweighed``: a config the verdict could not weigh is left (it might have won), so neither of the verdicts
    that deploy the baseline."""
    if interval is None:
        v = Verdict.BASELINE_WINS
    elif interval.low > 1.0 + min_gain:
        v = Verdict.SPECULATION_WINS
    elif interval.high < 1.0:
        v = Verdict.BASELINE_WINS
    elif interval.high < 1.0 + min_gain:
        v = Verdict.NO_WORTHWHILE_GAIN
    else:
        v = Verdict.INCONCLUSIVE
    return with_unweighed(v) if unweighed else v


def with_unweighed(v: str) -> Verdict:
    """``v`` once a config the verdict could not weigh is known to be left: a verdict that deploys the baseline
    (baseline-wins, no-worthwhile-gain) becomes inconclusive."""
    return Verdict.INCONCLUSIVE if Verdict(v).deploys_baseline else Verdict(v)


def search_verdict(lost: Iterable[bool | None], excluded: int) -> tuple[Verdict, str]:
    """The verdict without confirmation and what it rests on: baseline-wins only when every measured speculative
    trial clearly lost to its baseline (``lost``: one per trial, None without a baseline; read lazily, up to the
    first that did not) and no config was excluded."""
    if excluded:
        return verdict(None, 0.0, unweighed=True), f"search only (not confirmed); {excluded} config(s) excluded"
    seen = False
    for x in lost:
        seen = True
        if not x:
            return Verdict.INCONCLUSIVE, "search only (not confirmed)"
    if not seen:
        return verdict(None, 0.0), "search (no speculative trial survived pruning)"
    return verdict(None, 0.0), "search (every speculative trial lost to its baseline)"


def point_verdict(speedup: float | None, slo_broken: bool) -> Verdict:
    """One search start's reading of one load level, on its point estimate alone (no interval): speculation-wins
    above 1 within the latency limits, else baseline-wins."""
    return Verdict.SPECULATION_WINS if (speedup or 0) > 1.0 and not slo_broken else Verdict.BASELINE_WINS


@dataclass(frozen=True)
class ToSettle:
    """An inconclusive verdict whose pick's interval straddles the bar: how many fresh rounds of the pick
    (``trial``) against the fastest baseline would settle which side of the bar it lies on, at the spread
    confirmation measured (``sd``) and the verdict's confidence (``rounds``, None: more than ``most``), and the
    server starts those take (``confirm._to_settle``)."""

    trial: int
    speedup_ci: Interval
    bar: float
    confidence: float
    sd: float
    rounds: int | None
    most: int
    starts: int | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToSettle:
        ci = Interval.from_dict(d["speedup_ci"])
        return cls(d["trial"], ci, d["bar"], d["confidence"], d["sd"], d["rounds"], d["most"], d["starts"])

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "speedup_ci": self.speedup_ci.to_dict()}


def to_settle_text(state: ToSettle | None, gpu: dict[str, Any]) -> dict[str, object] | None:
    """What settling an inconclusive verdict would take (``confirm._to_settle``), with the GPU time of its starts at
    this study's mean confirmation start (else search start) and a line to print; None: nothing to settle."""
    if not state:
        return None
    ci, t, bar = state.speedup_ci, state.trial, state.bar
    where = f"trial {t}'s {ci.point:.3f}x [{ci.low:.3f}, {ci.high:.3f}]"
    if state.rounds is None or state.starts is None:
        return {
            **state.to_dict(),
            "gpu_s": None,
            "text": f"{where} straddles the {bar - 1:.0%} bar with its point estimate "
            f"{abs(ci.point / bar - 1):.1%} from it: more than {state.most} rounds would not settle whether it "
            f"clears it; whatever it gains is at most {ci.high - 1:.1%} (the interval's high end)",
        }
    per = [(gpu.get("confirmation_s"), gpu.get("confirmation_starts")), (gpu.get("search_s"), gpu.get("search_starts"))]
    start_s = next((s / n for s, n in per if s and n), None)
    gpu_s = None if start_s is None else state.starts * start_s
    cost = "" if gpu_s is None else f", ~{gpu_s / 3600:.1f} h of server time at this study's starts"
    return {
        **state.to_dict(),
        "gpu_s": gpu_s,
        "text": f"settling whether {where} clears the {bar - 1:.0%} bar would take about {state.rounds} fresh "
        f"rounds of it against the baseline (one look at {state.confidence:.0%}; {state.starts} server "
        f"starts{cost}), if its point estimate stays "
        f"where it is: autotune export --trial {t} -o F, then autotune reverify F --repeats {state.rounds}",
    }

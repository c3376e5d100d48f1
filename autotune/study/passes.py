"""How many passes of the prompts a confirmation start measures, from the recorded rounds (``autotune.noise``).

One pass per start in the rounds every candidate gets and in the race among candidates; in the rounds bought to
settle whether the pick clears the bar (or lies under it), the passes the noise split calls for
(``noise.passes_for``: the least GPU time for a given precision) when they settle it within the rounds left
(``race.settle_rounds``, the rounds to come at the variance those passes give, ``noise.shrink``), else the
cheapest choice that does: the rounds it would take times what a round of them costs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune import noise
from autotune.records import ConfirmationState, Round, StartRecord
from autotune.space import VerdictSpec
from autotune.stats import START_PRIOR_DF, Spread
from autotune.study import race
from autotune.study.context import StudyContext


@dataclass(frozen=True)
class Question:
    """The open question the next rounds are bought for: the pick's ``interval`` against ``bar`` after ``n``
    rounds, ``candidates`` in contention (the looks' share of the error), ``starts`` server starts a round."""

    interval: dict[str, Any]
    bar: float
    n: int
    spec: VerdictSpec
    candidates: int = 1
    starts: int = 2


def groups(rounds: Sequence[Round]) -> list[list[StartRecord]]:
    """The rounds' start records by config (each baseline setting, each candidate), rounds without records left
    out."""
    out: dict[Any, list[StartRecord]] = {}
    for r in rounds:
        if r.starts is None:
            continue
        for cg, rec in r.starts.baseline.items():
            out.setdefault(("baseline", cg), []).append(rec)
        for n, rec in r.starts.candidates.items():
            out.setdefault(("trial", n), []).append(rec)
    return list(out.values())


def costs(records: Sequence[StartRecord]) -> tuple[float, float]:
    """A start's and one pass's median seconds over ``records`` (0 without any)."""
    if not records:
        return 0.0, 0.0
    return (
        statistics.median([rec.startup_s for rec in records]),
        statistics.median([rec.seconds / max(len(rec.tok_per_s), 1) for rec in records]),
    )


def choose(
    rounds: Sequence[Round],
    *,
    most: int,
    prior: tuple[float, float] | None = None,
    question: Question | None = None,
) -> dict[str, Any]:
    """The noise split of ``rounds`` (``noise.split``), a start's and a pass's median seconds, the passes per start
    that variance alone would call for (``noise.passes_for``: ``optimum``), and the passes the next round measures:
    one without an open ``question``; with one, those variance calls for when they settle it within
    ``question.spec.max_rounds`` rounds, else the cheapest choice that does (one when none does); ``shrink`` (for
    ``race.next_round``) and the reason in words. The confirmation state's ``noise``."""
    by_config = groups(rounds)
    found = noise.split([[rec.tok_per_s for rec in g] for g in by_config])
    start_s, pass_s = costs([rec for g in by_config for rec in g])
    rule = noise.passes_for(found, start_s, pass_s, most=most, prior=prior)
    so_far = [r.passes for r in rounds]
    passes, text = 1, rule.text
    if rule.passes > 1:
        text = (
            f"{rule.head}: more passes per start would pay in rounds bought to settle the pick's question (by "
            f"variance alone {rule.passes} per start); the rounds every candidate gets and the race measure one"
        )
    if question is not None and found is not None and rule.passes > 1 and most > 1 and pass_s > 0:
        q = question
        cost: dict[int, tuple[float, int]] = {}
        for k in range(1, most + 1):
            at = race.settle_rounds(q.interval, q.bar, q.n, q.spec, q.candidates, noise.shrink(found, k, so_far, prior))
            if at is not None:
                cost[k] = ((at - q.n) * q.starts * (start_s + k * pass_s), at - q.n)
        if not cost:
            text = f"{rule.head}: no choice of passes settles the pick's question within {q.spec.max_rounds} rounds"
        else:
            # the variance-per-cost optimum where it settles the question, else the cheapest choice that does
            passes = rule.passes if rule.passes in cost else min(cost, key=lambda k: (cost[k][0], k))
            one = f"; one pass: {cost[1][1]} round(s), {cost[1][0] / 3600:.2f} h" if 1 in cost else ""
            text = (
                f"{rule.head}: {passes} pass(es) per start settle the pick's question in {cost[passes][1]} more "
                f"round(s), {cost[passes][0] / 3600:.2f} h of server time{one}"
            )
    return {
        "split": None if found is None else found.to_dict(),
        "start_s": start_s,
        "pass_s": pass_s,
        "passes": passes,
        "optimum": rule.optimum,
        # a round to come at these passes over the rounds so far, in variance (``race.next_round``'s ``shrink``)
        "shrink": noise.shrink(found, passes, so_far, prior),
        "text": text,
    }


def for_next_round(
    ctx: StudyContext,
    info: list[race.Candidate],
    state: ConfirmationState,
    prior: Spread,
    tie: float | None,
    racing: bool = False,
) -> str | None:
    """The passes of the prompts the next confirmation round's starts measure, into ``state.noise``
    (``next_passes`` with the study's spec, policies and start-to-start noise): one for a round of the race
    (``racing``) and with load levels. A change gives its reason (for a note). ``prior`` and ``tie``: the race's
    (``confirm``)."""
    now = state.noise["passes"] if state.noise else 1
    state.noise = next_passes(
        state.rounds,
        info,
        ctx.space.verdict,
        state.deploy_cuda_graph,
        frozenset(state.level_only or []),
        prior,
        tie,
        most=1 if racing or ctx.space.benchmark.loaded else ctx.policies.candidates.max_passes,
        start_noise=ctx.space.pruning.start_noise,
    )
    return state.noise["text"] if state.noise["passes"] != now else None


def next_passes(
    rounds: list[Round],
    info: list[race.Candidate],
    spec: VerdictSpec,
    deploy_cuda_graph: bool | None,
    level_only: frozenset[int],
    prior: Spread | None,
    tie: float | None,
    *,
    most: int,
    start_noise: float,
) -> dict[str, Any]:
    """``choose`` for the round after ``rounds``: with an open question once every candidate had its
    ``spec.repeats`` rounds (the pick's interval straddles ``1 + min_gain``), the space's start-to-start noise
    (``start_noise``: the sd of one start's log speedup over another's, a start's own that over sqrt 2) as a prior
    worth ``START_PRIOR_DF`` starts. One pass in the first rounds (a clear winner needs no more); ``most`` 1 for a
    round of the race and with load levels (their levels, not the prompts, are a start's time): the caller's."""
    question = None
    if len(rounds) >= spec.repeats and most > 1:
        seen = race.look(rounds, info, spec, deploy_cuda_graph, None, level_only, prior, tie)
        best = next((r for r in seen["results"] if r["trial"] == seen["best"]), None)
        iv = race.headline(best) if best is not None else None
        bar = 1.0 + spec.min_gain
        if best is not None and iv is not None and iv["low"] <= bar <= iv["high"]:
            keys = [n for n, _, _ in info]
            own = {n: cg for n, _, cg in info}.get(best["trial"])
            starts = 2 if deploy_cuda_graph in (None, own) else 3  # its baseline, and the deployable one
            question = Question(iv, bar, len(rounds), spec, race.in_contention(rounds, keys, spec), starts)
    return choose(rounds, most=most, prior=(start_noise / math.sqrt(2), START_PRIOR_DF), question=question)


__all__ = ["Question", "choose", "costs", "for_next_round", "groups", "next_passes"]

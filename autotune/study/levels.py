"""Per-level confirmation, pure over the recorded rounds: each candidate's interval at each load level, the
winner of each level and the per-level verdict ("speculation wins up to 8 streams, loses from 32").

A round with load levels also records each start's tok/s per level (``records.RoundLevels``); every start measures
every level, so these come with the objective's rounds at no extra start."""

from __future__ import annotations

import math
from typing import Any

from autotune.records import LevelIntervals, LevelVerdict, Round
from autotune.stats import Spread, pooled_spread, speedup_interval
from autotune.verdict import Verdict, verdict


def level_prior(rounds: list[Round], level: int, prior: Spread | None) -> Spread | None:
    """``prior`` (the space's start-to-start noise) raised to what the rounds show between starts of one config at
    ``level`` when that is more (``race.measured_prior`` for one level: a loaded server's noise differs from level
    to level, so each level is judged by its own starts), never lowered."""
    if prior is None:
        return None
    per_key: dict[tuple[str, Any], list[float]] = {}
    for r in rounds:
        if r.levels is None:
            continue
        for cg, lv in r.levels.baseline.items():
            if lv.get(level):
                per_key.setdefault(("b", cg), []).append(math.log(lv[level]))
        for n, lv in r.levels.candidates.items():
            if lv.get(level):
                per_key.setdefault(("c", n), []).append(math.log(lv[level]))
    return raised(prior, list(per_key.values()))


def raised(prior: Spread, groups: list[list[float]]) -> Spread:
    """``prior`` raised to the pooled sd of log tok/s within ``groups`` (starts of one config) times sqrt 2 (a pair
    of starts), when that is more; never lowered."""
    seen = pooled_spread(groups, None)
    if seen is None or seen.sd * math.sqrt(2) <= prior.sd:
        return prior
    return Spread(sd=seen.sd * math.sqrt(2), df=prior.df)


def level_intervals(
    number: int,
    cuda_graph: Any,
    rounds: list[Round],
    levels: list[int],
    *,
    confidence: float,
    prior: Spread | None = None,
) -> LevelIntervals:
    """``{level: interval}`` of candidate ``number`` against the same round's fresh baseline of its setting. With
    ``prior`` (``stats.start_prior``) each level's spread is pooled with it, raised to that level's own
    start-to-start spread when the rounds show more (``level_prior``), as the objective's intervals are."""
    out: LevelIntervals = {}
    for c in levels:
        logs = []
        for r in rounds:
            if r.levels is None:
                continue
            t, b = r.levels.candidates.get(number, {}).get(c), r.levels.baseline.get(cuda_graph, {}).get(c)
            if t and b:
                logs.append(math.log(t / b))
        p = level_prior(rounds, c, prior)
        out[c] = speedup_interval(logs, confidence, p) if len(logs) >= 2 else None
    return out


def level_verdicts(per_candidate: dict[int, LevelIntervals], levels: list[int], min_gain: float) -> list[LevelVerdict]:
    """For each level the candidate with the best point estimate there, its interval and the level's verdict."""
    out: list[LevelVerdict] = []
    for c in levels:
        ranked = [(number, iv) for number, ivs in per_candidate.items() if (iv := ivs.get(c))]
        # the first of equal point estimates, in the candidates' order
        best = max(ranked, key=lambda p: p[1].point, default=None)
        iv = None if best is None else best[1]
        out.append(LevelVerdict(c, None if best is None else best[0], iv, verdict(iv, min_gain)))
    return out


def _streams(n: int) -> str:
    return f"{n} stream" if n == 1 else f"{n} streams"


def summary_text(verdicts: list[LevelVerdict]) -> str:
    """ "speculation wins up to 8 streams, loses from 32" (the levels in between: inconclusive)."""
    wins = [v.level for v in verdicts if v.verdict == Verdict.SPECULATION_WINS]
    loses = [v.level for v in verdicts if v.verdict == Verdict.BASELINE_WINS]
    lowest = min((v.level for v in verdicts), default=None)

    def up_to(n: int) -> str:
        return f"at {_streams(n)}" if n == lowest else f"up to {_streams(n)}"

    if wins and len(wins) == len(verdicts) > 1:
        return f"speculation wins at every level (up to {_streams(max(wins))})"
    if wins and not loses:
        return f"speculation wins {up_to(max(wins))}" + ("" if len(wins) == len(verdicts) else " (inconclusive above)")
    if loses and len(loses) == len(verdicts):
        return "speculation loses at every level"
    if verdicts and all(v.verdict.deploys_baseline for v in verdicts):
        return "no worthwhile gain at any level (each below the minimum gain or a loss)"
    if loses and not wins:
        return f"speculation loses from {_streams(min(loses))}"
    if wins and loses:
        first_loss = min(loses)
        below = [c for c in wins if c < first_loss]
        head = f"speculation wins {up_to(max(below))}" if below else f"speculation wins at {_streams(max(wins))}"
        return f"{head}, loses from {first_loss}"
    return "inconclusive at every level"

"""Per-level confirmation, pure over the recorded rounds: each candidate's interval at each load level, the
winner of each level and the per-level verdict ("speculation wins up to 8 streams, loses from 32").

A round with load levels also records each start's tok/s per level (``records.RoundLevels``); every start measures
every level, so these come with the objective's rounds at no extra start."""

from __future__ import annotations

import math
from typing import Any

from autotune.records.confirmation import Round
from autotune.stats import Interval, speedup_interval
from autotune.verdict import Verdict, verdict


def level_intervals(
    number: int, cuda_graph: Any, rounds: list[Round], levels: list[int], *, confidence: float
) -> dict[str, dict[str, Any] | None]:
    """``{level: interval}`` of candidate ``number`` against the same round's fresh baseline of its setting."""
    out: dict[str, dict[str, Any] | None] = {}
    for c in levels:
        logs = []
        for r in rounds:
            if r.levels is None:
                continue
            t, b = r.levels.candidates.get(number, {}).get(c), r.levels.baseline.get(cuda_graph, {}).get(c)
            if t and b:
                logs.append(math.log(t / b))
        out[str(c)] = speedup_interval(logs, confidence).to_dict() if len(logs) >= 2 else None
    return out


def level_verdicts(
    per_candidate: dict[str, dict[str, dict[str, Any] | None]], levels: list[int], min_gain: float
) -> list[dict[str, Any]]:
    """For each level the candidate with the best point estimate there, its interval and the level's verdict."""
    out = []
    for c in levels:
        best: tuple[float, str, dict[str, Any]] | None = None
        for number, ivs in per_candidate.items():
            iv = ivs.get(str(c))
            if iv and (best is None or iv["point"] > best[0]):
                best = (iv["point"], number, iv)
        if best is None:
            out.append({"level": c, "trial": None, "speedup_ci": None, "verdict": verdict(None, min_gain).value})
            continue
        iv = best[2]
        interval = Interval(**{k: iv[k] for k in ("point", "low", "high", "n", "confidence")})
        out.append({"level": c, "trial": int(best[1]), "speedup_ci": iv, "verdict": verdict(interval, min_gain).value})
    return out


def _streams(n: int) -> str:
    return f"{n} stream" if n == 1 else f"{n} streams"


def summary_text(verdicts: list[dict[str, Any]]) -> str:
    """ "speculation wins up to 8 streams, loses from 32" (the levels in between: inconclusive)."""
    wins = [v["level"] for v in verdicts if v["verdict"] == Verdict.SPECULATION_WINS]
    loses = [v["level"] for v in verdicts if v["verdict"] == Verdict.BASELINE_WINS]
    lowest = min((v["level"] for v in verdicts), default=None)

    def up_to(n: int) -> str:
        return f"at {_streams(n)}" if n == lowest else f"up to {_streams(n)}"

    if wins and len(wins) == len(verdicts) > 1:
        return f"speculation wins at every level (up to {_streams(max(wins))})"
    if wins and not loses:
        return f"speculation wins {up_to(max(wins))}" + ("" if len(wins) == len(verdicts) else " (inconclusive above)")
    if loses and len(loses) == len(verdicts):
        return "speculation loses at every level"
    if verdicts and all(Verdict(v["verdict"]).deploys_baseline for v in verdicts):
        return "no worthwhile gain at any level (each below the minimum gain or a loss)"
    if loses and not wins:
        return f"speculation loses from {_streams(min(loses))}"
    if wins and loses:
        first_loss = min(loses)
        below = [c for c in wins if c < first_loss]
        head = f"speculation wins {up_to(max(below))}" if below else f"speculation wins at {_streams(max(wins))}"
        return f"{head}, loses from {first_loss}"
    return "inconclusive at every level"

"""Re-verify an export: start the exported config and its baseline again, interleaved (a fresh baseline, then the
config, each round), and say whether the speedup still holds inside the exported interval.

It holds when the new interval (paired log ratios of the rounds, t-interval at ``verdict.confidence``) overlaps the
exported one: the two measurements agree. An export without an interval (a trial chosen with ``--trial`` that was
never confirmed) holds when the new interval contains its measured speedup. Talks to the world only through a
``Runner`` (``measure_config``), like the study.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from autotune._io import atomic_write
from autotune.backends.base import Backend
from autotune.config import Config, TrialConfig
from autotune.errors import AutotuneError, InfeasibleConfig, StartsFailed, UserError
from autotune.measure import FRESH_STARTS, Measurement, measure_fresh
from autotune.seam import Runner
from autotune.space import Space
from autotune.stats import Interval, interval_text, log_ratios, speedup_interval, start_prior


@dataclass(frozen=True)
class Pair:
    """One round's tok/s: the baseline's, then the config's."""

    baseline: float
    config: float

    def to_dict(self) -> dict[str, float]:
        return {"baseline": self.baseline, "config": self.config}


@dataclass(frozen=True)
class Round(Pair):
    """One round: the objective's figures, and with load levels each level's (keyed by the level as text, as the
    journal's JSON has them)."""

    levels: dict[str, Pair] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"baseline": self.baseline, "config": self.config}
        if self.levels:
            out["levels"] = {k: p.to_dict() for k, p in self.levels.items()}
        return out

    @classmethod
    def from_dict(cls, r: Mapping[str, Any]) -> Round:
        """A journaled round, checked (KeyError, TypeError or ValueError when it is not one)."""
        levels = {str(k): Pair(float(x["baseline"]), float(x["config"])) for k, x in (r.get("levels") or {}).items()}
        return cls(float(r["baseline"]), float(r["config"]), levels)


@dataclass(frozen=True)
class LevelInterval:
    """With load levels: one level's speedup interval over the rounds."""

    level: int
    speedup_ci: Interval


@dataclass(frozen=True)
class ReverifyResult:
    """What a re-verification found: whether the speedup holds (``holds``), both intervals and every round.
    ``to_dict`` is ``reverify --json``'s object."""

    study: Any
    trial: Any
    config: Config
    baseline_config: Config
    simulated: Any
    #: the exported interval (``point``, ``low``, ``high``, ...) as the export's provenance has it, and its point
    exported_speedup_ci: Mapping[str, float] | None
    exported_speedup: float | None
    speedup_ci: Interval | None
    still_wins: bool
    holds: bool
    #: why the exported config's server failed a round (it does not hold then), or None
    failed: str | None
    levels: list[LevelInterval]
    rounds: list[Round]

    def to_dict(self) -> dict[str, object]:
        return {
            "study": self.study,
            "trial": self.trial,
            "config": self.config,
            "baseline_config": self.baseline_config,
            "simulated": self.simulated,
            "exported_speedup_ci": self.exported_speedup_ci,
            "exported_speedup": self.exported_speedup,
            "speedup_ci": None if self.speedup_ci is None else self.speedup_ci.to_dict(),
            "still_wins": self.still_wins,
            "holds": self.holds,
            "failed": self.failed,
            "levels": [{"level": x.level, "speedup_ci": x.speedup_ci.to_dict()} for x in self.levels],
            "rounds": [r.to_dict() for r in self.rounds],
        }


def holds(new: Interval, exported: Mapping[str, float] | None, exported_point: float | None) -> bool:
    """Whether the re-measured interval agrees with the export: it overlaps the exported interval, or (no exported
    interval) contains the exported point estimate."""
    if exported:
        return new.low <= exported["high"] and exported["low"] <= new.high
    if exported_point is None:
        return False
    return new.low <= exported_point <= new.high


def _figures(m: Measurement) -> tuple[float, dict[str, float]]:
    """One start's figure as the study exported it (``Measurement.tok_per_s``: with load levels the weighted
    objective over the levels, with weights over prompt categories the categories', else tok/s over the prompt
    set) and, with load levels, each level's tok/s (keyed by the level, as text: the journal is JSON)."""
    levels = {str(lv.level): lv.tok_per_s for lv in m.levels} if len(m.levels) > 1 else {}
    return m.tok_per_s, levels


def reverify(
    space: Space,
    backend: Backend,
    runner: Runner,
    provenance: Mapping[str, Any],
    *,
    repeats: int | None = None,
    progress: Callable[[int, str, float], None] | None = None,
    note: Callable[[str], None] | None = None,
    journal: Path | None = None,
) -> ReverifyResult:
    """Measure ``repeats`` rounds (default ``verdict.repeats``) of baseline then config; the result says
    whether the speedup holds (``holds``) and carries both intervals and every round's tok/s. A start that fails
    gets a fresh one (``measure_fresh``; ``note`` says so); a config whose starts all fail in a round does not
    hold (``failed`` says why; the rounds before it are kept), a baseline whose starts all fail is an error.
    ``journal``: each round is written there as it ends, so that a run cut short (Ctrl-C, a baseline that failed,
    the machine lost) goes on from its rounds when run again; removed once the result stands."""
    config = TrialConfig.from_dict(provenance["config"])
    if config.is_baseline:
        raise UserError(
            f"the export of study {provenance.get('study')} deploys the baseline (no speculation): there is no "
            "speedup to re-verify"
        )
    if config.drafter not in {d.name for d in space.drafters}:
        raise UserError(f"the exported drafter {config.drafter!r} is not in the space {space.path}")
    base = provenance.get("baseline") or {}
    base_config = TrialConfig.from_dict(base.get("config") or {"drafter": None, "cuda_graph": config.cuda_graph})
    try:
        effective = backend.resolve(config, space)
    except InfeasibleConfig as e:
        raise UserError(f"the exported config would be rejected or rewritten by the server now: {e}") from None
    n = repeats or space.verdict.repeats
    rounds = _kept(journal, note, levelled=len(space.benchmark.concurrency) > 1)
    failed: str | None = None  # the exported config's server failed on every fresh start of a round
    for i in range(len(rounds), n):
        try:
            b, b_levels = _figures(measure_fresh(runner, base_config, space, on_retry=_retry(note, i, "baseline")))
        except StartsFailed as e:
            raise AutotuneError(
                f"reverify: the baseline's server failed on {FRESH_STARTS} fresh starts in round {i + 1} ({e}): "
                f"nothing can be compared without it; {len(rounds)} round(s) measured before: "
                + (", ".join(f"{r.baseline:.1f} / {r.config:.1f} tok/s" for r in rounds) or "none")
            ) from e
        if progress:
            progress(i, "baseline", b)
        try:
            c, c_levels = _figures(measure_fresh(runner, effective, space, on_retry=_retry(note, i, "config")))
        except StartsFailed as e:
            failed = f"server failed on {FRESH_STARTS} fresh starts in round {i + 1} ({e.kind}): {e}"
            break
        if progress:
            progress(i, "config", c)
        both = {k: Pair(b_levels[k], c_levels[k]) for k in b_levels if k in c_levels} if c_levels else {}
        rounds.append(Round(b, c, both))
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(journal, json.dumps({"rounds": [r.to_dict() for r in rounds]}))
    if journal is not None:
        journal.unlink(missing_ok=True)  # the result stands: a later reverify measures afresh
    measured = provenance.get("measured") or {}
    exported = measured.get("speedup_ci")
    new = _interval(rounds, space)
    if new is None and failed is None:
        raise UserError("fewer than two rounds were measured: no interval (is a server answering with 0 tokens?)")
    # a config whose server fails on fresh starts does not hold, whatever its speed when it serves
    ok = failed is None and new is not None and holds(new, exported, measured.get("speedup"))
    return ReverifyResult(
        study=provenance.get("study"),
        trial=provenance.get("trial"),
        config=effective.to_dict(),
        baseline_config=base_config.to_dict(),
        simulated=provenance.get("simulated"),
        exported_speedup_ci=exported,
        exported_speedup=measured.get("speedup"),
        speedup_ci=new,
        still_wins=failed is None and new is not None and new.low > 1.0,
        holds=ok,
        failed=failed,
        levels=_level_intervals(rounds, space),
        rounds=rounds,
    )


def _interval(pairs: list[Round] | list[Pair], space: Space) -> Interval | None:
    """The speedup interval of paired ``baseline`` / ``config`` figures (the pairs where both are positive), at
    ``verdict.confidence`` with the start prior; None under two such pairs."""
    logs = log_ratios([p.config for p in pairs], [p.baseline for p in pairs])
    if len(logs) < 2:
        return None
    return speedup_interval(logs, space.verdict.confidence, start_prior(space.pruning.start_noise))


def _level_intervals(rounds: list[Round], space: Space) -> list[LevelInterval]:
    """With load levels: each level's speedup interval over the rounds (what the objective weighs), for the
    reader; whether the export holds is judged on the objective alone, as it was exported."""
    by_level: dict[str, list[Pair]] = {}
    for r in rounds:
        for k, pair in r.levels.items():
            by_level.setdefault(k, []).append(pair)
    out = []
    for k in sorted(by_level, key=int):
        ci = _interval(by_level[k], space)
        if ci is not None:
            out.append(LevelInterval(int(k), ci))
    return out


def _kept(journal: Path | None, note: Callable[[str], None] | None, *, levelled: bool = False) -> list[Round]:
    """The rounds an earlier run of the same re-verification measured (``journal``), or none. ``levelled``: the
    space has load levels, so every round must carry them (a journal of an autotune before 2026-12-04 kept one
    level's tok/s there, not the objective: not resumed)."""
    if journal is None or not journal.is_file():
        return []
    try:
        rounds = json.loads(journal.read_text(encoding="utf-8"))["rounds"]
        kept = [Round.from_dict(r) for r in rounds]
        if levelled and any(not r.levels for r in kept):
            raise ValueError("its rounds carry no per-level figures (written by an earlier autotune)")
    except (ValueError, KeyError, TypeError) as e:
        if note is not None:
            note(f"reverify: {journal} is unreadable ({e}): measuring from the first round")
        return []
    if note is not None:
        note(f"reverify: resuming from {journal}: {len(kept)} round(s) kept")
    return kept


def _retry(note: Callable[[str], None] | None, i: int, what: str) -> Callable[[str], None]:
    """What a failed start says (through ``note``) before its fresh one."""

    def say(line: str) -> None:
        if note is not None:
            note(f"reverify round {i + 1}: the {what}'s server failed ({line}); a fresh start")

    return say


def render_result(r: ReverifyResult, out: IO[str]) -> None:
    w = out.write
    w(
        f"re-verified trial {r.trial} of study {r.study}"
        + (" [SIMULATED]" if r.simulated else "")
        + f": {len(r.rounds)} interleaved rounds of baseline and config\n"
    )
    unit = f" (the objective over {', '.join(str(x.level) for x in r.levels)} streams)" if r.levels else ""
    for i, x in enumerate(r.rounds):
        w(f"  round {i + 1}: baseline {x.baseline:.1f} tok/s, config {x.config:.1f} tok/s{unit}\n")
    for lv in r.levels:
        w(f"  at {lv.level} stream(s): speedup now {interval_text(lv.speedup_ci)}\n")
    exported = interval_text(r.exported_speedup_ci) if r.exported_speedup_ci else f"{r.exported_speedup} (no interval)"
    w(f"speedup now {interval_text(r.speedup_ci)}; exported {exported}\n")
    if r.failed:
        w(f"does NOT hold: the exported config's {r.failed}\n")
    elif r.holds:
        w("holds: the speedup measured now agrees with the exported interval\n")
    else:
        w(
            "does NOT hold: the speedup measured now lies outside the exported interval"
            + ("" if r.still_wins else "; the config no longer beats its baseline")
            + "\n"
        )

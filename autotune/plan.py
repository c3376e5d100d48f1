"""What a study will cost before it starts: its phases, the server starts each may take and the GPU time (pure).

The counts follow the study's own rules (``plan``). A start costs the server's start-up, the warm-up and the prompts
(each load level's requests at its number of streams); the figures come from the study's own measurements when it
has any, else from the simulator's scenario, else from ``budget.estimate`` in the space. Estimates, not promises:
pruning ends many starts after a few prompts, and the race often ends before ``max_repeats``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.config import level_requests

#: level-only confirmation candidates per load level, and their rounds (``study.confirm`` / ``study.race``)
LEVEL_CANDIDATES = 2
LEVEL_ONLY_ROUNDS = 2


@dataclass(frozen=True)
class Costs:
    """What one server start costs: ``startup_s`` to healthy, ``request_s`` for one prompt of ``max_tokens`` on
    the baseline at one stream; ``source`` says where the figures come from."""

    startup_s: float
    request_s: float
    source: str

    def start_s(self, *, n_prompts: int, warmup: int, levels: Sequence[int], warmup_passes: int = 0) -> float:
        """Seconds of one start: start-up, warm-up (its requests and ``warmup_passes`` untimed passes of the
        prompts), the prompts at one stream and each higher level's requests (C streams at once take about as long
        per round as one: a level's time is its requests / C rounds)."""
        t = self.startup_s + (warmup + (warmup_passes + 1) * n_prompts) * self.request_s
        for level in levels:
            if level > 1:
                t += math.ceil(len(level_requests(level, n_prompts)) / level) * self.request_s
        return t


@dataclass(frozen=True)
class Phase:
    name: str
    starts: int  # the starts the phase takes as planned
    starts_max: int  # the most it may take
    note: str


@dataclass(frozen=True)
class Plan:
    phases: tuple[Phase, ...]
    start_s: float | None  # seconds of one start; None: no figures (the plan gives counts only)
    gpus: int  # GPUs one server uses
    kept: int  # trials a resumed study already has
    costs: Costs | None
    #: untimed warm-up passes of the prompts a start takes (``autotune.warmup``)
    warmup_passes: int = 0
    #: requests measured beyond the starts' own (a request-log space's holdout check, on the first baseline's start)
    extra_requests: int = 0

    @property
    def starts(self) -> tuple[int, int]:
        return sum(p.starts for p in self.phases), sum(p.starts_max for p in self.phases)

    @property
    def server_s(self) -> tuple[float, float] | None:
        """(planned, at most) seconds of server time (each of them holds ``gpus`` GPUs)."""
        if self.start_s is None:
            return None
        lo, hi = self.starts
        extra = self.extra_requests * self.costs.request_s if self.costs else 0.0
        return lo * self.start_s + extra, hi * self.start_s + extra


def plan(
    *,
    n_trials: int,
    used: int,
    graph_settings: int,
    levels: Sequence[int],
    confirm_top: int,
    repeats: int,
    max_repeats: int,
    confirm: bool,
    n_prompts: int,
    warmup: int,
    gpus: int,
    costs: Costs | None,
    settle_after: int | None = None,
    level_rounds: int = 0,
    ladder_rungs: int = 0,
    warmup_passes: int = 0,
    methods: int = 0,
    holdout: int = 0,
    greedy_check: bool = False,
    holdout_acceptance: int = 0,
) -> Plan:
    """The plan of a study whose budget is ``n_trials``, ``used`` of it spent already (a resume): the search takes at
    most what is left (fewer once settled: ``settle_after``, None when it runs its whole budget; confirmation may then
    thin its candidates to one). With load levels, after the search: ``level_rounds`` rounds of one surrogate pick
    per level and ``ladder_rungs`` rungs of the best config's draft-length ladder (``study.ladder``), each a start at
    most. Confirmation races up to ``confirm_top`` candidates plus the fastest single measurement, or each of the
    ``methods``' best (``study.confirm``), plus two per load level for their first two rounds, against a fresh
    baseline of every CUDA-graph setting each round. ``holdout``: the requests of a request log's holdout check, one
    extra baseline pass; ``greedy_check`` (prompts that sample) and ``holdout_acceptance`` (requests): the winner's
    one more start after confirmation, when speculation wins."""
    search_left = max(0, n_trials - used)
    note = f"{n_trials} trials in the budget, {used} used"
    search_lo = search_left
    if settle_after is not None and settle_after < n_trials:
        search_lo = max(0, min(search_left, settle_after - used))
        note += f"; it stops earlier once its answer is settled, not before {settle_after}"
    phases = [Phase("search", search_lo, search_left, note)]
    if holdout:
        note = f"one extra baseline pass: {holdout} requests from the rest of the log on the first baseline's start"
        phases.append(Phase("holdout check", 0, 0, note))
    if len(levels) > 1 and (level_rounds or ladder_rungs):
        parts = [f"{level_rounds} round(s) of a pick per level"] if level_rounds else []
        parts += [f"up to {ladder_rungs} draft lengths of the best config"] if ladder_rungs else []
        phases.append(Phase("level picks", 0, level_rounds * len(levels) + ladder_rungs, " and ".join(parts)))
    if confirm and confirm_top > 0 and repeats >= 2:
        cands = confirm_top + max(1, methods)
        fewest = 1 if settle_after is not None else cands
        level_only = LEVEL_CANDIDATES * len([c for c in levels if c > 1]) if len(levels) > 1 else 0
        per_round = min(graph_settings, cands) + cands
        lo = repeats * (min(graph_settings, fewest) + fewest) + min(LEVEL_ONLY_ROUNDS, repeats) * level_only
        hi = max(repeats, max_repeats) * per_round + LEVEL_ONLY_ROUNDS * level_only
        which = f"up to {cands}" if fewest == cands else f"{fewest} to {cands}"
        note = (
            f"{repeats}-{max(repeats, max_repeats)} rounds of {which} candidates and "
            f"{min(graph_settings, cands)} fresh baseline(s)"
            + (f", {level_only} level-only candidates for {LEVEL_ONLY_ROUNDS} rounds" if level_only else "")
        )
        phases.append(Phase("confirmation", lo, hi, note))
        parts = ["its answers at temperature 0 (the prompts sample)"] if greedy_check else []
        if holdout_acceptance:
            parts.append(f"its acceptance on the {holdout_acceptance} holdout requests against the subset's")
        if parts:
            note = "one more start of the winner, if one wins: " + " and ".join(parts)
            phases.append(Phase("winner check", 0, 1, note))
    start_s = None
    if costs:
        start_s = costs.start_s(n_prompts=n_prompts, warmup=warmup, levels=levels, warmup_passes=warmup_passes)
    return Plan(tuple(phases), start_s, max(1, gpus), used, costs, warmup_passes, holdout)


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 360 else f"{s / 60:.0f} min"


def render(p: Plan) -> str:
    """Two or three lines: the phases with their starts, then the estimated GPU time and where its figures come
    from."""
    parts = []
    for ph in p.phases:
        n = f"{ph.starts}" if ph.starts == ph.starts_max else f"{ph.starts}-{ph.starts_max}"
        parts.append(f"{ph.name} {n} server starts ({ph.note})")
    lo, hi = p.starts
    lines = [f"plan: {'; '.join(parts)}; {lo if lo == hi else f'{lo}-{hi}'} starts in all"]
    g = p.server_s
    if g is None or p.costs is None:
        lines.append(
            "estimated GPU time: unknown until the first start (the live view gives an ETA from the measured starts)"
        )
    else:
        span = _hours(g[0]) if math.isclose(g[0], g[1]) else f"{_hours(g[0])} (at most {_hours(g[1])})"
        lines.append(
            f"estimated GPU time: {span} of {'an' if p.gpus in (8, 11, 18) else 'a'} {p.gpus}-GPU server"
            + (f" ({_hours(g[0] * p.gpus)} of GPU time)" if p.gpus > 1 else "")
            + f", {p.start_s:.0f} s a start (start-up {p.costs.startup_s:.0f} s, {p.costs.request_s:.1f} s a prompt"
            + (f", {p.warmup_passes} untimed warm-up pass(es) of the prompts" if p.warmup_passes else "")
            + f"; {p.costs.source})"
        )
    return "\n".join(lines)


def measured_costs(startups: Sequence[float], prompt_seconds: Sequence[float]) -> Costs | None:
    """Costs from a study's own measurements (the median start-up and seconds per prompt); None without both."""
    if not startups or not prompt_seconds:
        return None
    return Costs(
        startup_s=statistics.median(startups),
        request_s=statistics.median(prompt_seconds),
        source=f"measured in this study ({len(startups)} starts)",
    )

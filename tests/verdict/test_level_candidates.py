"""With load levels, confirmation also races configs for one level's sake (``confirm._level_winners``): the two
fastest measured at each level, judged by that level (a deep tree that wins at one stream loses the objective).
Such a level-only candidate gets ``race.LEVEL_ONLY_ROUNDS`` rounds, then stays only while it has the best point
estimate at some level. Tested on the pure race and end to end on the simulator's Llama load landscape."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.backends.sglang import SGLangBackend
from autotune.records import Round, TrialRecord
from autotune.seam import VirtualClock
from autotune.sim import ModelRunner, simulated_space
from autotune.space import VerdictSpec, load_space
from autotune.study import Orchestrator, confirm, open_study, race

ROOT = Path(__file__).resolve().parents[2]
LEVELS = [1, 64]
SPEC = VerdictSpec(repeats=4, max_repeats=4)
# 1: the objective's candidate (best at 64); 2: level-only, best at 1 stream; 3: level-only, second at 1 stream
CANDS = [race.Candidate(k, {}, True) for k in (1, 2, 3)]


def _round(objective: dict[str, float], at1: dict[str, float], at64: dict[str, float]) -> Round:
    """A round in its stored form (keys as strings), read as the study reads it."""
    return Round.from_dict(
        {
            "baseline": {"True": 100.0},
            "candidates": objective,
            "levels": {
                "baseline": {"True": {"1": 100.0, "64": 1000.0}},
                "candidates": {k: {"1": at1[k], "64": at64[k]} for k in objective},
            },
        }
    )


def test_a_level_only_candidate_that_leads_no_level_after_two_rounds_is_measured_no_more():
    every = {"1": 120.0, "2": 90.0, "3": 88.0}
    r1 = _round(every, {"1": 150.0, "2": 200.0, "3": 190.0}, {"1": 1200.0, "2": 700.0, "3": 690.0})
    r2 = _round(every, {"1": 152.0, "2": 198.0, "3": 192.0}, {"1": 1210.0, "2": 705.0, "3": 700.0})
    only = frozenset({2, 3})
    the_race = race.Race(CANDS, SPEC, True, LEVELS, only)
    assert the_race.next_round([]) == [1, 2, 3]
    assert the_race.next_round([r1]) == [1, 2, 3]
    assert the_race.level_only_out([r1, r2]) == {3}
    assert the_race.next_round([r1, r2]) == [1, 2]
    # without level-only candidates every one gets spec.repeats rounds
    assert race.Race(CANDS, SPEC, True, LEVELS).next_round([r1, r2]) == [1, 2, 3]


def test_a_candidate_out_of_the_race_weighs_in_no_level_verdict():
    """Candidate 3's two rounds at 1 stream (1.90x) would beat candidate 2's four (1.85x), but it led no level
    after its two rounds: candidate 2 is the level's winner."""
    only = frozenset({2, 3})
    every = {"1": 120.0, "2": 90.0, "3": 88.0}
    r1 = _round(every, {"1": 150.0, "2": 200.0, "3": 190.0}, {"1": 1200.0, "2": 700.0, "3": 690.0})
    r2 = _round(every, {"1": 152.0, "2": 198.0, "3": 190.0}, {"1": 1210.0, "2": 705.0, "3": 700.0})
    later = {"1": 120.0, "2": 90.0}
    r3 = _round(later, {"1": 150.0, "2": 170.0}, {"1": 1200.0, "2": 700.0})
    r4 = _round(later, {"1": 150.0, "2": 172.0}, {"1": 1200.0, "2": 700.0})
    seen = race.Race(CANDS, SPEC, True, LEVELS, only).look([r1, r2, r3, r4])
    by_level = {v.level: v for v in seen.level_verdicts or []}
    assert by_level[1].trial == 2 and by_level[64].trial == 1
    assert 3 not in (seen.level_results or {})
    assert next(r for r in seen.results if r.trial == 3).dropped


def test_level_candidates_are_judged_by_their_level_and_leave_the_race_on_the_simulator():
    """Seed 7 of the Llama load landscape (scripts/bench_load.py): the deep trees (topk 4, 15-16 draft tokens) are the
    fastest measured at 1 and 8 streams but lose the objective (0.33-0.50x from 128 streams up), so its bound
    would have kept them out."""
    space = simulated_space(load_space(str(ROOT / "scripts/bench_scenarios/llama-load.space.yaml")))
    backend = SGLangBackend()
    clock = VirtualClock()
    runner = ModelRunner(space, backend, clock, seed=7)
    study = open_study(space, optuna.storages.InMemoryStorage(), "levels-7", seed=7, simulated=True)
    orch = Orchestrator(space, backend, runner, study, clock=clock)
    orch.search(space.budget.n_trials)
    ours, level_only = confirm.candidate_sets(orch.ctx)
    assert level_only, "no candidate for a level's sake"
    objective_bound = [orch.ctx.pruner.decide(study, t) for t in level_only]
    assert any(d is not None and d.upper_bound < 1.0 for d in objective_bound)  # only their level let them in
    measured = [t for t in study.get_trials() if t.state.name == "COMPLETE" and not TrialRecord(t).is_baseline]

    def at(t, c):
        return next((x.speedup or 0.0 for x in TrialRecord(t).levels if x.level == c), 0.0)

    for t in level_only:  # among the fastest measured at some level, where it beats the baseline
        assert any(
            at(t, c) > 1.0 and sum(at(u, c) > at(t, c) for u in measured) < confirm.LEVEL_CANDIDATES + len(ours)
            for c in space.benchmark.concurrency
        ), f"trial {t.number} is not among the fastest measured at any level"
    state = orch.confirm()
    assert state.to_dict()["level_only"] == [str(t.number) for t in level_only]  # stored as strings
    gone = confirm._race(orch.ctx, ours + level_only, state).level_only_out(state.rounds)
    assert gone  # on this landscape one of them leads no level after two rounds
    for key in gone:  # measured in the first two rounds only
        measured = [i for i, r in enumerate(state.rounds) if key in r.candidates]
        assert measured == list(range(race.LEVEL_ONLY_ROUNDS))
        assert all(v.trial != key for v in state.level_verdicts or [])

"""The live view's progress line (pure, on an injected clock)."""

from __future__ import annotations

from autotune.live import Progress
from autotune.study import Event


def test_progress_counts_phase_trials_starts_and_eta_from_the_pace_so_far():
    now = [100.0]
    p = Progress(now=lambda: now[0])
    p.on_event(Event("plan", data={"n_trials": 12, "used": 2, "starts": [30, 40]}))
    assert p.text() == "search · trials 2/12 · starts 0/30-40 · 0m00s elapsed"
    for _ in range(3):
        p.on_event(Event("launched", 1, {"startup_s": 5}))
        p.on_event(Event("trial-end", 1, {"state": "COMPLETE"}))
    now[0] += 60.0  # 20 s a start so far: 27 planned starts left, 37 at most
    assert p.eta_s() == (27 * 20.0, 37 * 20.0)
    assert p.text() == "search · trials 5/12 · starts 3/30-40 · 1m00s elapsed · ETA 9m00s (at most 12m20s)"
    p.on_event(Event("confirm-start", data={"candidates": [3], "repeats": 4}))
    p.on_event(Event("confirm-measure", data={"config": "x", "tok_per_s": 1.0}))
    assert p.text().startswith("confirmation · trials 5/12 · starts 4/30-40")
    p.on_event(Event("verdict", data={"verdict": "inconclusive"}))
    assert "ETA" not in p.text() and p.text().startswith("verdict")


def test_progress_without_a_plan_has_no_eta():
    p = Progress(now=lambda: 0.0)
    p.on_event(Event("launched", 0, {}))
    assert p.eta_s() is None and p.text() == "search · starts 1 · 0m00s elapsed"


def test_progress_counts_the_budget_apart_from_duplicates_gate_skips_and_level_picks():
    """Trials count the places used in the search's budget, never clamped: duplicates (no place, no start) and the
    launch gate's skips (a place, no start) are said apart, and the load levels' picks after the search are their
    own phase (a study showed "trials 40/40" while 16 more trials and starts ran)."""
    p = Progress(now=lambda: 0.0)
    p.on_event(Event("plan", data={"n_trials": 3, "used": 0, "starts": [3, 9]}))
    end = {"state": "COMPLETE", "budget": True, "duplicate": False, "not_launched": False, "seeded": None}
    p.on_event(Event("launched", 0, {}))
    p.on_event(Event("trial-end", 0, end))
    for _ in range(4):  # copies of trial 0: neither a place in the budget nor a start
        p.on_event(Event("trial-end", 1, {**end, "budget": False, "duplicate": True}))
    p.on_event(Event("trial-end", 2, {**end, "state": "PRUNED", "not_launched": True}))
    assert p.text() == "search · trials 2/3 (1 not launched) · 4 duplicates · starts 1/3-9 · 0m00s elapsed · ETA 0m00s"
    p.on_event(Event("launched", 3, {}))
    p.on_event(Event("trial-end", 3, end))
    for n in (4, 5):  # the level phase after the search: trials with starts beyond the budget, said so
        p.on_event(Event("launched", n, {}))
        p.on_event(Event("trial-end", n, {**end, "seeded": "level"}))
    head = "level picks · trials 3/3 (1 not launched) · 4 duplicates · 2 level trials · starts 4/3-9"
    assert p.text().startswith(head)

"""The live view's progress line (pure, on an injected clock)."""

from __future__ import annotations

from autotune.live import Progress
from autotune.study import Event


def test_progress_counts_phase_trials_starts_and_eta_from_the_pace_so_far():
    now = [100.0]
    p = Progress(now=lambda: now[0])
    p.on_event(Event("plan", data={"n_trials": 12, "used": 2, "starts": [30, 40]}))
    assert p.text() == "search · trials 2/12 · starts 0/30 · 0m00s elapsed"
    for _ in range(3):
        p.on_event(Event("launched", 1, {"startup_s": 5}))
        p.on_event(Event("trial-end", 1, {"state": "COMPLETE"}))
    now[0] += 60.0  # 20 s a start so far: 27 planned starts left, 37 at most
    assert p.eta_s() == (27 * 20.0, 37 * 20.0)
    assert p.text() == "search · trials 5/12 · starts 3/30 · 1m00s elapsed · ETA 9m00s (at most 12m20s)"
    p.on_event(Event("confirm-start", data={"candidates": [3], "repeats": 4}))
    p.on_event(Event("confirm-measure", data={"config": "x", "tok_per_s": 1.0}))
    assert p.text().startswith("confirmation · trials 5/12 · starts 4/30")
    p.on_event(Event("verdict", data={"verdict": "inconclusive"}))
    assert "ETA" not in p.text() and p.text().startswith("verdict")


def test_progress_without_a_plan_has_no_eta():
    p = Progress(now=lambda: 0.0)
    p.on_event(Event("launched", 0, {}))
    assert p.eta_s() is None and p.text() == "search · starts 1 · 0m00s elapsed"

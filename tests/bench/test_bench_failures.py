"""Smoke test of scripts/bench_failures.py: one faulty study each way, its bill against the clock, the table."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_failures  # noqa: E402

from autotune.study import trial  # noqa: E402


def test_bench_failures_one_fault_both_ways():
    rows = [bench_failures.run("crash-startup@aq-medai", 0, v) for v in bench_failures.VARIANTS]
    assert trial.NEVER_STARTED == 3  # the variant's patch is undone
    shipped, before = rows
    for r in rows:
        assert r["billed_s"] == r["server_s"] > 0 and r["failed_starts"] > 0  # every failed start on the bill
    assert shipped["failed_starts"] < before["failed_starts"] and shipped["server_s"] < before["server_s"]
    md = bench_failures.markdown(rows, 1, 1.0)
    assert "| crash-startup@aq-medai | shipped |" in md and "| crash-startup@aq-medai | no_family_rule |" in md

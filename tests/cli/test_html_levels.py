"""The HTML report's per-level table, on the report of the real H200 load-level study (docs/gpu-runs): the recorded
JSON's sections read back as the typed report's (``Load`` with its ``LevelSummary``s; the baselines section's two
fields)."""

from __future__ import annotations

import json
import types

from autotune.config import LevelSummary
from autotune.html import _levels
from autotune.records import BaselineCheck, LevelVerdict
from autotune.report import Load

from .helpers import REPO

H200 = REPO / "docs" / "gpu-runs" / "2026-12-01-h200-load" / "resumed" / "report.json"


def _load(report: dict) -> types.SimpleNamespace:
    if not report.get("load"):
        return types.SimpleNamespace(load=None)
    load = dict(report["load"])
    load["levels"] = [LevelSummary.from_dict(x) for x in load["levels"]]
    if load["confirmed"] is not None:
        load["confirmed"] = [LevelVerdict.from_dict(v) for v in load["confirmed"]]
    return types.SimpleNamespace(load=Load(**load))


def test_the_h200_load_study_gets_a_row_per_level_with_its_confirmed_verdict():
    report = json.loads(H200.read_text())
    page = "".join(_levels(_load(report)))
    assert "<h2>Load levels</h2>" in page and "speculation wins up to 4 streams (inconclusive above)" in page
    rows = {c: page.split(f"<tr id='level-{c}'>", 1)[1].split("</tr>", 1)[0] for c in (1, 4, 16)}
    # what the H200 measured: confirmed 1.92x and 2.17x at 1 and 4 streams, 1.16x [0.99, 1.35] at 16
    assert "1.918 [1.829, 2.012] 95%" in rows[1] and "<td>speculation-wins</td>" in rows[1]
    assert "2.174 [2.062, 2.293] 95%" in rows[4] and "<td>speculation-wins</td>" in rows[4]
    assert "1.156 [0.986, 1.354] 95%" in rows[16] and "<td>inconclusive</td>" in rows[16]


def test_a_single_stream_report_has_no_level_table():
    report = json.loads(H200.read_text())
    report.pop("load")
    assert _levels(_load(report)) == []


def test_the_baseline_check_of_the_h200_runs_is_in_the_baselines_section():
    """The baseline-check run recorded its check (not flagged, +2.5%); the run before it predates the check, and its
    figures (1622.3 against a fresh mean of 1843.8) are flagged when checked."""
    from autotune.html import _baselines
    from autotune.records import Round
    from autotune.study import baseline_check

    report = json.loads((REPO / "docs/gpu-runs/2026-12-01-h200-baseline-check/report.json").read_text())
    baselines = {
        k: types.SimpleNamespace(tok_per_s=b["tok_per_s"], trial=b["trial"]) for k, b in report["baseline"].items()
    }

    def typed(checks: list) -> types.SimpleNamespace:  # the two fields _baselines reads
        return types.SimpleNamespace(result=types.SimpleNamespace(baselines=baselines), baseline_check=checks)

    page = "".join(_baselines(typed([BaselineCheck.from_dict(c) for c in report["baseline_check"]])))
    assert "<p class='check' id='baseline-check-True'>" in page and "+2.5%" in page and "within the" in page
    [c] = baseline_check.check(
        [Round(baseline={True: v}) for v in (1830.0, 1850.0, 1845.0, 1850.0)],
        {True: 1622.3},
        confidence=0.95,
        start_noise=0.035,
    )
    flagged = "".join(_baselines(typed([c])))
    assert "<p class='excluded' id='baseline-check-True'>" in flagged and "was slow" in flagged

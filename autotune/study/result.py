"""A study's result, typed: what an export deploys and the figures it cites, built from the report (``report.py``).

``autotune export`` reads it (``study_result``); the export functions take a report dict too (``as_result``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune import records
from autotune.config import TrialConfig
from autotune.report import build_report
from autotune.space import Space
from autotune.verdict import Verdict


@dataclass(frozen=True)
class StudyResult:
    """The fields of ``report --json`` an export reads, and the space it deploys. Rows stay the report's dicts."""

    study: str
    verdict: Verdict
    simulated: Any  # the simulator's label, None on real hardware
    units: str
    recommended: dict[str, Any]  # config, trial, tok_per_s, why, speedup_ci (confirmed winners only)
    best: dict[str, Any] | None  # confirmation's pick: trial, speedup, speedup_ci, ...
    fastest_baseline: dict[str, Any] | None  # trial, tok_per_s, cuda_graph, per_prompt_tok_per_s
    baselines: dict[str, dict[str, Any]]  # "cuda_graph_on" / "cuda_graph_off"
    trials: list[dict[str, Any]]  # one row per trial (number, state, config, tok_per_s, speedup, ...)
    confirmed: list[dict[str, Any]]  # confirmation's candidates (trial, speedup_ci, deploy_speedup_ci, tok_per_s)
    schedule_rows: list[dict[str, Any]]  # per-level rows for ``schedule.build``: confirmed ones, else the search's
    space: Space | None
    report: dict[str, Any]  # the whole report dict

    @property
    def recommended_config(self) -> TrialConfig | None:
        cfg = self.recommended.get("config")
        return None if cfg is None else TrialConfig.from_dict(cfg)

    @property
    def speedup_ci(self) -> dict[str, Any] | None:
        """The recommended config's confirmed interval against the fastest baseline (None unless confirmed)."""
        return self.recommended.get("speedup_ci")

    def trial_row(self, number: int) -> dict[str, Any] | None:
        return next((r for r in self.trials if r["number"] == number), None)

    def confirmed_row(self, number: int) -> dict[str, Any] | None:
        return next((c for c in self.confirmed if c["trial"] == number), None)

    def baseline(self, cuda_graph: bool) -> dict[str, Any] | None:
        """The search's baseline of a CUDA-graph setting."""
        return self.baselines.get("cuda_graph_on" if cuda_graph else "cuda_graph_off")


def study_result(study: optuna.Study, space: Space | None = None) -> StudyResult:
    """The study's result (``build_report`` once; the per-level rows read from the study)."""
    report = build_report(study)
    return from_report(report, records.confirmed_level_rows(study) or records.level_rows(study), space)


def from_report(
    report: dict[str, Any], schedule_rows: list[dict[str, Any]] | None = None, space: Space | None = None
) -> StudyResult:
    return StudyResult(
        study=report["study"],
        verdict=Verdict(report["verdict"]),
        simulated=report.get("simulated"),
        units=report.get("units") or "tok/s",
        recommended=report["recommended"],
        best=report.get("best"),
        fastest_baseline=report.get("fastest_baseline"),
        baselines=report["baseline"],
        trials=report["trials"],
        confirmed=report.get("confirmed", []),
        schedule_rows=list(schedule_rows or []),
        space=space,
        report=report,
    )


def as_result(result: StudyResult | Mapping[str, Any]) -> StudyResult:
    """``result`` as a ``StudyResult``: a report dict (``report --json``) is read as one, without per-level rows."""
    return result if isinstance(result, StudyResult) else from_report(dict(result))

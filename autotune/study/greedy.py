"""The lossless check of a space whose prompts sample (a request log's own temperatures, or ``benchmark.temperature``
above 0): the speedup is measured at each prompt's own sampling (the objective), where two answers differ by
chance and cannot be compared. The check runs at temperature 0 on the same prompts instead: every baseline of the
search keeps its reference answers (``Session.reference``, untimed), and once confirmation has a speculative
winner, that config answers every prompt greedily the same way on its one more start (``study.winner``, which
may measure the holdout's acceptance on the same start); its answers are judged against its own search
baseline's (``lossless.check_outputs``, the greedy check's rules). Recorded as study attr ``greedy_lossless``;
the report says which figures come from which measurement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune import lossless, records
from autotune.config import ReferenceOutput
from autotune.errors import BenchmarkError
from autotune.records import TrialRecord
from autotune.runner import Session
from autotune.study.context import Event, StudyContext


@dataclass(frozen=True)
class Pending:
    """The check still to run for the winner ``trial``: its baseline's temperature-0 references."""

    trial: int
    baseline: int
    references: list[ReferenceOutput]


def pending(ctx: StudyContext, best: int, by_number: dict[int, Any]) -> Pending | None:
    """The check the winner ``best`` still needs in a sampling space; None for a greedy space (its trials are
    checked as they run), when done for this winner (a resumed study keeps it), or when it cannot run (its baseline
    kept no references: recorded as skipped at once)."""
    if ctx.space.benchmark.greedy:
        return None
    done = records.greedy_lossless(ctx.study)
    if done is not None and done.get("trial") == best:
        return None
    base = TrialRecord(by_number[best]).baseline_trial
    refs = TrialRecord(by_number[base]).references() if base is not None and base in by_number else []
    if base is None or not refs or any(r is None for r in refs):
        why = "its baseline has no temperature-0 reference answers (the server gives no log-probabilities)"
        _record(ctx, best, base, why)
        return None
    return Pending(best, base, [r for r in refs if r is not None])


def run(ctx: StudyContext, job: Pending, session: Session | str) -> dict[str, Any]:
    """The winner's temperature-0 answer to every prompt on ``session`` (or the line saying why its start failed),
    judged against its baseline's references; recorded and said."""
    answers: list[str] | str
    if isinstance(session, str):
        answers = session
    else:
        try:
            got = [session.reference(i, lossless.REFERENCE_TOP_N) for i in range(len(job.references))]
            answers = [a.text if a is not None else "" for a in got]
        except BenchmarkError as e:
            answers = f"a request of the check failed ({str(e)[:200]})"
    if isinstance(answers, str):
        return _record(ctx, job.trial, job.baseline, answers)
    found = lossless.check_outputs(
        answers,
        [r.text for r in job.references],
        job.references,
        tolerance=ctx.lossless_tolerance(),
        min_prefix=ctx.space.verdict.lossless_min_prefix,
    )
    return _record(ctx, job.trial, job.baseline, None, found)


def _record(
    ctx: StudyContext, trial: int, baseline: int | None, skipped: str | None, found: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"trial": trial, "baseline": baseline, "temperature": 0.0}
    if skipped is not None:
        out["skipped"] = skipped
    out |= found or {}
    records.set_greedy_lossless(ctx.study, out)
    ctx.emit(Event("note", trial, {"message": "lossless check at temperature 0: " + text(out)}))
    return out


def text(record: dict[str, Any]) -> str:
    """One line: what was compared and what it found."""
    where = f"trial {record['trial']} against its baseline (trial {record['baseline']}), every prompt greedy"
    if record.get("skipped"):
        return f"not run for {where}: {record['skipped']}"
    verdict = "lossless" if record["ok"] else "LOSSY"
    found = lossless.summary_line(record)
    return f"{verdict}: {where}" + (f"; {found}" if found else "")

"""The lossless check of a space whose prompts sample (a request log's own temperatures, or ``benchmark.temperature``
above 0): the speedup is measured at each prompt's own sampling (the objective), where two answers differ by
chance and cannot be compared. The check runs at temperature 0 on the same prompts instead: every baseline of the
search keeps its reference answers (``Session.reference``, untimed), and once confirmation has a speculative
winner, that config is started once more and answers every prompt greedily the same way; its answers are judged
against its own search baseline's (``lossless.check_outputs``, the greedy check's rules). Recorded as study attr
``greedy_lossless``; the report says which figures come from which measurement."""

from __future__ import annotations

import contextlib
from typing import Any

from autotune import lossless, records
from autotune.config import ReferenceOutput
from autotune.errors import BenchmarkError, LaunchError
from autotune.records import ConfirmationState, TrialRecord
from autotune.study.context import StudyContext
from autotune.study.events import Event
from autotune.verdict import Verdict


def check(ctx: StudyContext, state: ConfirmationState) -> dict[str, Any] | None:
    """The temperature-0 check of confirmation's winner (``state.best``) in a sampling space, once (a resumed study
    keeps it); None for a greedy space (its trials are checked as they run) or without a speculative winner."""
    if ctx.space.benchmark.greedy or state.verdict != Verdict.SPECULATION_WINS or state.best is None:
        return None
    done = records.greedy_lossless(ctx.study)
    if done is not None and done.get("trial") == state.best:
        return done
    by_number = {t.number: t for t in records.trials(ctx.study)}
    best = TrialRecord(by_number[state.best])
    base_number = best.baseline_trial
    refs = TrialRecord(by_number[base_number]).references() if base_number in by_number else []
    out: dict[str, Any] = {"trial": state.best, "baseline": base_number, "temperature": 0.0}
    if not refs or any(r is None for r in refs):
        out["skipped"] = "its baseline has no temperature-0 reference answers (the server gives no log-probabilities)"
    else:
        answers = _greedy_answers(ctx, best, len(refs))
        if isinstance(answers, str):
            out["skipped"] = answers
        else:
            out |= lossless.check_outputs(
                answers,
                [r.text for r in refs if r is not None],
                refs,
                tolerance=ctx.lossless_tolerance(),
                min_prefix=ctx.space.verdict.lossless_min_prefix,
            )
    records.set_greedy_lossless(ctx.study, out)
    ctx.emit(Event("note", state.best, {"message": "lossless check at temperature 0: " + text(out)}))
    return out


def _greedy_answers(ctx: StudyContext, best: TrialRecord, n: int) -> list[str] | str:
    """The config's temperature-0 answer to each of the ``n`` prompts on one fresh start; a line saying why not
    when the start or a request fails."""
    try:
        session = ctx.runner.launch(best.effective_config())
    except LaunchError as e:
        return f"the start for the check failed ({e.kind}: {str(e)[:200]})"
    with contextlib.closing(session):
        answers: list[ReferenceOutput | None] = []
        try:
            for i in range(n):
                answers.append(session.reference(i, lossless.REFERENCE_TOP_N))
        except BenchmarkError as e:
            return f"a request of the check failed ({str(e)[:200]})"
    return [a.text if a is not None else "" for a in answers]


def text(record: dict[str, Any]) -> str:
    """One line: what was compared and what it found."""
    where = f"trial {record['trial']} against its baseline (trial {record['baseline']}), every prompt greedy"
    if record.get("skipped"):
        return f"not run for {where}: {record['skipped']}"
    verdict = "lossless" if record["ok"] else "LOSSY"
    found = lossless.summary_line(record)
    return f"{verdict}: {where}" + (f"; {found}" if found else "")

"""The confirmed winner's one more start after confirmation, for the checks the search's own measurements cannot
make; one start serves both, none when neither is due (or no speculative config wins):

- a space whose prompts sample: the lossless check at temperature 0;
- a request log with a holdout (``benchmark.holdout``): the winner's acceptance on the holdout requests, each at
  its own sampling, against its acceptance on the subset in its search trial (``traffic.acceptance_check``, study
  attr ``traffic_acceptance``). This half of the representativeness check comes after the budget is spent, not
  before: until confirmation the best config is unknown (the baseline's half runs on the first baseline's start).

The plan counts the start (``plan.plan``'s ``winner_check`` phase).

The lossless check of a space whose prompts sample (a request log's own temperatures, or ``benchmark.temperature``
above 0): the speedup is measured at each prompt's own sampling (the objective), where two answers differ by
chance and cannot be compared. The check runs at temperature 0 on the same prompts instead: every baseline of the
search keeps its reference answers (``Session.reference``, untimed), and once confirmation has a speculative
winner, that config answers every prompt greedily the same way on its one more start (``study.winner``, which
may measure the holdout's acceptance on the same start); its answers are judged against its own search
baseline's (``lossless.check_outputs``, the greedy check's rules). Recorded as study attr ``greedy_lossless``;
the report says which figures come from which measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from autotune import lossless, records
from autotune.config import ReferenceOutput
from autotune.errors import BenchmarkError, LaunchError
from autotune.records import ConfirmationState, TrialRecord
from autotune.seam import Session
from autotune.study.context import Event, StudyContext
from autotune.verdict import Verdict


def check(ctx: StudyContext, state: ConfirmationState) -> None:
    """Run the checks due for ``state.best`` on one fresh start of it; a failed start is recorded as why each
    check did not run."""
    if state.verdict != Verdict.SPECULATION_WINS or state.best is None:
        return
    by_number = {t.number: t for t in records.trials(ctx.study)}
    job = greedy_pending(ctx, state.best, by_number)
    done = records.traffic_acceptance(ctx.study)
    holdout = bool(ctx.space.benchmark.holdout) and (done is None or done.get("trial") != state.best)
    if job is None and not holdout:
        return
    best = TrialRecord(by_number[state.best])
    session: Session | str
    try:
        session = ctx.runner.launch(best.effective_config())
    except LaunchError as e:
        session = f"the start for the check failed ({e.kind}: {str(e)[:200]})"
    with contextlib.ExitStack() as stack:
        if not isinstance(session, str):
            stack.callback(session.close)
        if job is not None:
            run_greedy(ctx, job, session)
        if holdout:
            _acceptance(ctx, state.best, best, session)


def _acceptance(ctx: StudyContext, number: int, best: TrialRecord, session: Session | str) -> dict[str, object]:
    """The winner's acceptance length on every holdout request (indexes after the prompts) against its search
    trial's on the subset (``traffic.acceptance_check``); recorded (with why, when not measured) and said."""
    from autotune.traffic import acceptance_check

    out: dict[str, object] = {"trial": number}
    n = len(ctx.space.benchmark.prompts)
    subset = [r.accept_length for r in best.prompt_results()]
    if isinstance(session, str):
        out["skipped"] = session
    else:
        try:
            rest = [session.run_prompt(n + j).accept_length for j in range(len(ctx.space.benchmark.holdout))]
        except BenchmarkError as e:
            rest = None
            out["skipped"] = f"a holdout request failed ({str(e)[:200]})"
        if rest is not None:
            out |= {"subset": subset, "rest": rest}
            found = acceptance_check(number, subset, rest, ctx.space.verdict.min_gain)
            if found is None:
                out["skipped"] = "the server reported no acceptance (or none accepted) on 2 or more requests a side"
            else:
                out |= found.to_dict()
    records.set_traffic_acceptance(ctx.study, out)
    ctx.emit(Event("note", number, {"message": "traffic: " + acceptance_text(out)}))
    return out


def acceptance_text(record: Mapping[str, object]) -> str:
    """One line: the recorded acceptance check, or why it was not measured."""
    if record.get("skipped"):
        where = f"the winner's acceptance on the rest of the log (trial {record['trial']})"
        return f"{where}: not measured: {record['skipped']}"
    return str(record["text"])


@dataclass(frozen=True)
class GreedyPending:
    """The check still to run for the winner ``trial``: its baseline's temperature-0 references."""

    trial: int
    baseline: int
    references: list[ReferenceOutput]


def greedy_pending(ctx: StudyContext, best: int, by_number: dict[int, FrozenTrial]) -> GreedyPending | None:
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
        _greedy_record(ctx, best, base, why)
        return None
    return GreedyPending(best, base, [r for r in refs if r is not None])


def run_greedy(ctx: StudyContext, job: GreedyPending, session: Session | str) -> dict[str, Any]:
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
        return _greedy_record(ctx, job.trial, job.baseline, answers)
    found = lossless.check_outputs(
        answers,
        [r.text for r in job.references],
        job.references,
        tolerance=ctx.lossless_tolerance(),
        min_prefix=ctx.space.verdict.lossless_min_prefix,
    )
    return _greedy_record(ctx, job.trial, job.baseline, None, found)


def _greedy_record(
    ctx: StudyContext, trial: int, baseline: int | None, skipped: str | None, found: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"trial": trial, "baseline": baseline, "temperature": 0.0}
    if skipped is not None:
        out["skipped"] = skipped
    out |= found or {}
    records.set_greedy_lossless(ctx.study, out)
    ctx.emit(Event("note", trial, {"message": "lossless check at temperature 0: " + greedy_text(out)}))
    return out


def greedy_text(record: dict[str, Any]) -> str:
    """One line: what was compared and what it found."""
    where = f"trial {record['trial']} against its baseline (trial {record['baseline']}), every prompt greedy"
    if record.get("skipped"):
        return f"not run for {where}: {record['skipped']}"
    verdict = "lossless" if record["ok"] else "LOSSY"
    found = lossless.summary_line(record)
    return f"{verdict}: {where}" + (f"; {found}" if found else "")

"""The confirmed winner's one more start after confirmation, for the checks the search's own measurements cannot
make; one start serves both, none when neither is due (or no speculative config wins):

- a space whose prompts sample: the lossless check at temperature 0 (``study.greedy``);
- a request log with a holdout (``benchmark.holdout``): the winner's acceptance on the holdout requests, each at
  its own sampling, against its acceptance on the subset in its search trial (``traffic.AcceptanceCheck``, study
  attr ``traffic_acceptance``). This half of the representativeness check comes after the budget is spent, not
  before: until confirmation the best config is unknown (the baseline's half runs on the first baseline's start).

The plan counts the start (``plan.plan``'s ``winner_check`` phase)."""

from __future__ import annotations

import contextlib
from typing import Any

from autotune import records
from autotune.errors import BenchmarkError, LaunchError
from autotune.records import ConfirmationState, TrialRecord
from autotune.runner import Session
from autotune.study import greedy
from autotune.study.context import Event, StudyContext
from autotune.verdict import Verdict


def check(ctx: StudyContext, state: ConfirmationState) -> None:
    """Run the checks due for ``state.best`` on one fresh start of it; a failed start is recorded as why each
    check did not run."""
    if state.verdict != Verdict.SPECULATION_WINS or state.best is None:
        return
    by_number = {t.number: t for t in records.trials(ctx.study)}
    job = greedy.pending(ctx, state.best, by_number)
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
            greedy.run(ctx, job, session)
        if holdout:
            _acceptance(ctx, state.best, best, session)


def _acceptance(ctx: StudyContext, number: int, best: TrialRecord, session: Session | str) -> dict[str, Any]:
    """The winner's acceptance length on every holdout request (indexes after the prompts) against its search
    trial's on the subset (``traffic.acceptance_check``); recorded (with why, when not measured) and said."""
    from autotune.traffic import acceptance_check

    out: dict[str, Any] = {"trial": number}
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
    ctx.emit(Event("note", number, {"message": "traffic: " + text(out)}))
    return out


def text(record: dict[str, Any]) -> str:
    """One line: the recorded acceptance check, or why it was not measured."""
    if record.get("skipped"):
        where = f"the winner's acceptance on the rest of the log (trial {record['trial']})"
        return f"{where}: not measured: {record['skipped']}"
    return str(record["text"])

"""What a study's server starts cost: a start's timed benchmark, and confirmation's starts (as their rounds
recorded them, or estimated for rounds recorded before starts were kept). Pure over the study's records;
``autotune.report`` sums them into the report's ``gpu_time``."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.records import ConfirmationState, RoundStarts, TrialRecord

#: the end of a failed start's label in ``confirmation_starts``
_FAILED = ", a start that failed"


def _mean(xs: list[float | None]) -> float:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else 0.0


def bench_seconds(t: FrozenTrial) -> float:
    """A start's timed benchmark: its prompts one after another (level 1), then each higher load level it ran."""
    r = TrialRecord(t)
    levels = sum(x.seconds for x in r.levels if x.level > 1)
    return sum(p.seconds for p in r.prompt_results()) + levels


def warmup_seconds(t: FrozenTrial) -> float:
    """A start's untimed warm-up passes of the prompts (``autotune.warmup``; 0 without)."""
    return TrialRecord(t).warmup.seconds


def failed_starts(t: FrozenTrial) -> list[float]:
    """The server seconds of a trial's starts that failed (``TrialRecord.failed_starts``): each held the machine
    until it failed, and none of it is in the trial's own start-up or timed figures."""
    return [x.seconds for x in TrialRecord(t).failed_starts]


def confirmation_failed_s(conf: ConfirmationState) -> list[float]:
    """The server seconds of confirmation's starts that failed: those before a start of the same config in its
    round (``StartRecord.failed_s``), a fresh baseline's that all failed (``lost_s``), a dropped candidate's."""
    out: list[float] = []
    for rnd in [*(conf.check_rounds or []), *conf.rounds]:
        st = rnd.starts or RoundStarts()
        out += [s for r in [*st.baseline.values(), *st.candidates.values()] for s in r.failed_s]
    out += [float(s) for s in conf.lost_s or []]
    out += [s for f in conf.failed or [] for s in f.failed_s]
    return out


def confirmation_starts(trials: list[FrozenTrial], conf: ConfirmationState) -> list[tuple[str, float, float]]:
    """Confirmation's server starts in order, each ``(label, startup s, benchmark s)``: as recorded (the rounds'
    start records: the timed prompts and load levels, and the warm-up passes; a start that failed before one of
    them, or a candidate's that all failed, as its server seconds), or for rounds recorded without them estimated:
    the search's mean startup, and a complete search start's benchmark work (its seconds x its objective) over the
    start's tok/s."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE and not TrialRecord(t).is_duplicate]
    work = _mean([bench_seconds(t) * t.value for t in complete if t.value])
    startup = _mean([TrialRecord(t).startup_s for t in complete])
    out = []
    check = conf.check_rounds or []
    for i, rnd in enumerate([*check, *conf.rounds]):
        name = f"baseline check {i + 1}" if i < len(check) else f"confirm round {i - len(check) + 1}"
        st = rnd.starts or RoundStarts()  # recorded: each start's own start-up and timed prompts
        starts = [(f"baseline (graphs {'on' if g else 'off'})", v, st.baseline.get(g)) for g, v in rnd.baseline.items()]
        starts += [(f"#{n}", v, st.candidates.get(n)) for n, v in rnd.candidates.items()]
        for who, v, r in starts:
            if r:
                out += [(f"{name}: {who}{_FAILED}", s, 0.0) for s in r.failed_s]
            if r or v:
                out.append(
                    (f"{name}: {who}", r.startup_s, r.seconds + r.warmup.seconds)
                    if r
                    else (f"{name}: {who}", startup, work / v)
                )
    out += [(f"confirmation: a fresh baseline{_FAILED}", float(s), 0.0) for s in conf.lost_s or []]
    for f in conf.failed or []:  # candidates whose starts all failed in a round: out of the race
        who = f"confirm round {f.round}: #{f.trial}"
        out += [(f"{who}{_FAILED}", s, 0.0) for s in f.failed_s]
    return out


__all__ = ["bench_seconds", "confirmation_failed_s", "confirmation_starts", "failed_starts", "warmup_seconds"]

"""What a study's server starts cost: a start's timed benchmark, and confirmation's starts (as their rounds
recorded them, or estimated for rounds recorded before starts were kept). Pure over the study's records;
``autotune.report`` sums them into the report's ``gpu_time``."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.records import ConfirmationState, RoundStarts, TrialRecord


def _mean(xs: list[float | None]) -> float:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else 0.0


def bench_seconds(t: FrozenTrial) -> float:
    """A start's timed benchmark: its prompts one after another (level 1), then each higher load level it ran."""
    r = TrialRecord(t)
    levels = sum(x.get("seconds") or 0.0 for x in r.levels if int(x["level"]) > 1)
    return sum(p.get("seconds") or 0.0 for p in r.prompts) + levels


def warmup_seconds(t: FrozenTrial) -> float:
    """A start's untimed warm-up passes of the prompts (``autotune.warmup``; 0 without)."""
    return TrialRecord(t).warmup.seconds


def confirmation_starts(trials: list[FrozenTrial], conf: ConfirmationState) -> list[tuple[str, float, float]]:
    """Confirmation's server starts in order, each ``(label, startup s, benchmark s)``: as recorded (the rounds'
    start records: the timed prompts and the warm-up passes), or for rounds recorded without them estimated: the
    search's mean startup, and a complete search start's benchmark work (its seconds x its objective, times the
    round's passes) over the start's tok/s."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE and not TrialRecord(t).is_duplicate]
    work = _mean([bench_seconds(t) * t.value for t in complete if t.value])
    startup = _mean([TrialRecord(t).startup_s for t in complete if not TrialRecord(t).shared_start])
    out = []
    check = conf.check_rounds or []
    for i, rnd in enumerate([*check, *conf.rounds]):
        name = f"baseline check {i + 1}" if i < len(check) else f"confirm round {i - len(check) + 1}"
        st = rnd.starts or RoundStarts()  # recorded: each start's own start-up and timed prompts
        starts = [(f"baseline (graphs {'on' if g else 'off'})", v, st.baseline.get(g)) for g, v in rnd.baseline.items()]
        starts += [(f"#{n}", v, st.candidates.get(n)) for n, v in rnd.candidates.items()]
        for who, v, r in starts:
            if r or v:
                out.append(
                    (f"{name}: {who}", r.startup_s, r.seconds + r.warmup.seconds)
                    if r
                    else (f"{name}: {who}", startup, work * rnd.passes / v)
                )
    return out


__all__ = ["bench_seconds", "confirmation_starts", "warmup_seconds"]

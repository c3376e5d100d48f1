"""The study's commands: ``validate``, ``study`` (one worker or one per GPU slot, then the confirmation),
``worker`` (join a running study), ``confirm`` and ``report``. Each returns what the CLI renders.

``autotune study --gpus A --gpus B`` starts one ``autotune worker`` process per GPU slot (``run_slots``, its own
session, its log in ``studies/NAME/logs/slot-i/worker.log``); SIGTERM / Ctrl-C is passed on to exactly those
processes (bounded waits, then SIGKILL), and the confirmation runs once after no trial of any worker runs."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.commands.context import (
    CommandOptions,
    Context,
    Note,
    launcher_problems,
    preflight,
    reap,
    require_launcher,
)

if TYPE_CHECKING:
    import optuna

    from autotune.report import Report
    from autotune.slots import Slot

#: a context manager around the search: it yields the listener of the study's events (the CLI: the live view)
Watch = Callable[[], AbstractContextManager[Any]]


@contextlib.contextmanager
def unwatched() -> Iterator[None]:
    yield None


@dataclass
class StudyResult:
    """A study (after ``study``, ``confirm`` or for ``report``) and its report (``report --json``)."""

    study: Any
    report: Report


@dataclass
class WorkerResult:
    used: int  # trials of the study used by every worker
    n_trials: int


def validate(ctx: Context, *, stand_ins: bool = True) -> list[Any]:
    """The static drafter/target checks (``checks.Problem`` list) and the server's launcher on this machine
    (``launcher_problems``; not with ``--simulate``); with ``--simulate`` they read the simulator's stand-ins, and
    ``stand_ins`` adds a warning for each real path not on this machine (``check_stand_ins``)."""
    from autotune.backends import check_space
    from autotune.checks import check_stand_ins

    problems = check_space(ctx.run_space, ctx.backend) + launcher_problems(ctx) + traffic_problems(ctx.space)
    return problems + check_stand_ins(ctx.space) if ctx.simulated and stand_ins else problems


def traffic_problems(space: Any) -> list[Any]:
    """A request-log space's subset, its validity guards and (sampled requests) which figures are measured how, as
    warnings said before any GPU time."""
    from autotune.checks import Problem

    t = space.benchmark.traffic
    if t is None:
        return []
    field = "benchmark.requests_file"
    rep = t.representativeness.get("input_tokens") or {}
    out = [
        Problem(
            "warning" if t.guards else "info",
            f"traffic: {t.picked} of {t.log_requests} logged requests picked (stratified by length and {t.by}"
            + (f"; {t.holdout} more from the rest to check them against" if t.holdout else "")
            + "); "
            + (
                f"input length p10/p50/p90 {_trio(rep['subset_p10_p50_p90'])} against the log's "
                f"{_trio(rep['log_p10_p50_p90'])} (KS p = {rep['ks_p']:.2f})"
                if rep
                else "too few to compare lengths"
            ),
            field=field,
            file=t.path,
        )
    ]
    out += [Problem("warning", f"traffic guard {name}: {text}", field=field, file=t.path) for name, text in t.guards]
    if not space.benchmark.greedy:
        hot = sum(space.benchmark.temperature_for(p) > 0 for p in space.benchmark.prompts)
        out.append(
            Problem(
                "warning",
                f"traffic: {hot} of {len(space.benchmark.prompts)} picked requests sample (temperature > 0): the "
                "speedup is measured at each request's own sampling, and the lossless check at temperature 0 on the "
                "same prompts: the baselines' reference answers against the winner's, on one more start after "
                "confirmation",
                field=field,
                file=t.path,
            )
        )
    return out


def _trio(q: Any) -> str:
    return "/".join(f"{x:.0f}" for x in q)


def run_study(ctx: Context, *, note: Note, watch: Watch = unwatched) -> StudyResult | None:
    """``autotune study``: validate (unless skipped), reap, check the ports, open the study, search (one worker, or
    one ``autotune worker`` per GPU slot), confirm, build the report (None: --dry-run, the plan was the output)."""
    from autotune.errors import UserError, ValidationFailed
    from autotune.plan import render as render_plan
    from autotune.records import set_study_n_trials
    from autotune.study.storage import run_lock

    args = ctx.args
    if args.n_trials is not None and args.n_trials < 1:
        raise UserError(f"--n-trials must be at least 1 but got {args.n_trials}")
    # the launcher is checked even with --skip-validation: a study that cannot start its server writes nothing
    problems = launcher_problems(ctx) if args.skip_validation else validate(ctx, stand_ins=False)
    errors = [p for p in problems if p.severity == "error"]
    for p in problems:
        note(f"{p.severity}: {p}")
    if errors:
        raise ValidationFailed([f"{p}" for p in errors] + ["the study was not started (nothing written)"])
    slots = ctx.slots(list(args.gpus))
    if len(slots) > 1:
        require_server_database(ctx.storage_url, f"--gpus with {len(slots)} slots")
    n_trials = args.n_trials if args.n_trials is not None else ctx.space.budget.n_trials
    if args.dry_run:
        note(render_plan(study_plan(ctx, _existing_study(ctx), n_trials)))
        return None
    # one orchestrator per study: taken before anything else touches it (a second run exits 2 here, before
    # reaping servers, claiming trials or recovering "killed" ones that are another run's). A search-only run on a
    # server database is an extra worker of a shared study (as `autotune worker`): it takes no run lock
    shared = not ctx.storage_url.startswith("sqlite")
    with contextlib.nullcontext() if (args.no_confirm and shared) else run_lock(ctx.storage_url, ctx.study_name):
        reap(ctx, note)
        preflight(ctx, slots)
        ctx.ensure_dirs()
        seed = args.seed if args.seed is not None else (ctx.space.simulate.seed if ctx.space.simulate else None)
        new_file = _new_sqlite_file(ctx.storage_url)
        study = ctx.open_study(create=True, seed=seed)
        kept = resuming_line(study, ctx.study_name)
        if kept:
            note(kept)
        note(render_plan(study_plan(ctx, study, n_trials)))
        set_study_n_trials(study, n_trials)  # what `autotune worker` on other nodes and slots reads
        try:
            return _search_and_confirm(ctx, study, slots, seed, n_trials, note, watch)
        except UserError:
            if not kept:  # bad input found at launch (a port taken since the check): a new study leaves nothing
                _roll_back_new_study(ctx, study, new_file)
            raise


def _new_sqlite_file(url: str) -> Path | None:
    """The SQLite file of ``url`` when this run is about to create it (else None)."""
    from autotune.study.storage import sqlite_path

    path = sqlite_path(url)
    return path if path is not None and not path.exists() else None


def _roll_back_new_study(ctx: Context, study: Any, new_file: Path | None) -> None:
    """Remove a study this run created when nothing in it was measured: the exit-2 promise (nothing written)."""
    import optuna

    from autotune.records import TrialRecord
    from autotune.study import _optuna

    if any(TrialRecord(t).measured for t in study.get_trials(deepcopy=False)):
        return
    optuna.delete_study(study_name=ctx.study_name, storage=_optuna.storage(study))
    rdb = _optuna.rdb_storage(study)
    if rdb is not None:
        rdb.engine.dispose()
    if new_file is not None and not optuna.get_all_study_names(ctx.storage_url):
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{new_file}{suffix}").unlink(missing_ok=True)


def _search_and_confirm(
    ctx: Context, study: Any, slots: list[Any], seed: int | None, n_trials: int, note: Note, watch: Watch
) -> StudyResult:
    from autotune.render import publish
    from autotune.report import build_report

    args = ctx.args
    if len(slots) > 1:
        _run_slots(ctx, study, slots, seed, n_trials, note)
    else:
        runner, clock = ctx.runner(seed=seed or 0, slot=slots[0] if slots else None)
        shared = not ctx.storage_url.startswith("sqlite")  # other workers may still be measuring
        with watch() as listener:
            if listener is not None:
                listener(_plan_event(ctx, study, n_trials))
            _search(ctx, ctx.run_space, study, n_trials, runner, clock, listener, not args.no_confirm and not shared)
            if shared and not args.no_confirm:
                _confirm_after_workers(ctx, study, runner, clock, listener, note)
    report = build_report(study)
    publish(study, report)  # the study's dashboard note: verdict, recommended trial, pruned and failed reasons
    return StudyResult(study, report)


def _search(
    ctx: Context, space: Any, study: Any, n_trials: int, runner: Any, clock: Any, listener: Any, confirm: bool
) -> None:
    """The search (``study.run``); ``confirm``: and then the confirmation."""
    from autotune import study as st
    from autotune.evidence import Evidence

    evidence = Evidence(ctx.artifact_dir)
    st.run(
        space,
        ctx.backend,
        runner,
        study,
        n_trials=n_trials,
        clock=clock,
        listener=listener,
        confirm=confirm,
        evidence=evidence,
    )


def _run_slots(ctx: Context, study: Any, slots: list[Any], seed: int | None, n_trials: int, note: Note) -> None:
    """One ``autotune worker`` process per GPU slot, in parallel; then, once no trial of any worker runs, the
    confirmation once, on the first slot."""
    from autotune.errors import AutotuneError

    args = ctx.args
    results = run_slots(
        slots,
        lambda sl: worker_argv(args, sl, seed, ctx.storage_url),
        ctx.studies_dir / ctx.study_name / "logs",
        study,
        n_trials,
        note,
    )
    reap(ctx, note)  # the server of a worker that was killed (its PID record entry outlives it)
    for w, code in results:
        if code != 0:
            note(f"slot {w.slot.index}: worker exited with code {code}; end of its log ({w.log_path}):\n{w.log_tail()}")
    from autotune.records import counted_trials

    left = max(0, n_trials - counted_trials(study))
    if left > 0:
        raise AutotuneError(f"the workers stopped with {left} of {n_trials} trials left; re-run to resume")
    if args.no_confirm:
        return
    runner, clock = ctx.runner(seed=seed or 0, slot=slots[0])
    _confirm_after_workers(ctx, study, runner, clock, None, note)


def _confirm_after_workers(ctx: Context, study: Any, runner: Any, clock: Any, listener: Any, note: Note) -> None:
    """The confirmation, once, after the trials of every worker of a shared study ended (bounded wait)."""
    from autotune import study as st
    from autotune.study.context import trial_limit_s

    orch = st.Orchestrator(ctx.run_space, ctx.backend, runner, study, clock=clock, listener=listener)
    still = wait_for_trials(study, trial_limit_s(orch.ctx))
    if still:
        note(f"{still} trial(s) of other workers still running; confirming without them")
    orch.confirm()


def run_worker(ctx: Context, *, note: Note, watch: Watch = unwatched) -> WorkerResult:
    """``autotune worker``: join a running study (same space, checked), search only."""
    from autotune.records import counted_trials, study_n_trials
    from autotune.study.storage import check_worker

    args = ctx.args
    require_server_database(ctx.storage_url, "autotune worker")
    slot = None
    if args.gpus:
        from autotune.slots import Slot, check_fits, parse_gpus

        slot = Slot(args.slot, parse_gpus(args.gpus[0]), args.gpus[0])
        check_fits([slot], ctx.space, ctx.backend.parallel_size_flags, args.space)
    elif args.slot:
        from autotune.errors import UserError

        raise UserError("--slot needs --gpus (the slot's GPUs)")
    study = ctx.open_study(create=False, seed=args.seed)
    n_trials = study_n_trials(study) or ctx.space.budget.n_trials
    check_worker(study, ctx.space, args.space)
    require_launcher(ctx, "the worker was not started")
    reap(ctx, note)
    preflight(ctx, None if slot is None else [slot])
    ctx.ensure_dirs()
    run_space = dataclasses.replace(ctx.run_space, budget=dataclasses.replace(ctx.run_space.budget, n_trials=n_trials))
    runner, clock = ctx.runner(seed=args.seed or 0, slot=slot)
    with watch() as listener:
        _search(ctx, run_space, study, n_trials, runner, clock, listener, False)
    return WorkerResult(counted_trials(study), n_trials)


def run_confirm(ctx: Context, *, note: Note) -> StudyResult:
    """``autotune confirm``: (re-)run the confirmation of an existing study."""
    from autotune.records import reopen_confirmation
    from autotune.report import build_report
    from autotune.study import Orchestrator
    from autotune.study.storage import check_resume, run_lock

    study = ctx.open_study(create=False)
    check_resume(study, ctx.space, ctx.storage_url)  # confirming under another space would deploy outside it
    require_launcher(ctx, "the confirmation was not started")
    with run_lock(ctx.storage_url, ctx.study_name):
        reap(ctx, note)
        preflight(ctx)
        ctx.ensure_dirs()
        runner, clock = ctx.runner()
        reopen_confirmation(study)
        Orchestrator(ctx.run_space, ctx.backend, runner, study, clock=clock).confirm()
    return StudyResult(study, build_report(study))


def _plan_event(ctx: Context, study: Any, n_trials: int) -> Any:
    """The ``plan`` event the live view reads its progress against."""
    from autotune.study import Event

    p = study_plan(ctx, study, n_trials)
    return Event("plan", data={"n_trials": n_trials, "used": p.kept, "starts": list(p.starts)})


def _existing_study(ctx: Context) -> Any:
    """The study if it exists already (for a plan that knows what is measured), else None; creates nothing. A study
    of another space is refused as the run would refuse it (``storage.check_resume``)."""
    from autotune.errors import UserError
    from autotune.study.storage import check_resume

    try:
        study = ctx.open_study(create=False)
    except UserError:
        return None
    check_resume(study, ctx.space, ctx.storage_url)
    return study


def resuming_line(study: Any, name: str) -> str | None:
    """The line saying what a resumed study keeps; None for a new one."""
    from collections import Counter

    trials = study.get_trials(deepcopy=False)
    if not trials:
        return None
    by_state = Counter(t.state.name for t in trials)
    parts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(by_state.items()))
    return f"resuming study {name}: {len(trials)} trials kept ({parts}); only what is left of the budget runs"


def study_plan(ctx: Context, study: Any, n_trials: int) -> Any:
    """The plan of this study (``autotune.plan``): what is left of the budget, confirmation's rounds, and the GPU
    time at the study's own measured costs, else the simulator's, else counts only."""
    from autotune import plan
    from autotune.measure import warmup_rule
    from autotune.records import TrialRecord, greedy_lossless, traffic_acceptance, traffic_holdout, used_budget

    space = ctx.run_space
    used = used_budget(study)[0] if study is not None else 0
    costs = None
    if study is not None:
        recs = [TrialRecord(t) for t in study.get_trials(deepcopy=False)]
        costs = plan.measured_costs(
            [r.startup_s for r in recs if r.startup_s],
            [p.seconds for r in recs for p in r.prompt_results() if p.seconds],
        )
    if costs is None and ctx.simulated:
        from autotune.sim.runner import costs as sim_costs

        costs = sim_costs(space, ctx.backend)
    from autotune.slots import gpus_needed

    v = space.verdict
    return plan.plan(
        n_trials=n_trials,
        used=used,
        graph_settings=len(space.search.cuda_graph),
        levels=space.benchmark.concurrency,
        confirm_top=v.confirm_top,
        repeats=v.repeats,
        max_repeats=v.max_rounds,
        confirm=not ctx.args.no_confirm,
        n_prompts=len(space.benchmark.prompts),
        warmup=space.benchmark.warmup_requests,
        gpus=gpus_needed(space, ctx.backend.parallel_size_flags)[0],
        costs=costs,
        settle_after=_settle_after(ctx, n_trials),
        warmup_passes=warmup_rule(space).passes,
        methods=sum(1 for m in space.search.methods if ctx.backend.method_unavailable(space, m) is None),
        holdout=0 if study is not None and traffic_holdout(study) else len(space.benchmark.holdout),
        greedy_check=not space.benchmark.greedy and (study is None or greedy_lossless(study) is None),
        holdout_acceptance=0 if study is not None and traffic_acceptance(study) else len(space.benchmark.holdout),
        **_level_phase_left(ctx, study),
    )


def _level_phase_left(ctx: Context, study: Any) -> dict[str, int]:
    """With load levels, what is left of the level phase after the search (``autotune.study.ladder``): its rounds of
    per-level picks and the ladder's rungs (the most; a resumed study's recorded progress taken off)."""
    from autotune.records import LevelPhase, level_phase
    from autotune.study.ladder import LEVEL_ROUNDS, MAX_RUNGS

    space = ctx.run_space
    if not space.benchmark.loaded:
        return {}
    done = level_phase(study) if study is not None else LevelPhase()
    ladder = 0 if done.ladder or ctx.backend.schedule_knob is None else MAX_RUNGS
    return {"level_rounds": max(0, LEVEL_ROUNDS - done.rounds), "ladder_rungs": ladder}


def _settle_after(ctx: Context, n_trials: int) -> int | None:
    """The fewest trials before the search may stop settled (``autotune.study.search.settled``): the baselines,
    then the server defaults and the design (``search.design_count``'s rule) or the surrogate's minimum; None when
    the search runs its whole budget (``budget.stop_when_settled`` off, or a backend that enumerates no grid)."""
    from autotune.study.search import MIN_SURROGATE_POINTS, design_total

    space = ctx.run_space
    if not space.budget.stop_when_settled:
        return None
    grid = ctx.backend.grid(space)
    if not grid:
        return None
    graphs = len(space.search.cuda_graph)
    seeds = [
        dataclasses.replace(c, cuda_graph=bool(g)) for g in space.search.cuda_graph for c in ctx.backend.defaults(space)
    ]
    design = design_total(space, grid, seeds, n_trials)
    return min(n_trials, graphs + max(len(seeds) + design, MIN_SURROGATE_POINTS))


@dataclass(frozen=True)
class Progress:
    """Where a study stands that is not finished."""

    study: str
    holder: str | None  # the autotune running it now (``runlock.running``); None: nothing runs it
    trials: int
    confirmation: str  # "confirmation not done", "confirmation under way (2 rounds so far)", ...

    def text(self) -> str:
        if self.holder:
            return (
                f"study {self.study!r} is still running ({self.holder}): {self.trials} trials so far, "
                f"{self.confirmation}; figures may change"
            )
        return f"study {self.study!r} is not finished: {self.trials} trials, {self.confirmation}"

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "text": self.text()}


def progress(ctx: Context, study: Any) -> Progress | None:
    """None for a finished study (its confirmation done, no autotune running it); else who runs it (the run lock,
    ``runlock.running``), its trials and how far its confirmation got (the study attr ``confirmation``)."""
    from autotune.records import confirmation
    from autotune.study.storage import running

    holder = running(ctx.storage_url, ctx.study_name)
    conf = confirmation(study)
    if conf is not None and conf.done and holder is None:
        return None
    if conf is None:
        phase = "confirmation not done"
    elif conf.done:
        phase = "confirmation done, being run again"
    else:
        n = len(conf.rounds)
        phase = f"confirmation {'under way' if holder else 'cut short'} ({n} round{'' if n == 1 else 's'} so far)"
    return Progress(ctx.study_name, holder, len(study.get_trials(deepcopy=False)), phase)


def load_report(ctx: Context, *, note: Note | None = None) -> StudyResult:
    """``autotune report``: an existing study and its report. A study that an autotune runs now is said to be
    running (``note``, and the report's key ``running``): its figures may change; a finished one is reported as it
    is."""
    from autotune.report import build_report

    study = ctx.open_study(create=False)
    now = progress(ctx, study)
    if now is None or now.holder is None:
        return StudyResult(study, build_report(study))
    if note is not None:
        note(now.text())
    return StudyResult(study, build_report(study, running=now.to_dict()))


#: wall seconds a worker gets to stop its server after SIGTERM, before SIGKILL
STOP_TIMEOUT_S = 120.0
#: wall seconds between two looks at the workers and the study
POLL_S = 1.0


def require_server_database(url: str, what: str) -> None:
    """Parallel workers need a database that serves several processes (PostgreSQL; MySQL works too)."""
    if url.startswith("sqlite"):
        from autotune.errors import UserError

        raise UserError(
            f"{what} needs a server database shared by the workers, but the storage is SQLite ({url}): SQLite has "
            "no row locks (two workers could take the same queued trial) and no heartbeat across processes. Use "
            "--storage postgresql+psycopg://USER@HOST/DB (scripts/start_postgres.sh starts one locally)"
        )


def worker_argv(args: CommandOptions, slot: Slot, seed: int | None, storage: str) -> list[str]:
    """The ``autotune worker`` command of one slot (flags of the ``autotune study`` that started it)."""
    argv = [sys.executable, "-m", "autotune", "worker", str(args.space), "--storage", storage]
    argv += ["--studies-dir", str(args.studies_dir), "--gpus", slot.spec, "--slot", str(slot.index), "--json"]
    if seed is not None:
        argv += ["--seed", str(seed + slot.index)]
    if args.simulate:
        argv.append("--simulate")
    if args.in_process:
        argv.append("--in-process")
    if args.heartbeat_s is not None:
        argv += ["--heartbeat-s", str(args.heartbeat_s)]
    return argv


@dataclass
class WorkerProcess:
    slot: Slot
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# autotune: {self.argv!r}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def poll(self) -> int | None:
        assert self.popen is not None
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)

    def wait(self, timeout_s: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_workers(workers: list[WorkerProcess], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to each worker we started (each stops its own server), a bounded wait, SIGKILL to survivors."""
    for w in workers:
        w.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for w in workers:
        if w.popen is not None and w.wait(max(0.0, deadline - time.monotonic())) is None:
            w.signal(signal.SIGKILL)
            w.wait(10.0)


def run_slots(
    slots: list[Slot],
    argv_of: Callable[[Slot], list[str]],
    log_dir: Path,
    study: optuna.Study,
    n_trials: int,
    progress: Callable[[str], None],
) -> list[tuple[WorkerProcess, int]]:
    """Start one worker per slot, wait for all of them, return each with its exit code; ``progress`` says what
    they do."""
    from autotune import records

    workers = [WorkerProcess(sl, argv_of(sl), log_dir / sl.name / "worker.log") for sl in slots]
    try:
        for w in workers:
            w.start()
            assert w.popen is not None
            gpus = w.slot.cuda_visible_devices
            progress(f"slot {w.slot.index} (GPUs {gpus}): worker pid {w.popen.pid}, log {w.log_path}")
        last = -1
        while any(w.poll() is None for w in workers):
            time.sleep(POLL_S)
            done, running = records.used_budget(study)
            if done != last:
                last = done
                progress(f"{done}/{n_trials} trials done, {running} running")
    except BaseException:
        stop_workers(workers)
        raise
    return [(w, int(w.poll() or 0)) for w in workers]


def wait_for_trials(study: optuna.Study, limit_s: float) -> int:
    """Wait until no trial of any worker runs (failing lost workers' trials on the way), at most ``limit_s``;
    returns how many still run."""
    import optuna
    from optuna.trial import TrialState

    from autotune import records

    deadline = time.monotonic() + limit_s
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        running = len(records.trials(study, (TrialState.RUNNING,)))
        if running == 0 or time.monotonic() >= deadline:
            return running
        time.sleep(POLL_S)

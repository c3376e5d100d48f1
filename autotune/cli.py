"""The command line: parse, one library call, render, exit code.

Exit codes: 0 done; 1 a failure while running (server, benchmark); 2 bad input (space file, flags, a port in
use, failed validation), nothing written; 130 interrupted (the server was stopped; re-run to resume).
Messages go to stderr, data (tables, JSON, commands) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors: exit 2 like ours
        self.print_usage(sys.stderr)
        print(f"autotune: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("space", help="space file (YAML)")
    p.add_argument(
        "--simulate",
        action="store_true",
        help="use the built-in simulated server (scenario from the space's `simulate:` block)",
    )
    p.add_argument(
        "--storage", help="Optuna storage URL (default: the space's `storage:` or sqlite:///studies/NAME.db)"
    )
    p.add_argument("--studies-dir", default="studies", help="where studies, logs and reports are written")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="with --simulate: run the simulator's model in-process on a virtual clock (no processes, "
        "no waiting); for experiments",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")


def _add_heartbeat(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--heartbeat-s",
        type=int,
        default=None,
        metavar="S",
        help="seconds between a running trial's heartbeats on a server database (default 60); a trial missing "
        "3 in a row is failed and retried once",
    )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autotune", description="Tune speculative decoding for an LLM inference server.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("study", help="measure the baseline, search with Optuna, confirm, give a verdict")
    _add_common(s)
    s.add_argument("--n-trials", type=int, help="the study's total trial budget (re-running resumes)")
    s.add_argument("--seed", type=int, default=None, help="sampler seed")
    s.add_argument("--no-confirm", action="store_true", help="search only (extra workers of a shared study)")
    s.add_argument("--json", action="store_true", help="print the final report as JSON")
    s.add_argument("--skip-validation", action="store_true", help="do not run the static drafter checks first")
    s.add_argument(
        "--gpus",
        action="append",
        default=[],
        metavar="LIST",
        help="a GPU slot (e.g. 0-3); repeat for one worker per slot in parallel (needs PostgreSQL --storage)",
    )
    _add_heartbeat(s)

    w = sub.add_parser("worker", help="join a running study from another node or GPU slot (search only)")
    _add_common(w)
    w.add_argument("--gpus", metavar="LIST", help="this worker's GPUs (CUDA_VISIBLE_DEVICES), e.g. 4-7")
    w.add_argument("--slot", type=int, default=0, help="slot number on this host: port offset and log folder")
    w.add_argument("--seed", type=int, default=None, help="sampler seed")
    w.add_argument("--json", action="store_true", help="no live view")
    _add_heartbeat(w)

    b = sub.add_parser("bench", help="measure one configuration (no study)")
    _add_common(b)
    b.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config value: drafter=NAME|none, cuda_graph=true|false, or a backend knob (repeatable)",
    )
    b.add_argument("--json", action="store_true")

    r = sub.add_parser("report", help="summarise a study (text, --json, --html)")
    _add_common(r)
    r.add_argument("--json", action="store_true")
    r.add_argument("--html", metavar="PATH", help="also write an HTML report to PATH")

    e = sub.add_parser("export", help="export the recommended deployment (or one trial's), with its provenance")
    _add_common(e)
    e.add_argument(
        "--format",
        default="yaml",
        help="sglang|command (launch command), yaml|json (server args and provenance), env (shell env file), "
        "compose (docker-compose service), k8s (Kubernetes Deployment), vllm (with load levels: the "
        "--speculative-config schedule); default yaml",
    )
    e.add_argument("--trial", type=int, help="export this trial's config instead of the recommended one")
    e.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    e.add_argument("--image", help="compose/k8s: container image (default: the backend's image for server.version)")
    e.add_argument("--gpus", type=int, help="compose/k8s: GPUs to reserve (default: from CUDA_VISIBLE_DEVICES or TP)")
    e.add_argument("--name", help="compose/k8s: service / Deployment name (default: the space's name)")

    rv = sub.add_parser(
        "reverify", help="measure an exported config and its baseline again: does its speedup still hold?"
    )
    rv.add_argument("exported", help="a file written by `autotune export` (any format)")
    rv.add_argument("--simulate", action="store_true", help="measure on the simulator (the space's `simulate:`)")
    rv.add_argument("--repeats", type=int, help="interleaved rounds of baseline + config (default verdict.repeats)")
    rv.add_argument("--space", dest="space_override", metavar="SPACE", help="space file (default: the one exported)")
    rv.add_argument("--studies-dir", default="studies", help="where server logs are written")
    rv.add_argument("--in-process", action="store_true", help="with --simulate: the simulator's model in-process")
    rv.add_argument("--json", action="store_true", help="print the result as JSON")
    rv.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")

    v = sub.add_parser("validate", help="static checks of the space and its drafter checkpoints (no server)")
    _add_common(v)

    c = sub.add_parser("confirm", help="(re-)run the confirmation phase of a study")
    _add_common(c)
    c.add_argument("--json", action="store_true")

    d = sub.add_parser("dashboard", help="open the study in optuna-dashboard (bound to 127.0.0.1)")
    _add_common(d)
    d.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    d.add_argument("--port", type=int, default=8080)
    return p


# ---------------------------------------------------------------------------------------------- context


class Context:
    """Everything a command needs, built from the flags once."""

    def __init__(self, args: argparse.Namespace) -> None:
        from autotune.backends import get_backend
        from autotune.space import load_space

        self.args = args
        self.space = load_space(args.space)  # SpaceError -> exit 2 before anything is written
        self.simulated = bool(args.simulate)
        self.run_space = self.space
        self.label: dict[str, Any] | None = None
        if self.simulated:
            from autotune.sim import simulated_space

            self.run_space = simulated_space(self.space)
            sim = self.space.simulate
            self.label = {"scenario": sim.scenario if sim else None, "time_scale": sim.time_scale if sim else None}
        elif args.in_process:
            from autotune.errors import UserError

            raise UserError("--in-process runs the simulator's model: it needs --simulate")
        self.backend = get_backend(self.space.server.backend)
        from autotune.study import default_storage, study_name_for

        self.study_name = study_name_for(self.space, self.simulated)
        self.studies_dir = Path(args.studies_dir)
        self.storage_url = args.storage or default_storage(self.space, self.simulated, str(self.studies_dir))

    @property
    def artifact_dir(self) -> Path:
        """The study's trial evidence (an Optuna filesystem artifact store): ``STUDIES/NAME/artifacts``."""
        from autotune.evidence import artifact_dir

        return artifact_dir(self.studies_dir, self.study_name)

    def ensure_dirs(self) -> None:
        self.studies_dir.mkdir(parents=True, exist_ok=True)
        (self.studies_dir / self.study_name / "logs").mkdir(parents=True, exist_ok=True)

    def runner(self, seed: int = 0, slot: Any = None):
        """The runner (and its clock) of this host's only worker, or of GPU slot ``slot`` (``autotune.slots``)."""
        space, log_dir = self.run_space, self.studies_dir / self.study_name / "logs"
        if slot is not None:
            from autotune.slots import slot_space

            space, log_dir = slot_space(space, slot), log_dir / slot.name
        if self.simulated and self.args.in_process:
            from autotune.clock import VirtualClock
            from autotune.sim.runner import ModelRunner

            clock = VirtualClock()
            return ModelRunner(space, self.backend, clock, seed=seed), clock
        from autotune.clock import MonotonicClock
        from autotune.process import ProcessRunner

        sim = self.space.simulate
        clock = MonotonicClock()
        runner = ProcessRunner(
            space,
            self.backend,
            log_dir=log_dir,
            clock=clock,
            time_scale=(sim.time_scale if (self.simulated and sim) else 1.0),
            simulated=self.simulated,
            record_path=self.studies_dir / f"{self.study_name}.pids.json",
        )
        if slot is not None:
            from autotune.slots import PORT_STRIDE

            runner.next_port_tries = PORT_STRIDE  # port_busy: next stays inside the slot's ports
        return runner, clock

    def slots(self, specs: list[str]) -> list[Any]:
        """The GPU slots of ``--gpus`` (checked against the space's tensor-parallel size), [] without."""
        if not specs:
            return []
        from autotune.slots import check_fits, make_slots

        slots = make_slots(specs)
        check_fits(slots, self.space, self.backend.parallel_size_flags, self.args.space)
        return slots

    def open_study(self, create: bool, seed: int | None = None):
        from autotune.study import open_study

        if not create:
            self._require_existing()
        return open_study(
            self.space,
            self.storage_url,
            self.study_name,
            seed=seed,
            simulated=self.simulated,
            create=create,
            label=self.label,
            heartbeat_s=getattr(self.args, "heartbeat_s", None),
        )

    def _require_existing(self) -> None:
        from autotune.errors import UserError

        url = self.storage_url
        if url.startswith("sqlite:///"):
            path = Path(url[len("sqlite:///") :])
            if not path.exists():
                hint = ""
                if not self.simulated and Path(str(path).replace(".db", "-sim.db")).exists():
                    hint = " (a simulated study exists: add --simulate)"
                raise UserError(f"no study at {path}{hint}: run `autotune study {self.args.space}` first")


def _reap(ctx: Context) -> None:
    """Stop servers a previous run of ours left behind (killed orchestrator), found by their recorded PID and start
    time, never by name; before the port check, so our own leftover is not mistaken for a foreign process."""
    record = ctx.studies_dir / f"{ctx.study_name}.pids.json"
    if ctx.args.in_process or not record.exists():
        return
    from autotune.process import reap_leftovers

    stopped = reap_leftovers(record)
    if stopped:
        print(
            f"stopped {len(stopped)} server(s) left by an earlier run: pid {', '.join(map(str, stopped))}",
            file=sys.stderr,
        )


def _port_preflight(ctx: Context, space: Any = None) -> None:
    """A port already in use by something we did not start is a user error, found before anything is written."""
    from autotune.errors import PortInUse

    server = (space or ctx.run_space).server
    if ctx.args.in_process or server.port_busy != "fail":
        return
    from autotune.process.ports import accepts_connections

    if accepts_connections(server.host, server.port, timeout_s=0.5):
        raise PortInUse(
            f"port {server.port} on {server.host} is already in use by another process (not started by "
            f"autotune; it will not be touched). Stop it, change server.port, or set "
            f"server.port_busy: next|wait in {ctx.args.space}"
        )


def _validate(ctx: Context) -> list[Any]:
    from autotune.checks import check_space

    return check_space(ctx.run_space, ctx.backend)


def _print_problems(problems: list[Any]) -> None:
    for p in problems:
        print(f"{p.severity}: {p}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------- commands


def cmd_validate(ctx: Context) -> int:
    problems = _validate(ctx)
    _print_problems(problems)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        return EXIT_USAGE
    print(
        f"ok: {ctx.args.space}: {len(ctx.space.drafters)} drafter(s) checked"
        + (f", {len(problems)} warning(s)" if problems else ""),
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_study(ctx: Context) -> int:
    from autotune import study as st
    from autotune.errors import ValidationFailed
    from autotune.live import LiveView
    from autotune.report import build_report

    args = ctx.args
    if args.n_trials is not None and args.n_trials < 1:
        from autotune.errors import UserError

        raise UserError(f"--n-trials must be at least 1 but got {args.n_trials}")
    if not args.skip_validation:
        problems = _validate(ctx)
        errors = [p for p in problems if p.severity == "error"]
        _print_problems(problems)
        if errors:
            raise ValidationFailed([f"{p}" for p in errors] + ["the study was not started (nothing written)"])
    slots = ctx.slots(args.gpus)
    if len(slots) > 1:
        from autotune.workers import require_server_database

        require_server_database(ctx.storage_url, f"--gpus with {len(slots)} slots")
    _reap(ctx)
    _preflight_slots(ctx, slots)
    ctx.ensure_dirs()
    seed = args.seed if args.seed is not None else (ctx.space.simulate.seed if ctx.space.simulate else None)
    study = ctx.open_study(create=True, seed=seed)
    n_trials = args.n_trials if args.n_trials is not None else ctx.space.budget.n_trials
    from autotune.evidence import Evidence
    from autotune.records import set_study_n_trials

    set_study_n_trials(study, n_trials)  # what `autotune worker` on other nodes and slots reads
    if len(slots) > 1:
        _run_slots(ctx, study, slots, seed, n_trials)
    else:
        runner, clock = ctx.runner(seed=seed or 0, slot=slots[0] if slots else None)
        view = LiveView(ctx.space, ctx.study_name, simulated=ctx.simulated, quiet=args.json)
        shared = not ctx.storage_url.startswith("sqlite")  # other workers may still be measuring
        with view:
            st.run(
                ctx.run_space,
                ctx.backend,
                runner,
                study,
                n_trials=n_trials,
                clock=clock,
                listener=view.on_event,
                confirm=not args.no_confirm and not shared,
                evidence=Evidence(ctx.artifact_dir),
            )
            if shared and not args.no_confirm:
                _confirm_after_workers(ctx, study, runner, clock, view.on_event)
    report = build_report(study)
    _write_html(ctx, study, report, ctx.studies_dir / ctx.study_name / "report.html")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from autotune.export import suggested_format
        from autotune.render import render_report

        render_report(report, sys.stdout)
        print(
            f"\nreport: {ctx.studies_dir / ctx.study_name / 'report.html'}   "
            f"export: autotune export {args.space}{' --simulate' if ctx.simulated else ''} --format "
            f"{suggested_format(ctx.backend)}",
            file=sys.stderr,
        )
    return EXIT_OK


def _preflight_slots(ctx: Context, slots: list[Any]) -> None:
    if not slots:
        _port_preflight(ctx)
        return
    from autotune.slots import slot_space

    for sl in slots:
        _port_preflight(ctx, slot_space(ctx.run_space, sl))


def _run_slots(ctx: Context, study: Any, slots: list[Any], seed: int | None, n_trials: int) -> None:
    """One ``autotune worker`` process per GPU slot, in parallel; then, once no trial of any worker runs, the
    confirmation once, on the first slot."""
    from autotune import workers
    from autotune.errors import AutotuneError

    args = ctx.args

    def note(message: str) -> None:
        print(message, file=sys.stderr)

    results = workers.run_slots(
        slots,
        lambda sl: workers.worker_argv(args, sl, seed, ctx.storage_url),
        ctx.studies_dir / ctx.study_name / "logs",
        study,
        n_trials,
        progress=note,
    )
    _reap(ctx)  # the server of a worker that was killed (its PID record entry outlives it)
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
    _confirm_after_workers(ctx, study, runner, clock, None)


def _confirm_after_workers(ctx: Context, study: Any, runner: Any, clock: Any, listener: Any) -> None:
    """The confirmation, once, after the trials of every worker of a shared study ended (bounded wait)."""
    from autotune import study as st
    from autotune import workers

    orch = st.Orchestrator(ctx.run_space, ctx.backend, runner, study, clock=clock, listener=listener)
    still = workers.wait_for_trials(study, st.search.trial_limit_s(orch.ctx))
    if still:
        print(f"{still} trial(s) of other workers still running; confirming without them", file=sys.stderr)
    orch.confirm()


def cmd_worker(ctx: Context) -> int:
    """Join a running study: same space (checked), the study's budget, search only (no confirmation)."""
    import dataclasses

    from autotune import study as st
    from autotune.live import LiveView
    from autotune.records import study_n_trials
    from autotune.study.storage import check_worker
    from autotune.workers import require_server_database

    args = ctx.args
    require_server_database(ctx.storage_url, "autotune worker")
    slot = None
    if args.gpus:
        from autotune.slots import Slot, check_fits, parse_gpus

        slot = Slot(args.slot, parse_gpus(args.gpus), args.gpus)
        check_fits([slot], ctx.space, ctx.backend.parallel_size_flags, args.space)
    elif args.slot:
        from autotune.errors import UserError

        raise UserError("--slot needs --gpus (the slot's GPUs)")
    study = ctx.open_study(create=False, seed=args.seed)
    n_trials = study_n_trials(study) or ctx.space.budget.n_trials
    check_worker(study, ctx.space, args.space)
    _reap(ctx)
    if slot is None:
        _port_preflight(ctx)
    else:
        _preflight_slots(ctx, [slot])
    ctx.ensure_dirs()
    run_space = dataclasses.replace(ctx.run_space, budget=dataclasses.replace(ctx.run_space.budget, n_trials=n_trials))
    runner, clock = ctx.runner(seed=args.seed or 0, slot=slot)
    view = LiveView(ctx.space, ctx.study_name, simulated=ctx.simulated, quiet=args.json)
    with view:
        from autotune.evidence import Evidence

        st.run(
            run_space,
            ctx.backend,
            runner,
            study,
            n_trials=n_trials,
            clock=clock,
            listener=view.on_event,
            confirm=False,
            evidence=Evidence(ctx.artifact_dir),
        )
    from autotune.records import counted_trials

    print(
        f"worker done: {counted_trials(study)} of {n_trials} trials of study {ctx.study_name} used",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_confirm(ctx: Context) -> int:
    from autotune.records import reopen_confirmation
    from autotune.report import build_report
    from autotune.study import Orchestrator

    study = ctx.open_study(create=False)
    _reap(ctx)
    _port_preflight(ctx)
    ctx.ensure_dirs()
    runner, clock = ctx.runner()
    reopen_confirmation(study)
    Orchestrator(ctx.run_space, ctx.backend, runner, study, clock=clock).confirm()
    report = build_report(study)
    if ctx.args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from autotune.render import render_report

        render_report(report, sys.stdout)
    return EXIT_OK


def cmd_report(ctx: Context) -> int:
    from autotune.report import build_report

    study = ctx.open_study(create=False)
    report = build_report(study)
    if ctx.args.html:
        _write_html(ctx, study, report, Path(ctx.args.html))
    if ctx.args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from autotune.render import render_report

        render_report(report, sys.stdout)
    return EXIT_OK


def cmd_export(ctx: Context) -> int:
    from autotune import export
    from autotune.errors import UserError
    from autotune.export import Options, render
    from autotune.report import build_report

    args = ctx.args
    problem = export.format_problem(ctx.backend, args.format)
    if problem:
        raise UserError(problem)
    if args.gpus is not None and args.gpus < 1:
        raise UserError(f"--gpus must be at least 1 but got {args.gpus}")
    study = ctx.open_study(create=False)
    report = build_report(study)
    options = Options(image=args.image, gpus=args.gpus, name=args.name)
    try:
        if ctx.space.benchmark.loaded and export.renders_schedule(args.format):
            # a per-load-level schedule (autotune.schedule)
            from autotune import records, schedule
            from autotune.export import render_schedule

            rec = (report.get("recommended") or {}).get("config")
            levels = ctx.space.benchmark.concurrency
            rows = records.confirmed_level_rows(study) or records.level_rows(study)
            sched = schedule.build(
                rows,
                levels,
                rec,
                backend=ctx.space.server.backend,
                min_gain=ctx.space.verdict.min_gain,
            )
            text = render_schedule(_deploy_space(ctx), ctx.backend, report, sched, args.format) + "\n"
        else:
            text = render(
                _deploy_space(ctx),
                ctx.backend,
                report,
                args.format,
                trial=args.trial,
                options=options,
                read_space=ctx.run_space if ctx.simulated else None,
            )
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.output:
        out = Path(args.output)
        if not out.parent.is_dir():
            raise UserError(f"-o {args.output}: no such directory {out.parent}")
        written = export.write(out, text, export.files(_deploy_space(ctx), ctx.backend, report, trial=args.trial))
        print(f"wrote {out} ({args.format}){''.join(f', {p}' for p in written)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_reverify(args: argparse.Namespace) -> int:
    """Measure the exported config and its baseline again, interleaved; exit 0 when the speedup still holds
    (the new interval overlaps the exported one), 1 when it does not."""
    from autotune.errors import UserError
    from autotune.export import read_provenance
    from autotune.reverify import render_result, reverify

    path = Path(args.exported)
    if not path.is_file():
        raise UserError(f"{args.exported}: no such file (expected a file written by `autotune export`)")
    try:
        prov = read_provenance(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except ValueError as e:
        raise UserError(str(e)) from None
    space = args.space_override or prov.get("space")
    if not space:
        raise UserError(f"{path}: the export names no space file; give one with --space")
    if args.repeats is not None and args.repeats < 2:
        raise UserError(f"--repeats must be at least 2 but got {args.repeats}")
    if prov.get("simulated") and not args.simulate:
        raise UserError(f"{path} was exported from a simulated study: re-verify it with --simulate")
    ns = argparse.Namespace(
        space=space,
        simulate=args.simulate,
        storage=None,
        studies_dir=args.studies_dir,
        in_process=args.in_process,
        verbose=args.verbose,
    )
    ctx = Context(ns)
    _reap(ctx)
    _port_preflight(ctx)
    ctx.ensure_dirs()
    runner, _clock = ctx.runner(seed=ctx.space.simulate.seed if (ctx.simulated and ctx.space.simulate) else 0)
    result = reverify(ctx.run_space, ctx.backend, runner, prov, repeats=args.repeats)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        render_result(result, sys.stdout)
    return EXIT_OK if result["holds"] else EXIT_FAIL


def _deploy_space(ctx: Context) -> Any:
    """The space to export from: the real one; after a simulated study, each drafter keeps the algorithm it ran
    with (read from the simulator's stand-in checkpoint, since the real checkpoint may not be on this machine)."""
    if not ctx.simulated:
        return ctx.space
    import dataclasses

    from autotune.checks import resolved_algorithm

    drafters = tuple(
        d if d.algorithm else dataclasses.replace(d, algorithm=resolved_algorithm(ctx.run_space, d.name))
        for d in ctx.space.drafters
    )
    return dataclasses.replace(ctx.space, drafters=drafters)


def cmd_bench(ctx: Context) -> int:
    from autotune.config import PromptResult, TrialConfig
    from autotune.errors import UserError
    from autotune.measure import measure_config

    values: dict[str, Any] = {}
    for item in ctx.args.set:
        if "=" not in item:
            raise UserError(f"--set expects KEY=VALUE but got {item!r}")
        k, v = item.split("=", 1)
        values[k.strip()] = _parse_value(v.strip())
    allowed = {"drafter", "cuda_graph", *ctx.backend.knob_names}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise UserError(f"--set: unknown key(s) {', '.join(unknown)}; expected one of {', '.join(sorted(allowed))}")
    drafter = values.get("drafter")
    if drafter not in (None, "none") and drafter not in {d.name for d in ctx.space.drafters}:
        raise UserError(
            f"--set drafter={drafter}: no such drafter in {ctx.args.space}; expected one of "
            f"{', '.join(['none'] + [d.name for d in ctx.space.drafters])}"
        )
    values.setdefault("cuda_graph", ctx.space.search.cuda_graph[0])
    config = TrialConfig.from_dict(values)
    from autotune.errors import InfeasibleConfig

    try:
        eff = ctx.backend.resolve(config, ctx.run_space)
    except InfeasibleConfig as e:
        raise UserError(f"this config would be rejected or rewritten by the server: {e}") from None
    _reap(ctx)
    _port_preflight(ctx)
    ctx.ensure_dirs()
    runner, _ = ctx.runner()
    prompts = ctx.space.benchmark.prompts

    def progress(i: int, r: PromptResult, _results: list[PromptResult]) -> None:
        if not ctx.args.json:
            acc = f"  accept length {r.accept_length:.2f}" if r.accept_length is not None else ""
            print(
                f"  {prompts[i].id:<24} {r.completion_tokens:>6} tokens {r.seconds:8.2f} s "
                f"{r.tok_per_s:8.1f} tok/s{acc}",
                file=sys.stderr,
            )

    m = measure_config(runner, eff, ctx.space, on_prompt=progress)
    info, summary = m.info, m.summary
    out = {
        "config": eff.to_dict(),
        "simulated": ctx.label,
        "argv": info.argv,
        "startup_s": info.startup_s,
        "server_effective": info.effective,
        "summary": summary,
        "prompts": [r.to_dict() for r in m.results],
    }
    if m.levels:  # load levels: each level's figures and the objective
        out["levels"] = [lv.summary() for lv in m.levels]
        out["objective_tok_per_s"] = m.tok_per_s
    if ctx.args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        acc = summary["accept_length"]
        print(
            f"{eff.label()}: {summary['tok_per_s']:.1f} tok/s ({summary['completion_tokens']} tokens in "
            f"{summary['seconds']:.1f} s{'' if acc is None else f', accept length {acc:.2f}'})"
            + (" [simulated]" if ctx.simulated else "")
        )
        if m.levels:
            from autotune.live import level_line

            for d in out["levels"]:
                print("  " + level_line(None, d).split(" ", 1)[1])
            print(f"  objective (weighted geometric mean over the levels): {m.tok_per_s:.1f} tok/s")
    return EXIT_OK


def cmd_dashboard(ctx: Context) -> int:
    import shutil
    import subprocess

    from autotune.errors import UserError

    ctx._require_existing()
    exe = Path(sys.executable).parent / "optuna-dashboard"
    found = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    if not found:
        raise UserError("optuna-dashboard is not installed in this environment (pip install optuna-dashboard)")
    argv = [found, ctx.storage_url, "--host", ctx.args.host, "--port", str(ctx.args.port)]
    artifacts = ctx.artifact_dir
    if artifacts.is_dir():
        argv += ["--artifact-dir", str(artifacts)]
    print(
        f"optuna-dashboard on http://{ctx.args.host}:{ctx.args.port}/ (Ctrl-C to stop); trial artifacts (server "
        "logs, per-prompt results): "
        + (str(artifacts) if artifacts.is_dir() else f"none ({artifacts} does not exist: a study from before them)"),
        file=sys.stderr,
    )
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return EXIT_OK


def _parse_value(v: str) -> Any:
    low = v.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def _write_html(ctx: Context, study: Any, report: dict[str, Any], path: Path) -> None:
    """The study's HTML report. A host without the plotting package (an incomplete install) still gets the
    study, its report and its exit code: the HTML is skipped with one line saying why."""
    try:
        from autotune.html import write_html_report
        from autotune.plots import figures  # noqa: F401 - imports plotly
    except ImportError as e:
        print(f"autotune: HTML report skipped ({e}; pip install -e . installs it)", file=sys.stderr)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_html_report(study, report, path)


COMMANDS = {
    "study": cmd_study,
    "worker": cmd_worker,
    "bench": cmd_bench,
    "report": cmd_report,
    "export": cmd_export,
    "validate": cmd_validate,
    "confirm": cmd_confirm,
    "dashboard": cmd_dashboard,
}


def _interrupt_on_termination() -> None:
    """SIGTERM (a job scheduler, `kill`) and SIGHUP (a closed terminal) stop the run like Ctrl-C: the server we
    started is stopped and the study stays resumable, instead of leaving a server holding GPUs. Only the first
    signal interrupts: more Ctrl-C presses while the server is being stopped (bounded waits) do not cut that short."""
    import signal

    fired = []

    def _raise(signum: int, _frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise)


#: commands that build their own context (their positional argument is not a space file)
OWN_CONTEXT = {"reverify": cmd_reverify}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from autotune.errors import AutotuneError, UserError

    _interrupt_on_termination()
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING if args.verbose else optuna.logging.ERROR)
        if args.command in OWN_CONTEXT:
            return OWN_CONTEXT[args.command](args)
        ctx = Context(args)
        return COMMANDS[args.command](ctx)
    except UserError as e:
        if args.verbose:
            raise
        print(f"autotune: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AutotuneError as e:
        if args.verbose:
            raise
        print(f"autotune: failed: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("autotune: interrupted; the server was stopped. Re-run the same command to resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os._exit(EXIT_OK)


if __name__ == "__main__":
    raise SystemExit(main())

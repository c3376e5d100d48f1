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

    e = sub.add_parser("export", help="export the recommended deployment")
    _add_common(e)
    e.add_argument("--format", choices=("sglang", "command", "yaml", "json", "vllm"), default="yaml")

    v = sub.add_parser("validate", help="static checks of the space and its drafter checkpoints (no server)")
    _add_common(v)

    c = sub.add_parser("confirm", help="(re-)run the confirmation phase of a study")
    _add_common(c)
    c.add_argument("--json", action="store_true")

    d = sub.add_parser("dashboard", help="open the study in optuna-dashboard (bound to 127.0.0.1)")
    _add_common(d)
    d.add_argument("--host", default="127.0.0.1")
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

    def ensure_dirs(self) -> None:
        self.studies_dir.mkdir(parents=True, exist_ok=True)
        (self.studies_dir / self.study_name / "logs").mkdir(parents=True, exist_ok=True)

    def runner(self, seed: int = 0):
        if self.simulated and self.args.in_process:
            from autotune.clock import VirtualClock
            from autotune.sim.runner import ModelRunner

            clock = VirtualClock()
            return ModelRunner(self.run_space, self.backend, clock, seed=seed), clock
        from autotune.clock import MonotonicClock
        from autotune.process import ProcessRunner

        sim = self.space.simulate
        clock = MonotonicClock()
        runner = ProcessRunner(
            self.run_space,
            self.backend,
            log_dir=self.studies_dir / self.study_name / "logs",
            clock=clock,
            time_scale=(sim.time_scale if (self.simulated and sim) else 1.0),
            simulated=self.simulated,
            record_path=self.studies_dir / f"{self.study_name}.pids.json",
        )
        return runner, clock

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


def _port_preflight(ctx: Context) -> None:
    """A port already in use by something we did not start is a user error, found before anything is written."""
    from autotune.errors import PortInUse

    server = ctx.run_space.server
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
    _reap(ctx)
    _port_preflight(ctx)
    ctx.ensure_dirs()
    seed = args.seed if args.seed is not None else (ctx.space.simulate.seed if ctx.space.simulate else None)
    runner, clock = ctx.runner(seed=seed or 0)
    study = ctx.open_study(create=True, seed=seed)
    view = LiveView(ctx.space, ctx.study_name, simulated=ctx.simulated, quiet=args.json)
    n_trials = args.n_trials if args.n_trials is not None else ctx.space.budget.n_trials
    with view:
        st.run(
            ctx.run_space,
            ctx.backend,
            runner,
            study,
            n_trials=n_trials,
            clock=clock,
            listener=view.on_event,
            confirm=not args.no_confirm,
        )
    report = build_report(study)
    _write_html(ctx, study, report, ctx.studies_dir / ctx.study_name / "report.html")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from autotune.render import render_report

        render_report(report, sys.stdout)
        print(
            f"\nreport: {ctx.studies_dir / ctx.study_name / 'report.html'}   "
            f"export: autotune export {args.space}{' --simulate' if ctx.simulated else ''} --format "
            f"{'sglang' if ctx.space.server.backend == 'sglang' else 'command'}",
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
    from autotune.errors import UserError
    from autotune.export import render
    from autotune.report import build_report

    if ctx.args.format == "sglang" and ctx.space.server.backend != "sglang":
        raise UserError(
            f"--format sglang needs an SGLang space; this one's backend is {ctx.space.server.backend!r} "
            f"(use --format command)"
        )
    study = ctx.open_study(create=False)
    report = build_report(study)
    try:
        if ctx.space.benchmark.loaded:  # a per-load-level schedule (autotune.schedule)
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
            print(render_schedule(_deploy_space(ctx), ctx.backend, report, sched, ctx.args.format))
            return EXIT_OK
        print(render(_deploy_space(ctx), ctx.backend, report, ctx.args.format))
    except ValueError as e:
        raise UserError(str(e)) from None
    return EXIT_OK


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
    print(f"optuna-dashboard on http://{ctx.args.host}:{ctx.args.port}/ (Ctrl-C to stop)", file=sys.stderr)
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
    from autotune.html import write_html_report

    path.parent.mkdir(parents=True, exist_ok=True)
    write_html_report(study, report, path)


COMMANDS = {
    "study": cmd_study,
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from autotune.errors import AutotuneError, UserError

    _interrupt_on_termination()
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING if args.verbose else optuna.logging.ERROR)
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

"""The command line: parse, one library call, render, exit code.

Exit codes: 0 done; 1 a failure while running (server, benchmark); 2 bad input (space file, flags, a port in
use, failed validation), nothing written; 130 interrupted (the server was stopped; re-run to resume).
Messages go to stderr, data (tables, JSON, commands) to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from autotune.commands import deploy as deploy_cmd
from autotune.commands import measure as measure_cmd
from autotune.commands import study as study_cmd
from autotune.commands.context import CommandOptions, Context

if TYPE_CHECKING:
    from autotune.report import Report

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors: exit 2 like ours
        self.print_usage(sys.stderr)
        print(f"autotune: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autotune")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown"


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (importlib.metadata costs every command
    ~0.04 CPU-s)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"autotune {_version()}")
        parser.exit()


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
    p.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("study", help="measure the baseline, search with Optuna, confirm, give a verdict")
    _add_common(s)
    s.add_argument("--n-trials", type=int, help="the study's total trial budget (re-running resumes)")
    s.add_argument("--seed", type=int, default=None, help="sampler seed")
    s.add_argument("--no-confirm", action="store_true", help="search only (extra workers of a shared study)")
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (phases, server starts, estimated GPU time) and exit; nothing is started or written",
    )
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


# ---------------------------------------------------------------------------------------------- rendering


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _print_report(report: Report, as_json: bool, ctx: Context, *, summary: bool = False) -> None:
    """``report --json``, the whole text report, or (``summary``) its closing summary only."""
    if as_json:
        _print_json(report.to_json())
        return
    from autotune.render import render_report, render_summary

    deploy = deploy_cmd.recommended_command(ctx, report.result)
    (render_summary if summary else render_report)(report, sys.stdout, deploy)


def _watch(ctx: Context, *, quiet: bool) -> Any:
    """The live view around a search: yields its listener (``quiet``: --json)."""

    @contextlib.contextmanager
    def watch() -> Iterator[Any]:
        from autotune.live import LiveView

        view = LiveView(ctx.space, ctx.study_name, simulated=ctx.simulated, quiet=quiet)
        with view:
            yield view.on_event

    return watch


def _write_html(ctx: Context, study: Any, report: Report, path: Path) -> None:
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


# ---------------------------------------------------------------------------------------------- commands


def cmd_validate(ctx: Context, args: argparse.Namespace) -> int:
    problems = study_cmd.validate(ctx)
    for p in problems:
        _note(f"{p.severity}: {p}")
    if any(p.severity == "error" for p in problems):
        return EXIT_USAGE
    sim = ctx.space.simulate
    _note(
        f"ok: {ctx.args.space}: {len(ctx.space.drafters)} drafter(s) checked"
        + (f" (the simulator's stand-ins, scenario {sim.scenario if sim else 'default'})" if ctx.simulated else "")
        + (f", {n_warn} warning(s)" if (n_warn := sum(p.severity == "warning" for p in problems)) else "")
    )
    return EXIT_OK


def cmd_study(ctx: Context, args: argparse.Namespace) -> int:
    result = study_cmd.run_study(ctx, note=_note, watch=_watch(ctx, quiet=args.json))
    if result is None:  # --dry-run: the plan was the output
        return EXIT_OK
    html = ctx.studies_dir / ctx.study_name / "report.html"
    _write_html(ctx, result.study, result.report, html)
    _print_report(result.report, args.json, ctx, summary=True)
    if not args.json:
        from autotune.export_formats import suggested_format

        sim = " --simulate" if ctx.simulated else ""
        then = (  # an unconfirmed recommendation is not exported (`autotune export` says so)
            f"confirm: autotune confirm {args.space}{sim}"
            if args.no_confirm
            else f"export: autotune export {args.space}{sim} --format {suggested_format(ctx.backend)}"
        )
        print(f"the trials, checks and derivations: {html} (or autotune report {args.space}{sim})")
        print(f"\nreport: {html}   {then}", file=sys.stderr)
    return EXIT_OK


def cmd_worker(ctx: Context, args: argparse.Namespace) -> int:
    """Join a running study: same space (checked), the study's budget, search only (no confirmation)."""
    result = study_cmd.run_worker(ctx, note=_note, watch=_watch(ctx, quiet=args.json))
    _note(f"worker done: {result.used} of {result.n_trials} trials of study {ctx.study_name} used")
    return EXIT_OK


def cmd_confirm(ctx: Context, args: argparse.Namespace) -> int:
    result = study_cmd.run_confirm(ctx, note=_note)
    _print_report(result.report, args.json, ctx)
    return EXIT_OK


def cmd_report(ctx: Context, args: argparse.Namespace) -> int:
    from autotune._io import output_problem
    from autotune.errors import UserError

    html = Path(args.html) if args.html else None
    problem = output_problem(html) if html is not None and html.parent.is_dir() else None  # else: made, or fails
    if problem:  # before the study is read
        raise UserError(f"--html {html}: {problem}")
    result = study_cmd.load_report(ctx, note=_note)
    if html is not None:
        try:
            _write_html(ctx, result.study, result.report, html)
        except OSError as e:
            raise UserError(f"--html {html}: cannot write it: {e.strerror or e}; nothing was written") from None
    _print_report(result.report, args.json, ctx)
    return EXIT_OK


def cmd_export(ctx: Context, args: argparse.Namespace) -> int:
    result = deploy_cmd.export(ctx, note=_note)
    if result.output is not None:
        _note(f"wrote {result.output} ({args.format}){''.join(f', {p}' for p in result.files)}")
    else:
        sys.stdout.write(result.text)
    return EXIT_OK


def cmd_reverify(args: argparse.Namespace) -> int:
    """Measure the exported config and its baseline again, interleaved; exit 0 when the speedup still holds
    (the new interval overlaps the exported one), 1 when it does not."""
    result = measure_cmd.reverify(
        measure_cmd.ReverifyOptions(
            args.exported,
            space=args.space_override,
            simulate=args.simulate,
            in_process=args.in_process,
            repeats=args.repeats,
            studies_dir=args.studies_dir,
        ),
        note=_note,
    )
    if args.json:
        _print_json(result.to_dict())
    else:
        from autotune.reverify import render_result

        render_result(result, sys.stdout)
    return EXIT_OK if result.holds else EXIT_FAIL


def cmd_bench(ctx: Context, args: argparse.Namespace) -> int:
    prompts = ctx.space.benchmark.prompts

    def progress(i: int, r: Any, _results: list[Any]) -> None:
        if not args.json:
            acc = f"  accept length {r.accept_length:.2f}" if r.accept_length is not None else ""
            _note(
                f"  {prompts[i].id:<24} {r.completion_tokens:>6} tokens {r.seconds:8.2f} s "
                f"{r.tok_per_s:8.1f} tok/s{acc}"
            )

    result = measure_cmd.bench(ctx, note=_note, on_prompt=progress)
    if args.json:
        _print_json(result.to_dict())
        return EXIT_OK
    summary = result.measurement.summary
    acc = summary["accept_length"]
    print(
        f"{result.config.label()}: {summary['tok_per_s']:.1f} tok/s ({summary['completion_tokens']} tokens in "
        f"{summary['seconds']:.1f} s{'' if acc is None else f', accept length {acc:.2f}'})"
        + (" [simulated]" if result.simulated is not None else "")
    )
    if result.objective is not None:
        from autotune.live import level_line

        for lv in result.measurement.levels:
            print("  " + level_line(None, lv.summary()).split(" ", 1)[1])
        print(f"  objective (weighted geometric mean over the levels): {result.objective:.1f} tok/s")
    return EXIT_OK


COMMANDS = {
    "study": cmd_study,
    "worker": cmd_worker,
    "bench": cmd_bench,
    "report": cmd_report,
    "export": cmd_export,
    "validate": cmd_validate,
    "confirm": cmd_confirm,
    "dashboard": lambda ctx, _args: deploy_cmd.dashboard(ctx, note=_note),
}


def command_options(args: argparse.Namespace) -> CommandOptions:
    """A command's typed options from its flags (the flags only the CLI reads, such as ``--json``, stay here)."""
    given = {k: v for k, v in vars(args).items() if k in {f.name for f in dataclasses.fields(CommandOptions)}}
    gpus = given.pop("gpus", None)
    if args.command == "export":
        given["reserve_gpus"] = gpus
    elif gpus:
        given["gpus"] = tuple(gpus) if isinstance(gpus, list) else (gpus,)
    if "set" in given:
        given["set"] = tuple(given["set"])
    return CommandOptions(**given)


def _interrupt_on_termination() -> None:
    """SIGTERM (a job scheduler, `kill`) and SIGHUP (a closed terminal) stop the run like Ctrl-C: the server we
    started is stopped and the study stays resumable, instead of leaving a server holding GPUs. Only the first
    signal interrupts: more Ctrl-C presses while the server is being stopped (bounded waits) do not cut that short."""
    import signal

    from autotune.process.server import hold_signal

    fired: list[int] = []

    def _raise(signum: int, _frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        if hold_signal(signum):  # a server is being spawned: raised once it is ours to stop
            return
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
        if args.command == "reverify":  # its positional argument is not a space file: no context
            return cmd_reverify(args)
        ctx = Context(command_options(args))
        return COMMANDS[args.command](ctx, args)
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

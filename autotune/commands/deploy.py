"""Commands that turn a finished study into a deployment: ``export`` and ``dashboard``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.commands.context import Context, Note

if TYPE_CHECKING:
    from autotune.study.result import StudyResult


@dataclass
class ExportResult:
    text: str
    output: Path | None  # where it was written (atomically); None: for stdout
    files: tuple[Path, ...] = ()  # the files a launch needs, written beside ``output``


def export(ctx: Context, *, note: Note | None = None) -> ExportResult:
    """``autotune export``: the deployment text, written to ``-o FILE`` (with the files the launch reads beside it)
    when given; with load levels it runs a per-level schedule. A study that is not finished exports only
    ``--trial``."""
    from autotune import export as exp
    from autotune._io import output_problem
    from autotune.errors import UserError
    from autotune.export_bundle import Options
    from autotune.export_formats import format_problem
    from autotune.study.result import study_result

    args = ctx.args
    problem = format_problem(ctx.backend, args.format)
    if problem:
        raise UserError(problem)
    if args.reserve_gpus is not None and args.reserve_gpus < 1:
        raise UserError(f"--gpus must be at least 1 but got {args.reserve_gpus}")
    out = Path(args.output) if args.output else None
    problem = output_problem(out) if out is not None else None
    if problem:  # before the study is read
        raise UserError(f"-o {args.output}: {problem}")
    study = ctx.open_study(create=False)
    _check_finished(ctx, study, note)
    result = study_result(study, ctx.space)
    sched = None
    if ctx.space.benchmark.loaded and args.trial is None and ctx.backend.schedule_knob:
        # a per-load-level schedule (autotune.schedule), which every format launches
        from autotune import schedule

        sched = schedule.build(
            result.schedule_rows,
            ctx.space.benchmark.concurrency,
            result.recommended.config,
            backend=ctx.space.server.backend,
            min_gain=ctx.space.verdict.min_gain,
        )
    try:
        exported = exp.export(
            deploy_space(ctx),
            ctx.backend,
            result,
            args.format,
            trial=args.trial,
            options=Options(image=args.image, gpus=args.reserve_gpus, name=args.name),
            read_space=ctx.run_space if ctx.simulated else None,
            schedule=sched,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    if out is None:
        return ExportResult(exported.text, None)
    try:
        written = exp.write(out, exported.text, exported.files)
    except ValueError as e:
        raise UserError(f"-o {args.output}: cannot write {e}; nothing was written") from None
    return ExportResult(exported.text, out, tuple(written))


def _check_finished(ctx: Context, study: Any, note: Note | None) -> None:
    """Exit 2 for the recommendation of an unfinished study: it may change."""
    from autotune.commands.study import progress
    from autotune.errors import UserError

    now = progress(ctx, study)
    if now is None:
        return
    if ctx.args.trial is not None:
        if now.holder is not None and note is not None:
            note(now.text())
        return
    space = f"{ctx.args.space}{' --simulate' if ctx.simulated else ''}"
    finish = (
        "Wait for it to finish"
        if now.holder
        else f"Finish it first (`autotune confirm {space}` confirms it; re-running `autotune study {space}` resumes it)"
    )
    why = "may change" if now.holder else "is not confirmed and may change"
    raise UserError(
        f"{now.text()}: its recommendation {why}, so it is not exported. {finish}, or export one trial you chose "
        f"with --trial N (the trials: `autotune report {space}`)."
    )


def recommended_command(ctx: Context, result: StudyResult) -> str | None:
    """The launch command of the study's recommendation (the ``command`` export without its comments), for the
    end of a study's or report's text; None when the study has no recommendation or it cannot be rendered."""
    from autotune.export import export

    if result.recommended.trial is None:
        return None
    try:
        read_space = ctx.run_space if ctx.simulated else None
        text = export(deploy_space(ctx), ctx.backend, result, "command", read_space=read_space).text
    except (ValueError, KeyError):
        return None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return "\n".join(lines) or None


def deploy_space(ctx: Context) -> Any:
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


def dashboard(ctx: Context, *, note: Note) -> int:
    """``autotune dashboard``: optuna-dashboard on the study until it exits (its exit code) or Ctrl-C (0)."""
    import shutil
    import subprocess
    import sys

    from autotune.errors import UserError

    ctx._require_existing()
    from autotune.render import publish
    from autotune.report import build_report

    study = ctx.open_study(create=False)
    publish(study, build_report(study), attrs=True)  # the verdict and autotune's pick, at the top of its page
    exe = Path(sys.executable).parent / "optuna-dashboard"
    found = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    if not found:
        raise UserError("optuna-dashboard is not installed in this environment (pip install optuna-dashboard)")
    from autotune.process.server import bindable, describe_owner

    host, port = ctx.args.host, int(ctx.args.port)
    if not bindable(host, port):  # else optuna-dashboard says "Listening on" and then dies in a traceback
        raise UserError(
            f"dashboard: port {port} on {host} is taken (by {describe_owner(port)}): give another with --port N"
        )
    argv = [found, ctx.storage_url, "--host", host, "--port", str(port)]
    artifacts = ctx.artifact_dir
    if artifacts.is_dir():
        argv += ["--artifact-dir", str(artifacts)]
    note(
        f"optuna-dashboard on http://{ctx.args.host}:{ctx.args.port}/ (Ctrl-C to stop); trial artifacts (server "
        "logs, per-prompt results): "
        + (str(artifacts) if artifacts.is_dir() else f"none ({artifacts} does not exist: a study from before them)")
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
        return 0

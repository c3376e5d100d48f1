"""What every command starts from: ``Context`` (the space, the backend, the study's name and storage, the runner,
built from its options once), and the steps before a command starts servers (``reap``, ``preflight``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.checks import Problem
    from autotune.seam import Clock, Runner
    from autotune.slots import Slot

#: where a command's messages go while it runs (the CLI: one line to stderr)
Note = Callable[[str], None]


@dataclass(frozen=True)
class CommandOptions:
    """What a command was asked, typed (``autotune.cli`` builds it from the flags; a script builds it directly)."""

    #: the space file
    space: str
    simulate: bool = False
    #: with ``simulate``: the simulator's model in-process on a virtual clock
    in_process: bool = False
    #: an Optuna storage URL (default: the space's ``storage:`` or sqlite under ``studies_dir``)
    storage: str | None = None
    studies_dir: str = "studies"
    #: seconds between a running trial's heartbeats on a server database (None: the default)
    heartbeat_s: int | None = None
    # study / worker
    n_trials: int | None = None
    seed: int | None = None
    no_confirm: bool = False
    skip_validation: bool = False
    #: print the plan and exit
    dry_run: bool = False
    #: GPU slots (``0-3``): the study's, one worker per slot; a worker's own (at most one)
    gpus: tuple[str, ...] = ()
    #: a worker's slot number on its host
    slot: int = 0
    # bench: config values, ``KEY=VALUE``
    set: tuple[str, ...] = ()
    # export
    format: str = "yaml"
    trial: int | None = None
    output: str | None = None
    image: str | None = None
    #: GPUs a compose/k8s export reserves
    reserve_gpus: int | None = None
    name: str | None = None
    # dashboard
    host: str = "127.0.0.1"
    port: int = 8080


class Context:
    """Everything a command needs, built from its options once (``args``: those options)."""

    def __init__(self, args: CommandOptions) -> None:
        from autotune.backends import get_backend
        from autotune.space import load_space

        self.args = args
        self.space = load_space(args.space)  # SpaceError -> exit 2 before anything is written
        self.simulated = bool(args.simulate)
        self.run_space = self.space
        if self.simulated:
            from autotune.sim import simulated_space

            self.run_space = simulated_space(self.space)
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
        return self.studies_dir / self.study_name / "artifacts"

    def ensure_dirs(self) -> None:
        self.studies_dir.mkdir(parents=True, exist_ok=True)
        (self.studies_dir / self.study_name / "logs").mkdir(parents=True, exist_ok=True)

    def runner(self, seed: int = 0, slot: Slot | None = None) -> tuple[Runner, Clock]:
        """The runner (and its clock) of this host's only worker, or of GPU slot ``slot`` (``autotune.slots``)."""
        space, log_dir = self.run_space, self.studies_dir / self.study_name / "logs"
        if slot is not None:
            from autotune.slots import slot_space

            space, log_dir = slot_space(space, slot), log_dir / slot.name
        if self.simulated and self.args.in_process:
            from autotune.seam import VirtualClock
            from autotune.sim.runner import ModelRunner

            virtual = VirtualClock()
            # the files a start reads (an adaptive config) kept beside the study, a folder per start
            return ModelRunner(space, self.backend, virtual, seed=seed, files_dir=log_dir), virtual
        from autotune.process import ProcessRunner
        from autotune.seam import MonotonicClock

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

    def slots(self, specs: list[str]) -> list[Slot]:
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
            heartbeat_s=self.args.heartbeat_s,
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


def launcher_problems(ctx: Context) -> list[Problem]:
    """The server's launcher on this machine; none with ``--simulate`` (its launcher is this interpreter)."""
    if ctx.simulated:
        return []
    from autotune.backends import check_launcher

    return check_launcher(ctx.run_space, ctx.backend)


def require_launcher(ctx: Context, what: str) -> None:
    """Exit 2 before anything is written when this machine cannot start the server (``launcher_problems``)."""
    problems = launcher_problems(ctx)
    if problems:
        from autotune.errors import ValidationFailed

        raise ValidationFailed([str(p) for p in problems] + [f"{what} (nothing written)"])


def reap(ctx: Context, note: Note) -> None:
    """Stop servers a previous run of ours left behind (killed orchestrator), found by their recorded PID and start
    time, never by name; before the port check, so our own leftover is not mistaken for a foreign process."""
    record = ctx.studies_dir / f"{ctx.study_name}.pids.json"
    if ctx.args.in_process or not record.exists():
        return
    from autotune.process import reap_leftovers

    stopped = reap_leftovers(record)
    if stopped:
        note(f"stopped {len(stopped)} server(s) left by an earlier run: pid {', '.join(map(str, stopped))}")


def preflight(ctx: Context, slots: list[Slot] | None = None) -> None:
    """The port check before anything is written: the space's port, or each GPU slot's (in-process: no ports)."""
    if ctx.args.in_process:
        return
    from autotune.process.server import ServerProcess

    if not slots:
        ServerProcess.preflight(ctx.run_space.server, ctx.args.space)
        return
    from autotune.slots import slot_space

    for sl in slots:
        ServerProcess.preflight(slot_space(ctx.run_space, sl).server, ctx.args.space)

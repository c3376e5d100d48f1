"""What an export carries (``bundle``), and reading its provenance back from an exported file (``read_provenance``)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from optuna.trial import TrialState

from autotune import __version__
from autotune.backends.base import Backend
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.records import TrialRecord
from autotune.redact import redact_env
from autotune.space import Space
from autotune.stats import Interval
from autotune.study.result import Baseline, StudyResult

#: Kubernetes annotation / compose extension / comment prefix holding the provenance
PROVENANCE_ANNOTATION = "autotune/provenance"
PROVENANCE_COMMENT = "# autotune-provenance: "
#: how a script export names the folder it lies in: its files are written there (``write``)
SCRIPT_DIR = '"$(dirname "$0")"'
#: where compose and Kubernetes mount the launch's files in the container
CONTAINER_FILES = "/autotune/files"
#: the address the server listens on in a container or pod: every interface (the pod's address; compose publishes
#: the port on the space's ``server.host``)
CONTAINER_HOST = "0.0.0.0"
#: the files folder in a script's argv until it is written as ``SCRIPT_DIR`` (``_script_word``)
_SCRIPT_MARK = "@AUTOTUNE_SCRIPT_DIR@"


#: weight index files whose hash (with config.json's) fingerprints a checkpoint directory
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class Options:
    """Deployment parameters (compose, Kubernetes): image and resources, with defaults from the space."""

    image: str | None = None  # default: the backend's images (``Backend.images``) for server.version
    gpus: int | None = None  # default: CUDA_VISIBLE_DEVICES entries in server.env, else --tp-size, else 1
    name: str | None = None  # service / Deployment name; default: the space's name


def launch_argv(space: Space, backend: Backend, config: TrialConfig, *, files_dir: str | None = None) -> list[str]:
    """The deployment launch command: the real server's (never the simulator's), on the space's port, started by the
    launcher the space names or else a plain one (``Backend.deploy_launcher``: ``python3 -m sglang.launch_server``,
    never this machine's interpreter path); flags as the installed server spells them where only ``probe`` can tell
    (``Backend.probe_before_argv``); the server's files (``Backend.files``) named in ``files_dir`` (None: bare)."""
    if backend.probe_before_argv:
        backend.probe(space)
    argv = backend.argv(config, space, port=space.server.port, simulate=False, files_dir=files_dir)
    here, there = backend.launcher(space), backend.launcher(space, deploy=True)
    if argv[: len(here)] == here:  # this machine's interpreter or cached build: the deployment host's plain one
        argv = there + argv[len(here) :]
    return argv


# ---------------------------------------------------------------------------------------------- what is exported


@dataclass(frozen=True)
class Chosen:
    """The config an export deploys and its figures (``choose``)."""

    trial: int | None
    config: TrialConfig
    why: str
    tok_per_s: float | None
    speedup: float | None
    speedup_ci: Interval | None
    source: str  # confirmation | search
    baseline: dict[str, object] | None  # the baseline its speedup is against: trial, config, tok_per_s


def choose(res: StudyResult, trial: int | None) -> Chosen:
    """The config to export and its figures: the recommendation, or trial ``trial`` (its search measurement, and
    its confirmed interval when it was a confirmation candidate)."""
    if trial is None:
        rec = res.recommended
        config = rec.trial_config
        if config is None:
            raise ValueError("nothing to export yet: no baseline has been measured")
        best = res.best
        ci = rec.speedup_ci if rec.winner else None
        return Chosen(
            trial=rec.trial,
            config=config,
            why=rec.why,
            tok_per_s=rec.tok_per_s,
            speedup=best.speedup if best is not None and best.trial == rec.trial and ci is not None else None,
            speedup_ci=ci,
            source="confirmation" if ci else "search",
            baseline=_baseline_entry(res.fastest_baseline),
        )
    t = res.trial(trial)
    if t is None:
        raise ValueError(f"--trial {trial}: no such trial in study {res.study}")
    shown = TrialRecord(t).shown_config
    if t.state != TrialState.COMPLETE or not shown:
        raise ValueError(f"--trial {trial}: it was not measured to the end ({t.state.name}); nothing to export")
    confirmed = res.confirmed_of(trial)
    iv = confirmed.headline if confirmed else None
    cfg = TrialConfig.from_dict(shown)
    same = res.baseline(cfg.cuda_graph)
    base = (res.fastest_baseline or same) if iv is not None and confirmed and confirmed.deploy_speedup_ci else same
    return Chosen(
        trial=trial,
        config=cfg,
        why=f"trial {trial}, chosen with --trial",
        tok_per_s=confirmed.mean_tok_per_s if confirmed else t.value,
        speedup=iv.point if iv else (res.search_speedup(t) if not cfg.is_baseline else 1.0),
        speedup_ci=iv,
        source="confirmation" if iv else "search",
        baseline=_baseline_entry(base),
    )


def _baseline_entry(b: Baseline | None) -> dict[str, object] | None:
    if b is None:
        return None
    return {"trial": b.trial, "config": b.config.to_dict(), "tok_per_s": b.tok_per_s}


def fingerprint(path: str | Path) -> dict[str, str | int | None]:
    """A checkpoint's fingerprint: sha256 of its config.json and of its weight index (a directory), or of a single
    file's first MiB and its size (a GGUF); None for a file not on this machine."""
    p = Path(path)
    out: dict[str, str | int | None] = {"config_json_sha256": None, "weight_index": None, "weight_index_sha256": None}
    if p.is_dir():
        cfg = p / "config.json"
        if cfg.is_file():
            out["config_json_sha256"] = hashlib.sha256(cfg.read_bytes()).hexdigest()
        for name in WEIGHT_INDEXES:
            if (p / name).is_file():
                out["weight_index"] = name
                out["weight_index_sha256"] = hashlib.sha256((p / name).read_bytes()).hexdigest()
                break
    elif p.is_file():
        with open(p, "rb") as f:
            head = f.read(1 << 20)
        out = {"file_sha256_first_mib": hashlib.sha256(head).hexdigest(), "size": p.stat().st_size}
    return out


def checkpoints(
    space: Space, config: TrialConfig, read_space: Space | None = None
) -> list[dict[str, str | int | None]]:
    """The target's and the config's drafter's fingerprints; ``read_space`` names where to read them (a simulated
    study's stand-in checkpoints), the entries keep the deployment's paths."""
    read = read_space or space
    out = [{"role": "target", "path": space.server.model_path, **fingerprint(read.server.model_path)}]
    if config.drafter is not None:
        d = next(d for d in space.drafters if d.name == config.drafter)
        r = next((x for x in read.drafters if x.name == config.drafter), d)
        out.append({"role": "drafter", "name": d.name, "path": d.path, **fingerprint(r.path)})
    if read is not space:
        for c in out:
            c["read_from"] = "the simulator's stand-in checkpoint (the real one is not on this machine)"
    return out


@dataclass(frozen=True)
class ContainerLaunch:
    """The launch in a container of the backend's image."""

    entrypoint: list[str]  # the image's own (``Backend.image_entrypoint``), [] when it has none
    launcher: list[str]  # what starts the server there: the entrypoint, else the plain ``deploy_launcher``
    args: list[str]
    replaced: list[str] | None  # the space's launcher when the container starts the server otherwise


@dataclass(frozen=True)
class Bundle:
    """Everything an export holds: ``public`` is what JSON and YAML write (the launch with its files bare, env with
    secrets redacted, the provenance); the rest is how the other formats name the files and start the server."""

    public: dict[str, Any]
    space: Space
    backend: Backend
    script_argv: list[str]  # its files beside a script
    container: ContainerLaunch  # listening on every interface
    slowest_startup_s: float | None  # of the study's measured start-ups (a duplicate's: its original's)
    startups: int
    schedule_note: str | None

    @property
    def launch(self) -> dict[str, Any]:
        return self.public["launch"]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.public["provenance"]


def _read_paths(space: Space, read_space: Space | None) -> Space:
    """``space`` with the checkpoint paths of ``read_space`` (where they are read on this machine), matched by
    drafter name; ``space`` itself without one."""
    if read_space is None:
        return space
    where = {d.name: d.path for d in read_space.drafters}
    return dataclasses.replace(
        space,
        server=dataclasses.replace(space.server, model_path=read_space.server.model_path),
        drafters=tuple(dataclasses.replace(d, path=where.get(d.name, d.path)) for d in space.drafters),
    )


def bundle(
    space: Space,
    backend: Backend,
    result: StudyResult,
    *,
    trial: int | None = None,
    read_space: Space | None = None,
    now: _dt.datetime | None = None,
    schedule: Mapping[str, Any] | None = None,
    server: Backend | None = None,
) -> Bundle:
    """The export of the recommendation or ``trial``. ``schedule``: a per-load-level schedule the launch runs
    (``Backend.schedule_launch``); ``server``: another server to deploy on (``Backend.translate``; ValueError when
    the translation would not be faithful)."""
    res = result
    chosen = choose(res, trial)
    config = chosen.config
    dspace, dbackend, dconfig = space, backend, config
    translation: dict[str, object] | None = None
    if server is not None and type(server) is not type(backend):
        dspace, dconfig = server.translate(space, backend.portable(config, space))
        dbackend = server
        # the translation as the other server resolves it, on the checkpoints readable here (a simulated study's
        # stand-ins carry the real config.json): a drafter it would refuse is no faithful translation
        here = _read_paths(dspace, read_space)
        try:
            dbackend.resolve(dconfig, here)
        except InfeasibleConfig as e:
            raise ValueError(str(e)) from None
        translation = {
            "server": dbackend.name,
            "from": backend.name,
            "method": dbackend.deploy_method(dconfig, dspace),
            "config": dconfig.to_dict(),
            "measured_on": backend.display_name or backend.name,
            # the drafter's checkpoint could not be read here, so nothing checked that the server loads it
            "unchecked": dconfig.drafter is not None
            and not (Path(here.drafter(dconfig.drafter).path) / "config.json").is_file(),
        }

    def launch(sp: Space, files_dir: str | None) -> tuple[list[str], dict[str, str], str | None]:
        argv = launch_argv(sp, dbackend, dconfig, files_dir=files_dir)
        files = dbackend.files(dconfig, sp)
        if schedule is None:
            return argv, files, None
        sl = dbackend.schedule_launch(sp, schedule, argv, files_dir=files_dir)
        return sl.argv, {**files, **sl.files}, sl.note

    argv, files, schedule_note = launch(dspace, None)
    script_argv = launch(dspace, _SCRIPT_MARK)[0]
    inside = dataclasses.replace(dspace, server=dataclasses.replace(dspace.server, host=CONTAINER_HOST))
    container_argv = launch(inside, CONTAINER_FILES)[0]
    env = redact_env(dbackend.env(dconfig, dspace))
    launcher = dbackend.launcher(dspace, deploy=True)
    started_by = launcher if container_argv[: len(launcher)] == launcher else container_argv[:1]
    entrypoint = list(dbackend.image_entrypoint)
    there = entrypoint or list(dbackend.deploy_launcher) or list(started_by)
    container = ContainerLaunch(
        entrypoint, there, container_argv[len(started_by) :], None if list(started_by) == there else list(started_by)
    )
    startups = [float(r.startup_s) for r in map(TrialRecord, res.trials) if r.startup_s and r.duplicate_of is None]
    provenance = {
        "study": res.study,
        "trial": chosen.trial,
        "simulated": res.simulated,
        "space": space.path,
        "backend": space.server.backend,
        "server_version": space.server.version or None,
        "method": backend.deploy_method(config, space),
        "autotune_version": __version__,
        "exported_at": (now or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": res.verdict.value,
        "why": chosen.why,
        "config": config.to_dict(),
        "measured": {
            "tok_per_s": chosen.tok_per_s,
            "speedup": chosen.speedup,
            "speedup_ci": None if chosen.speedup_ci is None else chosen.speedup_ci.to_dict(),
            "source": chosen.source,
            "units": res.units,
        },
        "baseline": chosen.baseline,
        "checkpoints": checkpoints(space, config, read_space),
    }
    if translation is not None:
        provenance["translated"] = translation
    if schedule is not None:
        provenance["schedule"] = [
            {"level": x["level"], "draft": x["draft"], "trial": x["trial"]} for x in schedule["levels"]
        ]
    public = {
        **{k: provenance[k] for k in ("autotune_version", "exported_at", "study", "simulated", "space", "backend")},
        "verdict": res.verdict.value,
        "why": chosen.why,
        "trial": chosen.trial,
        "config": config.to_dict(),
        "method": provenance["method"],
        "speculative": not config.is_baseline,
        "knobs": config.knob_dict,
        "measured": provenance["measured"],
        "launch": {
            "argv": argv,
            "command": shlex.join(argv),
            "launcher": argv[: len(launcher)] if argv[: len(launcher)] == launcher else argv[:1],
            "env": env,
            **({"files": files} if files else {}),
        },
        **({"schedule": dict(schedule)} if schedule is not None else {}),
        "verify": verify_command(space, config, simulated=bool(res.simulated)),
        "provenance": provenance,
    }
    return Bundle(
        public, dspace, dbackend, script_argv, container, max(startups, default=None), len(startups), schedule_note
    )


def verify_command(space: Space, config: TrialConfig, *, simulated: bool) -> str:
    """The ``autotune bench`` command that measures ``config`` again on the study's own server."""
    words = ["autotune", "bench", space.path or "SPACE", *(["--simulate"] if simulated else [])]
    for k, v in config.to_dict().items():
        if v is not None:
            words += ["--set", f"{k}={v}"]
    return shlex.join(words)


# ---------------------------------------------------------------------------------------------- reading back


def read_provenance(text: str, where: str = "the file") -> dict[str, Any]:
    """The provenance of any export format (``autotune reverify``); ValueError when there is none."""
    for line in text.splitlines():
        if line.startswith(PROVENANCE_COMMENT):
            return _checked(json.loads(line[len(PROVENANCE_COMMENT) :]), where)
    try:
        docs = list(yaml.safe_load_all(text))  # JSON is YAML too; Kubernetes: a ConfigMap, then the Deployment
    except yaml.YAMLError as e:
        raise ValueError(f"{where}: not an autotune export (neither YAML nor JSON: {e})") from None
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("provenance"), dict):
            return _checked(doc["provenance"], where)
        if isinstance(doc.get("x-autotune"), dict):
            return _checked(doc["x-autotune"], where)
        ann = (doc.get("metadata") or {}).get("annotations") or {}
        if PROVENANCE_ANNOTATION in ann:
            return _checked(json.loads(ann[PROVENANCE_ANNOTATION]), where)
    raise ValueError(f"{where}: not an autotune export (no provenance found; export it with `autotune export`)")


def _checked(p: Any, where: str) -> dict[str, Any]:
    missing = [k for k in ("study", "space", "config", "measured", "baseline") if not isinstance(p, dict) or k not in p]
    if missing:
        raise ValueError(f"{where}: the provenance lacks {', '.join(missing)} (exported by an older autotune?)")
    return p

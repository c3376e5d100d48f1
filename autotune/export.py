"""Trial -> deployment: the recommended config (or a chosen trial) as a launch command, server args as YAML/JSON, an
env file, a docker-compose service or a Kubernetes Deployment, each stamped with its provenance.

``bundle`` gathers everything (pure over the report dict, apart from probing the server for flag spellings and
reading checkpoint fingerprints); one function per format turns it into text (``FORMATS``: adding a format is one
entry). A server adds its own format (``Backend.export_format``: its launch command); a format fits a study of its
own server, and another server's only as a faithful translation (``Backend.portable`` -> ``Backend.translate``),
else the study's formats are named (``fitting_formats``). With load levels every format launches the schedule
(``Backend.schedule_launch``). The files a launch reads (``Backend.files``, a schedule's) are named in every format
(beside a script, mounted in a container) and written beside the export by ``autotune export -o`` (``write``). In
a container or pod the server listens on ``CONTAINER_HOST``. Every format carries the same ``provenance`` (YAML/JSON:
a key; compose: ``x-autotune``; Kubernetes: the annotation ``autotune/provenance``; command and env file: a
``# autotune-provenance: {json}`` line), which is what ``autotune reverify`` reads back (``read_provenance``).
Secret-looking env values never appear: the command and compose file take them from the deploying shell, the env
file leaves them to be set, Kubernetes reads a Secret.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import __version__
from autotune._io import atomic_write
from autotune.backends.base import Backend
from autotune.backends.registry import backend_class, backend_names
from autotune.config import TrialConfig
from autotune.redact import is_secret_name, redact_env
from autotune.space import Space

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


class _NoAliases(yaml.SafeDumper):
    """Plain YAML without anchors (``&id001``) for dicts that appear twice (labels)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_NoAliases, sort_keys=False)


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


def _choose(report: dict[str, Any], trial: int | None) -> dict[str, Any]:
    """The config to export and its figures: the recommendation, or trial ``trial`` (its search measurement, and
    its confirmed interval when it was a confirmation candidate)."""
    if trial is None:
        rec = report["recommended"]
        if rec.get("config") is None:
            raise ValueError("nothing to export yet: no baseline has been measured")
        best = report.get("best") or {}
        fastest = report.get("fastest_baseline") or {}
        is_best = best.get("trial") == rec.get("trial") and rec.get("speedup_ci") is not None
        return {
            "trial": rec.get("trial"),
            "config": rec["config"],
            "why": rec.get("why"),
            "tok_per_s": rec.get("tok_per_s"),
            "speedup": best.get("speedup") if is_best else None,
            "speedup_ci": rec.get("speedup_ci"),
            "source": "confirmation" if rec.get("speedup_ci") else "search",
            "baseline": _baseline_entry(fastest),
        }
    row = next((r for r in report["trials"] if r["number"] == trial), None)
    if row is None:
        raise ValueError(f"--trial {trial}: no such trial in study {report['study']}")
    if row["state"] != "COMPLETE" or not row.get("config"):
        raise ValueError(f"--trial {trial}: it was not measured to the end ({row['state']}); nothing to export")
    confirmed = next((c for c in report.get("confirmed", []) if c["trial"] == trial), None)
    ci = (confirmed.get("deploy_speedup_ci") or confirmed.get("speedup_ci")) if confirmed else None
    cfg = TrialConfig.from_dict(row["config"])
    same = report["baseline"].get("cuda_graph_on" if cfg.cuda_graph else "cuda_graph_off") or {}
    if ci is not None and confirmed and confirmed.get("deploy_speedup_ci"):
        base = report.get("fastest_baseline") or same
    else:
        base = same
    return {
        "trial": trial,
        "config": row["config"],
        "why": f"trial {trial}, chosen with --trial",
        "tok_per_s": confirmed["tok_per_s"] if confirmed else row["tok_per_s"],
        "speedup": ci["point"] if ci else (row.get("speedup") if not cfg.is_baseline else 1.0),
        "speedup_ci": ci,
        "source": "confirmation" if ci else "search",
        "baseline": _baseline_entry(base),
    }


def _baseline_entry(b: dict[str, Any]) -> dict[str, Any] | None:
    if not b:
        return None
    return {
        "trial": b.get("trial"),
        "config": TrialConfig.baseline(b["cuda_graph"]).to_dict(),
        "tok_per_s": b.get("tok_per_s"),
    }


def fingerprint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's fingerprint: sha256 of its config.json and of its weight index (a directory), or of a single
    file's first MiB and its size (a GGUF). Missing files give None (the checkpoint is not on this machine)."""
    p = Path(path)
    out: dict[str, Any] = {"config_json_sha256": None, "weight_index": None, "weight_index_sha256": None}
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


def checkpoints(space: Space, config: TrialConfig, read_space: Space | None = None) -> list[dict[str, Any]]:
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


def bundle(
    space: Space,
    backend: Backend,
    report: dict[str, Any],
    *,
    trial: int | None = None,
    read_space: Space | None = None,
    now: _dt.datetime | None = None,
    schedule: Mapping[str, Any] | None = None,
    server: Backend | None = None,
) -> dict[str, Any]:
    """Everything an export holds: the launch (argv, env with secrets redacted, the files it reads) and its
    provenance. ``schedule``: a per-load-level schedule the launch runs (``Backend.schedule_launch``); ``server``:
    another server to deploy on (``Backend.translate``; ValueError when the translation would not be faithful).
    The launch comes in three namings of its files: bare (``argv``), beside a script (``_script_argv``) and in a
    container, listening on every interface there (``_container_argv``)."""
    chosen = _choose(report, trial)
    config = TrialConfig.from_dict(chosen["config"])
    dspace, dbackend, dconfig = space, backend, config
    translation: dict[str, Any] | None = None
    if server is not None and type(server) is not type(backend):
        dspace, dconfig = server.translate(space, backend.portable(config, space))
        dbackend = server
        translation = {
            "server": dbackend.name,
            "from": backend.name,
            "method": dbackend.deploy_method(dconfig, dspace),
            "config": dconfig.to_dict(),
            "measured_on": backend.display_name or backend.name,
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
    provenance = {
        "study": report["study"],
        "trial": chosen["trial"],
        "simulated": report.get("simulated"),
        "space": space.path,
        "backend": space.server.backend,
        "server_version": space.server.version or getattr(backend, "version", None),
        "method": backend.deploy_method(config, space),
        "autotune_version": __version__,
        "exported_at": (now or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": report["verdict"],
        "why": chosen["why"],
        "config": config.to_dict(),
        "measured": {
            "tok_per_s": chosen["tok_per_s"],
            "speedup": chosen["speedup"],
            "speedup_ci": chosen["speedup_ci"],
            "source": chosen["source"],
            "units": report.get("units"),
        },
        "baseline": chosen["baseline"],
        "checkpoints": checkpoints(space, config, read_space),
    }
    if translation is not None:
        provenance["translated"] = translation
    if schedule is not None:
        provenance["schedule"] = [
            {"level": x["level"], "draft": x["draft"], "trial": x["trial"]} for x in schedule["levels"]
        ]
    return {
        **{k: provenance[k] for k in ("autotune_version", "exported_at", "study", "simulated", "space", "backend")},
        "verdict": report["verdict"],
        "why": chosen["why"],
        "trial": chosen["trial"],
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
        "verify": "autotune bench "
        + shlex.quote(space.path or "SPACE")
        + "".join(" --set " + shlex.quote(f"{k}={v}") for k, v in config.to_dict().items() if v is not None),
        "provenance": provenance,
        "_space": dspace,
        "_backend": dbackend,
        "_script_argv": script_argv,
        "_container_argv": container_argv,
        "_schedule_note": schedule_note,
    }


# ---------------------------------------------------------------------------------------------- the formats


def _public(b: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in b.items() if not k.startswith("_")}


def _comment_lines(b: dict[str, Any], files_where: Callable[[str], str] | None = None) -> list[str]:
    """The comment block every text format starts with: who, what (the method), the figures, the translation, the
    schedule and the files the launch reads (``files_where(name)``: where this format finds it)."""
    p = b["provenance"]
    m = p["measured"]
    ci = m.get("speedup_ci")
    sim = p.get("simulated")
    method = p.get("method")
    lines = [
        f"# autotune {p['autotune_version']}: study {p['study']}, trial {p['trial']}, "
        + (f"method {method}" if method else "no speculation (the baseline)")
        + (" [SIMULATED]" if sim else "")
        + f", exported {p['exported_at']}",
        f"# measured {_f(m.get('tok_per_s'))} {m.get('units') or 'tok/s'}"
        + (
            f", speedup {ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"
            if ci
            else (f", speedup {m['speedup']:.3f} (search, no interval)" if m.get("speedup") is not None else "")
        )
        + (f" against baseline trial {p['baseline']['trial']}" if p.get("baseline") else ""),
    ]
    if sim:
        scenario = sim.get("scenario") if isinstance(sim, dict) else None
        lines.append(f"# SIMULATED: figures from autotune's simulator (scenario {scenario}), not measured on hardware")
    t = p.get("translated")
    if t:
        lines.append(
            f"# translated from the {t['measured_on']} study to {b['_backend'].display_name or t['server']} "
            f"({'method ' + t['method'] if t['method'] else 'no speculation'}): measured on {t['measured_on']}, "
            "never on this server; measure it there "
            "before relying on the figures"
        )
    if b.get("_schedule_note"):
        lines.append(f"# schedule: {b['_schedule_note']}")
    where = files_where or (
        lambda n: f"reads {n} from its working directory (autotune export -o FILE writes it beside FILE)"
    )
    lines += [f"# {where(name)}" for name in b["launch"].get("files", {})]
    return lines + [PROVENANCE_COMMENT + json.dumps(p, sort_keys=True, separators=(",", ":"))]


def _f(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}"


def _secret_names(b: dict[str, Any]) -> list[str]:
    return sorted(k for k in b["launch"]["env"] if is_secret_name(k))


def _script_word(arg: str) -> str:
    """One argv element for a shell script, its files named beside the script (``SCRIPT_DIR``)."""
    if _SCRIPT_MARK not in arg:
        return shlex.quote(arg)
    return SCRIPT_DIR.join(shlex.quote(part) if part else "" for part in arg.split(_SCRIPT_MARK))


def fmt_command(b: dict[str, Any], _opts: Options) -> str:
    """A shell command line (a script: ``bash FILE``); secrets come from the deploying shell's environment
    (``NAME="$NAME"``); the files the launch reads are named beside the script (``"$(dirname "$0")"/NAME``)."""
    env = b["launch"]["env"]
    prefix = [f'{k}="${k}"' if is_secret_name(k) else f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    words = [_script_word(a) for a in b["_script_argv"]]
    lines = _comment_lines(b, lambda n: f"reads {n} beside this script (autotune export -o FILE writes it there)")
    return "\n".join(lines) + "\n" + " ".join([*prefix, *words]) + "\n"


def fmt_json(b: dict[str, Any], _opts: Options) -> str:
    return json.dumps(_public(b), indent=2) + "\n"


def fmt_yaml(b: dict[str, Any], _opts: Options) -> str:
    return yaml.safe_dump(_public(b), sort_keys=False)


def fmt_env(b: dict[str, Any], _opts: Options) -> str:
    """A POSIX shell env file (``set -a; . FILE``): the server's variables, ``SERVER_LAUNCHER`` and ``SERVER_ARGS``
    (``$SERVER_LAUNCHER $SERVER_ARGS`` starts it); secrets are named in a comment, never written."""
    launch = b["launch"]
    argv, launcher = launch["argv"], launch["launcher"]
    lines = _comment_lines(b)
    for k in _secret_names(b):
        lines.append(f"# {k} is a secret: set it in the deployment's environment (not written here)")
    lines += [f"{k}={shlex.quote(v)}" for k, v in sorted(launch["env"].items()) if not is_secret_name(k)]
    lines.append("SERVER_LAUNCHER=" + shlex.quote(shlex.join(launcher)))
    lines.append("SERVER_ARGS=" + shlex.quote(shlex.join(argv[len(launcher) :])))
    return "\n".join(lines) + "\n"


def _deploy(b: dict[str, Any], opts: Options) -> dict[str, Any]:
    """What compose and Kubernetes share: name, image, GPUs, port, the model directories to mount (absolute; a
    relative checkpoint path is read from the working directory, which the container then gets too)."""
    space: Space = b["_space"]
    version = space.server.version
    images = b["_backend"].images
    image = opts.image or (images[0].format(version=version) if version else images[1])
    name = re.sub(r"[^a-z0-9-]+", "-", (opts.name or space.name).lower()).strip("-")[:63] or "autotune"
    paths = [Path(c["path"]) for c in b["provenance"]["checkpoints"]]
    dirs = {
        (p.parent if c.get("file_sha256_first_mib") or p.suffix == ".gguf" else p)
        for p, c in zip(paths, b["provenance"]["checkpoints"], strict=True)
    }
    relative = any(not p.is_absolute() for p in paths)
    return {
        "name": name,
        "image": image,
        "gpus": opts.gpus or _gpus(space),
        "port": space.server.port,
        "host": space.server.host,
        "mounts": sorted({str(d if d.is_absolute() else Path.cwd() / d) for d in dirs}),
        "workdir": str(Path.cwd()) if relative else None,
        "files": b["launch"].get("files", {}),
    }


def _gpus(space: Space) -> int:
    visible = space.server.env.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([x for x in visible.split(",") if x.strip()])
    args = list(space.server.extra_args)
    for flag in ("--tp-size", "--tp", "--tensor-parallel-size"):
        if flag in args and args.index(flag) + 1 < len(args):
            try:
                return int(args[args.index(flag) + 1])
            except ValueError:
                pass
    return 1


def _listen_line(d: dict[str, Any], where: str) -> str:
    return f"# the server listens on {CONTAINER_HOST}:{d['port']} {where}"


def fmt_compose(b: dict[str, Any], opts: Options) -> str:
    """A docker-compose file with one service: the exact argv as its command, listening on every interface of the
    container, the port published on the space's ``server.host`` of this host (where it was measured: 127.0.0.1
    keeps it to this host), the GPUs reserved, the checkpoints mounted read-only at the same paths, the launch's
    files mounted from beside the compose file."""
    d = _deploy(b, opts)
    env = {k: (f"${{{k}:?set {k}}}" if is_secret_name(k) else v) for k, v in sorted(b["launch"]["env"].items())}
    service: dict[str, Any] = {
        "image": d["image"],
        "command": b["_container_argv"],
        "ipc": "host",
        "ports": [f"{d['host']}:{d['port']}:{d['port']}"],
        "volumes": [f"{m}:{m}:ro" for m in d["mounts"]] + [f"./{n}:{CONTAINER_FILES}/{n}:ro" for n in d["files"]],
        "deploy": {
            "resources": {
                "reservations": {"devices": [{"driver": "nvidia", "count": d["gpus"], "capabilities": ["gpu"]}]}
            }
        },
    }
    if d["workdir"]:
        service["working_dir"] = d["workdir"]
    if env:
        service["environment"] = env
    doc = {"x-autotune": b["provenance"], "services": {d["name"]: service}}
    lines = _comment_lines(
        b, lambda n: f"{n}: mounted from beside this file at {CONTAINER_FILES}/{n} (autotune export -o writes it)"
    )[:-1]
    lines.append(_listen_line(d, f"in the container, published on {d['host']}:{d['port']} of this host"))
    return "\n".join(lines) + "\n" + _dump(doc)


def fmt_k8s(b: dict[str, Any], opts: Options) -> str:
    """A Kubernetes Deployment: the launcher as ``command``, the exact args listening on the pod's address, GPUs as
    ``nvidia.com/gpu`` limits, the checkpoints as hostPath volumes at the same paths, the launch's files from a
    ConfigMap ``NAME-files`` (a document before the Deployment), secrets from a Secret named ``NAME-secrets``, and
    the provenance as an annotation."""
    d = _deploy(b, opts)
    launch = b["launch"]
    argv = b["_container_argv"]
    env = []
    for k, v in sorted(launch["env"].items()):
        if is_secret_name(k):
            env.append({"name": k, "valueFrom": {"secretKeyRef": {"name": f"{d['name']}-secrets", "key": k}}})
        else:
            env.append({"name": k, "value": v})
    volumes: list[dict[str, Any]] = [
        {"name": f"ckpt-{i}", "hostPath": {"path": m, "type": "Directory"}} for i, m in enumerate(d["mounts"])
    ]
    mounts: list[dict[str, Any]] = [
        {"name": f"ckpt-{i}", "mountPath": m, "readOnly": True} for i, m in enumerate(d["mounts"])
    ]
    volumes.append({"name": "shm", "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    p = b["provenance"]
    labels = {"app.kubernetes.io/name": d["name"], "app.kubernetes.io/managed-by": "autotune"}
    docs: list[dict[str, Any]] = []
    if d["files"]:
        config_map = f"{d['name']}-files"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": config_map, "labels": labels},
                "data": dict(d["files"]),
            }
        )
        volumes.append({"name": "files", "configMap": {"name": config_map}})
        mounts.append({"name": "files", "mountPath": CONTAINER_FILES, "readOnly": True})
    container: dict[str, Any] = {
        "name": "server",
        "image": d["image"],
        "command": launch["launcher"],
        "args": argv[len(launch["launcher"]) :],
        "ports": [{"containerPort": d["port"], "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": d["gpus"]}},
        "volumeMounts": mounts,
    }
    if d["workdir"]:
        container["workingDir"] = d["workdir"]
    if env:
        container["env"] = env
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": d["name"],
                "labels": labels,
                "annotations": {
                    PROVENANCE_ANNOTATION: json.dumps(p, sort_keys=True, separators=(",", ":")),
                    "autotune/trial": str(p["trial"]),
                    "autotune/study": str(p["study"]),
                },
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container], "volumes": volumes}},
            },
        }
    )
    lines = _comment_lines(b, lambda n: f"{n}: from ConfigMap {d['name']}-files, mounted at {CONTAINER_FILES}")[:-1]
    lines.append(_listen_line(d, "on the pod's address (put a Service in front to reach it)"))
    return "\n".join(lines) + "\n" + yaml.dump_all(docs, Dumper=_NoAliases, sort_keys=False)


#: format name -> renderer (one function per format); each server's own format comes on top (``format_names``)
FORMATS: dict[str, Callable[[dict[str, Any], Options], str]] = {
    "command": fmt_command,
    "yaml": fmt_yaml,
    "json": fmt_json,
    "env": fmt_env,
    "compose": fmt_compose,
    "k8s": fmt_k8s,
}


def _server_formats() -> dict[str, type[Backend]]:
    """Each server's own format (``Backend.export_format``) -> its backend class."""
    out: dict[str, type[Backend]] = {}
    for name in backend_names():
        cls = backend_class(name)
        if cls.export_format:
            out[cls.export_format] = cls
    return out


def format_names(backend: Backend) -> list[str]:
    """Every format, in the order messages list them: ``backend``'s own, the generic ones, the other servers'."""
    own = [backend.export_format] if backend.export_format else []
    return [*own, *FORMATS, *(f for f in _server_formats() if f not in own)]


def fitting_formats(backend: Backend) -> list[str]:
    """The formats a study of ``backend`` exports to: its own, the generic ones (its server's launch), and other
    servers' that take a translation of it (``Backend.accepts_translation``, ``Backend.portable_checkpoints``)."""
    return [f for f in format_names(backend) if _translation_problem(backend, f) is None]


def _translation_problem(backend: Backend, fmt: str) -> str | None:
    if fmt in FORMATS or fmt == backend.export_format:
        return None
    owner = _server_formats().get(fmt)
    if owner is None:
        return "unknown format"
    here, there = backend.display_name or backend.name, owner.display_name or owner.name
    if not owner.accepts_translation:
        return f"it launches {there}, which takes no other server's study; this study ran {here}"
    if not backend.portable_checkpoints:
        return f"it launches {there}, which cannot load this {here} study's checkpoints"
    return None


def format_problem(backend: Backend, fmt: str) -> str | None:
    """Why ``--format fmt`` cannot export a study of ``backend`` (None: it may; a translation to another server is
    checked against the exported config when it is rendered)."""
    problem = _translation_problem(backend, fmt)
    if problem is None:
        return None
    fitting = ", ".join(fitting_formats(backend))
    if problem == "unknown format":
        return f"--format {fmt}: unknown format; expected one of {fitting}"
    return f"--format {fmt}: {problem}; formats that fit: {fitting}"


def suggested_format(backend: Backend) -> str:
    """The launch-command format to suggest after a study: the server's own when it is one, else ``command``."""
    return backend.export_format if backend.export_format and backend.export_format_launches else "command"


@dataclass(frozen=True)
class Exported:
    """An export: its text and the files a launch reads, to be written beside it (``write``)."""

    text: str
    files: dict[str, str]


def export(
    space: Space,
    backend: Backend,
    report: dict[str, Any],
    fmt: str,
    *,
    trial: int | None = None,
    options: Options | None = None,
    read_space: Space | None = None,
    schedule: Mapping[str, Any] | None = None,
) -> Exported:
    """The export in format ``fmt`` and its files. ``schedule`` (``autotune.schedule.build``): every format
    launches it (``Backend.schedule_launch``), the text formats with its table after their comment block; its
    static config is the recommended one, or when the baseline is recommended the config of its first level with
    speculation on. Another server's format translates the study (``Backend.portable`` / ``translate``).
    ValueError: the format does not fit."""
    problem = format_problem(backend, fmt)
    if problem:
        raise ValueError(problem)
    owner = _server_formats().get(fmt)
    server = owner() if owner is not None and not isinstance(backend, owner) else None
    if (
        schedule is not None
        and trial is None
        and not (report.get("recommended") or {}).get("config", {}).get("drafter")
    ):
        on = [x for x in schedule["levels"] if x.get("draft")]
        trial = on[0]["trial"] if on else None
    try:
        b = bundle(space, backend, report, trial=trial, read_space=read_space, schedule=schedule, server=server)
    except ValueError as e:
        if server is None:
            raise
        here = backend.display_name or backend.name
        raise ValueError(
            f"--format {fmt}: no faithful translation of this {here} study to {server.display_name}: {e}; "
            f"formats that fit: {', '.join(f for f in fitting_formats(backend) if f != fmt)}"
        ) from None
    text = FORMATS.get(fmt, fmt_command)(b, options or Options())
    if schedule is not None and fmt not in ("json", "yaml"):
        from autotune import schedule as schedule_

        # the schedule's table after the comment block, before what runs
        table = ["# " + line for line in schedule_.render_text(schedule).splitlines()]
        lines = text.splitlines(keepends=True)
        at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
        text = "".join([*lines[:at], *(line + "\n" for line in table), *lines[at:]])
    return Exported(text, dict(b["launch"].get("files", {})))


def render(
    space: Space,
    backend: Backend,
    report: dict[str, Any],
    fmt: str,
    *,
    trial: int | None = None,
    options: Options | None = None,
    read_space: Space | None = None,
) -> str:
    """The export's text in format ``fmt`` (``export``)."""
    return export(space, backend, report, fmt, trial=trial, options=options, read_space=read_space).text


def files(space: Space, backend: Backend, report: dict[str, Any], *, trial: int | None = None) -> dict[str, str]:
    """The files the exported config's server reads at launch (``Backend.files``): name -> text."""
    return backend.files(TrialConfig.from_dict(_choose(report, trial)["config"]), space)


def write(path: Path, text: str, files_: dict[str, str]) -> list[Path]:
    """The export to ``path`` and each of its files beside it, atomically; returns the files' paths."""
    atomic_write(path, text)
    out = []
    for name, content in files_.items():
        atomic_write(path.parent / name, content)
        out.append(path.parent / name)
    return out


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

"""The export formats: one function per format turns a ``Bundle`` into text (``FORMATS``), and which formats fit
a study's server (its own, another server's only as a faithful translation)."""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.backends import backend_class
from autotune.backends.base import Backend
from autotune.export_bundle import (
    _SCRIPT_MARK,
    CONTAINER_FILES,
    CONTAINER_HOST,
    PROVENANCE_ANNOTATION,
    PROVENANCE_COMMENT,
    SCRIPT_DIR,
    Bundle,
    ContainerLaunch,
    Options,
)
from autotune.redact import is_secret_name
from autotune.servers import backend_names
from autotune.space import Space


class _NoAliases(yaml.SafeDumper):
    """Plain YAML without anchors (``&id001``) for dicts that appear twice (labels)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _comment_lines(b: Bundle, files_where: Callable[[str], str] | None = None) -> list[str]:
    """The comment block every text format starts with (``files_where(name)``: where this format finds a file)."""
    p = b.provenance
    m = p["measured"]
    ci, tps = m.get("speedup_ci"), m.get("tok_per_s")
    sim = p.get("simulated")
    method = p.get("method")
    lines = [
        f"# autotune {p['autotune_version']}: study {p['study']}, trial {p['trial']}, "
        + (f"method {method}" if method else "no speculation (the baseline)")
        + (" [SIMULATED]" if sim else "")
        + f", exported {p['exported_at']}",
        f"# measured {'-' if tps is None else f'{tps:.1f}'} {m.get('units') or 'tok/s'}"
        + (
            f", speedup {ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"
            if ci
            else (f", speedup {m['speedup']:.3f} (search, no interval)" if m.get("speedup") is not None else "")
        )
        + (f" against baseline trial {p['baseline']['trial']}" if p.get("baseline") else ""),
    ]
    if sim:
        lines.append(
            f"# SIMULATED: figures from autotune's simulator (scenario {sim['scenario']}), not measured on hardware"
        )
    t = p.get("translated")
    if t:
        lines.append(
            f"# translated from the {t['measured_on']} study to {b.backend.display_name or t['server']} "
            f"({'method ' + t['method'] if t['method'] else 'no speculation'}): measured on {t['measured_on']}, "
            "never on this server; measure it there before relying on the figures"
        )
        if t.get("unchecked"):
            lines.append(
                f"# the drafter's checkpoint is not on this machine: nothing checked that {b.backend.display_name}"
                " loads its architecture; check it before deploying"
            )
    if b.schedule_note:
        lines.append(f"# schedule: {b.schedule_note}")
    where = files_where or (
        lambda n: f"reads {n} from its working directory (autotune export -o FILE writes it beside FILE)"
    )
    lines += [f"# {where(name)}" for name in b.launch.get("files", {})]
    return lines + [PROVENANCE_COMMENT + json.dumps(p, sort_keys=True, separators=(",", ":"))]


def _script_word(arg: str) -> str:
    """One argv element for a shell script, its files named beside the script."""
    if _SCRIPT_MARK not in arg:
        return shlex.quote(arg)
    return SCRIPT_DIR.join(shlex.quote(part) if part else "" for part in arg.split(_SCRIPT_MARK))


def fmt_command(b: Bundle, _opts: Options) -> str:
    """A shell command line (a script: ``bash FILE``); secrets come from the deploying shell's environment."""
    env = b.launch["env"]
    prefix = [f'{k}="${k}"' if is_secret_name(k) else f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    words = [_script_word(a) for a in b.script_argv]
    lines = _comment_lines(b, lambda n: f"reads {n} beside this script (autotune export -o FILE writes it there)")
    return "\n".join(lines) + "\n" + " ".join([*prefix, *words]) + "\n"


#: how an env export starts the server (README): ``SERVER_LAUNCHER`` and ``SERVER_ARGS`` hold shell-quoted words,
#: which ``eval`` reads back whole (a JSON argument with spaces stays one argument); an unquoted
#: ``$SERVER_LAUNCHER $SERVER_ARGS`` would split them at every space
ENV_START = 'set -a; . ./FILE; set +a; eval "$SERVER_LAUNCHER $SERVER_ARGS"'


def fmt_env(b: Bundle, _opts: Options) -> str:
    """A POSIX shell env file (``ENV_START`` starts it); secrets are named in a comment, never written."""
    launch = b.launch
    argv, launcher = launch["argv"], launch["launcher"]
    lines = _comment_lines(b)
    lines.append(
        f"# start it (sh or bash, FILE this file): {ENV_START}  (eval keeps each quoted argument whole; "
        "an unquoted $SERVER_LAUNCHER $SERVER_ARGS would split them at spaces)"
    )
    for k in sorted(k for k in launch["env"] if is_secret_name(k)):
        lines.append(f"# {k} is a secret: set it in the deployment's environment (not written here)")
    lines += [f"{k}={shlex.quote(v)}" for k, v in sorted(launch["env"].items()) if not is_secret_name(k)]
    lines.append("SERVER_LAUNCHER=" + shlex.quote(shlex.join(launcher)))
    lines.append("SERVER_ARGS=" + shlex.quote(shlex.join(argv[len(launcher) :])))
    return "\n".join(lines) + "\n"


#: a Hugging Face hub id (``org/name``), as SGLang and vLLM take one in place of a local checkpoint directory
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(path: str) -> bool:
    """Whether checkpoint ``path`` names a model on the Hugging Face hub (downloaded by the server), not a local path
    (a GGUF file is one: llama.cpp reads from disk only)."""
    return (
        _HUB_ID.fullmatch(path) is not None
        and not path.endswith(".gguf")
        and not Path(path).is_absolute()
        and not Path(path).exists()
    )


@dataclass(frozen=True)
class _Deploy:
    """What compose and Kubernetes share: name, image, GPUs, port, the model directories to mount (absolute; a
    relative checkpoint path is read from the working directory, which the container then gets too; a hub id is no
    path: the server downloads it), the hub ids, and how the image starts the server."""

    name: str
    image: str
    default_image: str
    gpus: int
    port: int
    host: str
    mounts: list[str]
    hub: list[str]
    workdir: str | None
    files: dict[str, str]
    container: ContainerLaunch


def _deploy(b: Bundle, opts: Options) -> _Deploy:
    space = b.space
    version = space.server.version
    images = b.backend.images
    default = images[0].format(version=version) if version else images[1]
    image = opts.image or default
    name = re.sub(r"[^a-z0-9-]+", "-", (opts.name or space.name).lower()).strip("-")[:63] or "autotune"
    checkpoints = b.provenance["checkpoints"]
    hub = sorted({c["path"] for c in checkpoints if is_hub_id(c["path"])})
    local = [c for c in checkpoints if c["path"] not in hub]
    paths = [Path(c["path"]) for c in local]
    dirs = {
        (p.parent if c.get("file_sha256_first_mib") or p.suffix == ".gguf" else p)
        for p, c in zip(paths, local, strict=True)
    }
    relative = any(not p.is_absolute() for p in paths)
    return _Deploy(
        name=name,
        image=image,
        default_image=default,
        gpus=opts.gpus or _gpus(space),
        port=space.server.port,
        host=space.server.host,
        mounts=sorted({str(d if d.is_absolute() else Path.cwd() / d) for d in dirs}),
        hub=hub,
        workdir=str(Path.cwd()) if relative else None,
        files=b.launch.get("files", {}),
        container=b.container,
    )


def _words(argv: list[str]) -> str:
    return "[" + ", ".join(argv) + "]"


def _image_lines(d: _Deploy, fmt: str) -> list[str]:
    """Which image runs the server and how it starts it, what to change for another image (``fmt``: compose or
    k8s), and the hub ids the server downloads."""
    c = d.container
    entrypoint, launcher = c.entrypoint, c.launcher
    image = d.image if d.image == d.default_image else f"{d.image} (taken to start as {d.default_image})"
    if fmt == "compose":
        if entrypoint:
            lines = [
                f"# image {image}: its entrypoint {_words(entrypoint)} runs with `command:` as its arguments; for an "
                f"image with another entrypoint add `entrypoint: {_words(launcher)}`"
            ]
        else:
            lines = [
                f"# image {image}: no entrypoint of its own, `command:` is the whole launch; for an image with an "
                f"entrypoint add `entrypoint: {_words(launcher)}` and keep only the arguments after "
                f"{_words(launcher)} in `command:`"
            ]
    else:
        lines = [
            f"# image {image}: `command` {_words(launcher)} is "
            + (
                "its entrypoint (Kubernetes' command replaces the image's entrypoint"
                if entrypoint
                else "how it starts the server (it has no entrypoint of its own"
            )
            + ", `args` its CMD); for another image set `command` to how that image starts the server"
        ]
    if "@sha256:" not in d.image:  # a tag can be moved to another build; a digest names one
        lines.append(
            f"# pin it: --image {d.image}@sha256:DIGEST (`docker buildx imagetools inspect {d.image}` prints "
            "the digest)"
        )
    if c.replaced:
        lines.append(
            f"# the space's server.launcher {_words(c.replaced)} is this machine's: in the container the image's "
            f"{_words(launcher)} starts the server"
        )
    lines += [
        f"# {h}: a Hugging Face hub id, no volume: the server downloads it at start (set HF_TOKEN for a gated model)"
        for h in d.hub
    ]
    return lines


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


def _listen_line(d: _Deploy, where: str) -> str:
    return f"# the server listens on {CONTAINER_HOST}:{d.port} {where}"


def fmt_compose(b: Bundle, opts: Options) -> str:
    """A docker-compose file with one service, its port published on the space's ``server.host`` of this host
    (127.0.0.1 keeps it to this host), the checkpoints mounted read-only at the same paths, the launch's files from
    beside the compose file."""
    d = _deploy(b, opts)
    env = {k: (f"${{{k}:?set {k}}}" if is_secret_name(k) else v) for k, v in sorted(b.launch["env"].items())}
    c = d.container
    service: dict[str, Any] = {
        "image": d.image,
        "command": c.args if c.entrypoint else [*c.launcher, *c.args],
        "ipc": "host",
        "ports": [f"{d.host}:{d.port}:{d.port}"],
        "volumes": [f"{m}:{m}:ro" for m in d.mounts] + [f"./{n}:{CONTAINER_FILES}/{n}:ro" for n in d.files],
        "deploy": {
            "resources": {"reservations": {"devices": [{"driver": "nvidia", "count": d.gpus, "capabilities": ["gpu"]}]}}
        },
    }
    if d.workdir:
        service["working_dir"] = d.workdir
    if env:
        service["environment"] = env
    doc = {"x-autotune": b.provenance, "services": {d.name: service}}
    lines = _comment_lines(
        b, lambda n: f"{n}: mounted from beside this file at {CONTAINER_FILES}/{n} (autotune export -o writes it)"
    )[:-1]
    lines += _image_lines(d, "compose")
    lines.append(_listen_line(d, f"in the container, published on {d.host}:{d.port} of this host"))
    return "\n".join(lines) + "\n" + yaml.dump(doc, Dumper=_NoAliases, sort_keys=False)


#: the start-up a Kubernetes startup probe allows: twice the study's slowest, or that plus this many seconds when
#: longer (a cold node: page cache empty, a hub checkpoint to download)
STARTUP_MARGIN_S = 600
#: seconds between probes of the health endpoint
PROBE_PERIOD_S = 10


def startup_budget(b: Bundle) -> tuple[int, str]:
    """The seconds a startup probe allows and why: from the study's slowest measured start-up with a margin
    (``STARTUP_MARGIN_S``), else the space's ``server.startup_timeout_s``."""
    if b.slowest_startup_s is None:
        limit = float(b.space.server.startup_timeout_s)
        return int(math.ceil(limit)), f"the space's server.startup_timeout_s, {limit:.0f} s: no start-up was measured"
    slowest = b.slowest_startup_s
    budget = max(2 * slowest, slowest + STARTUP_MARGIN_S)
    return int(math.ceil(budget)), (
        f"the study's slowest start-up {slowest:.0f} s of {b.startups} measured, twice that or "
        f"{STARTUP_MARGIN_S} s more, whichever is longer"
    )


def fmt_k8s(b: Bundle, opts: Options) -> str:
    """A Kubernetes Deployment and its Service: the local checkpoints as hostPath volumes at the same paths, the
    launch's files from a ConfigMap ``NAME-files``, secrets from a Secret ``NAME-secrets``, a startup probe sized to
    the study's measured start-up, the provenance as an annotation."""
    d = _deploy(b, opts)
    env = []
    for k, v in sorted(b.launch["env"].items()):
        if is_secret_name(k):
            env.append({"name": k, "valueFrom": {"secretKeyRef": {"name": f"{d.name}-secrets", "key": k}}})
        else:
            env.append({"name": k, "value": v})
    volumes: list[dict[str, Any]] = [
        {"name": f"ckpt-{i}", "hostPath": {"path": m, "type": "Directory"}} for i, m in enumerate(d.mounts)
    ]
    mounts: list[dict[str, Any]] = [
        {"name": f"ckpt-{i}", "mountPath": m, "readOnly": True} for i, m in enumerate(d.mounts)
    ]
    volumes.append({"name": "shm", "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    p = b.provenance
    labels = {"app.kubernetes.io/name": d.name, "app.kubernetes.io/managed-by": "autotune"}
    docs: list[dict[str, Any]] = []
    if d.files:
        config_map = f"{d.name}-files"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": config_map, "labels": labels},
                "data": dict(d.files),
            }
        )
        volumes.append({"name": "files", "configMap": {"name": config_map}})
        mounts.append({"name": "files", "mountPath": CONTAINER_FILES, "readOnly": True})
    budget, why = startup_budget(b)
    budget = int(math.ceil(budget / PROBE_PERIOD_S)) * PROBE_PERIOD_S  # whole probe periods
    health = {"path": b.backend.health_path, "port": "http"}
    probe = {"httpGet": health, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": PROBE_PERIOD_S}
    container: dict[str, Any] = {
        "name": "server",
        "image": d.image,
        "command": d.container.launcher,
        "args": d.container.args,
        "ports": [{"containerPort": d.port, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": d.gpus}},
        "volumeMounts": mounts,
        "startupProbe": {**probe, "failureThreshold": budget // PROBE_PERIOD_S},
        "readinessProbe": {**probe, "failureThreshold": 3},
    }
    if d.workdir:
        container["workingDir"] = d.workdir
    if env:
        container["env"] = env
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": d.name,
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
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": d.name, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": d.port, "targetPort": "http"}]},
        }
    )
    lines = _comment_lines(b, lambda n: f"{n}: from ConfigMap {d.name}-files, mounted at {CONTAINER_FILES}")[:-1]
    lines += _image_lines(d, "k8s")
    lines.append(
        f"# startupProbe: {health['path']} may fail for {budget} s before Kubernetes restarts the server ({why}); "
        "readinessProbe: traffic only while it answers"
    )
    lines.append(_listen_line(d, f"on the pod's address, reached through Service {d.name}:{d.port}"))
    return "\n".join(lines) + "\n" + yaml.dump_all(docs, Dumper=_NoAliases, sort_keys=False)


#: format name -> renderer (one function per format); each server's own format comes on top (``format_names``)
FORMATS: dict[str, Callable[[Bundle, Options], str]] = {
    "command": fmt_command,
    "yaml": lambda b, _opts: yaml.safe_dump(b.public, sort_keys=False),
    "json": lambda b, _opts: json.dumps(b.public, indent=2) + "\n",
    "env": fmt_env,
    "compose": fmt_compose,
    "k8s": fmt_k8s,
}


def _server_formats() -> dict[str, type[Backend]]:
    """Each server's own format -> its backend class."""
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
    """The formats a study of ``backend`` exports to: its own, the generic ones, and other servers' that take a
    translation of it."""
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

"""Trial -> deployment: the recommended config (or a chosen trial) as a launch command, server args as YAML/JSON, an
env file, a docker-compose service or a Kubernetes Deployment, each stamped with its provenance.

``bundle`` gathers everything (pure over the report dict, apart from probing the server for flag spellings and
reading checkpoint fingerprints); one function per format turns it into text (``FORMATS``: adding a format is one
entry). Every format carries the same ``provenance`` (YAML/JSON: a key; compose: ``x-autotune``; Kubernetes: the
annotation ``autotune/provenance``; command and env file: a ``# autotune-provenance: {json}`` line), which is what
``autotune reverify`` reads back (``read_provenance``). Secret-looking env values never appear: the command and
compose file take them from the deploying shell, the env file leaves them to be set, Kubernetes reads a Secret.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import __version__
from autotune.backends.base import Backend
from autotune.config import TrialConfig
from autotune.redact import is_secret_name, redact_env
from autotune.space import Space

#: Kubernetes annotation / compose extension / comment prefix holding the provenance
PROVENANCE_ANNOTATION = "autotune/provenance"
PROVENANCE_COMMENT = "# autotune-provenance: "
#: container images when ``--image`` is not given, by backend; ``{version}`` is ``server.version``
DEFAULT_IMAGES = {
    "sglang": ("lmsysorg/sglang:v{version}", "lmsysorg/sglang:latest"),
    "vllm": ("vllm/vllm-openai:v{version}", "vllm/vllm-openai:latest"),
    "llamacpp": ("ghcr.io/ggml-org/llama.cpp:server-cuda", "ghcr.io/ggml-org/llama.cpp:server-cuda"),
}


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

    image: str | None = None  # default: DEFAULT_IMAGES for the backend and server.version
    gpus: int | None = None  # default: CUDA_VISIBLE_DEVICES entries in server.env, else --tp-size, else 1
    name: str | None = None  # service / Deployment name; default: the space's name


def launch_argv(space: Space, backend: Backend, config: TrialConfig) -> list[str]:
    """The deployment launch command: the real server's (never the simulator's), on the space's port, started by the
    launcher the space names or else a plain one (``Backend.deploy_launcher``: ``python3 -m sglang.launch_server``,
    never this machine's interpreter path); flags as the installed server spells them where only ``probe`` can tell
    (``Backend.probe_before_argv``)."""
    if backend.probe_before_argv:
        backend.probe(space)
    argv = backend.argv(config, space, port=space.server.port, simulate=False)
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
) -> dict[str, Any]:
    """Everything an export holds: the launch (argv, env with secrets redacted) and its provenance."""
    chosen = _choose(report, trial)
    config = TrialConfig.from_dict(chosen["config"])
    argv = launch_argv(space, backend, config)
    env = redact_env(backend.env(config, space))
    launcher = backend.launcher(space, deploy=True)
    provenance = {
        "study": report["study"],
        "trial": chosen["trial"],
        "simulated": report.get("simulated"),
        "space": space.path,
        "backend": space.server.backend,
        "server_version": space.server.version or getattr(backend, "version", None),
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
    return {
        **{k: provenance[k] for k in ("autotune_version", "exported_at", "study", "simulated", "space", "backend")},
        "verdict": report["verdict"],
        "why": chosen["why"],
        "trial": chosen["trial"],
        "config": config.to_dict(),
        "speculative": not config.is_baseline,
        "knobs": config.knob_dict,
        "measured": provenance["measured"],
        "launch": {
            "argv": argv,
            "command": shlex.join(argv),
            "launcher": argv[: len(launcher)] if argv[: len(launcher)] == launcher else argv[:1],
            "env": env,
        },
        "verify": "autotune bench "
        + shlex.quote(space.path or "SPACE")
        + "".join(" --set " + shlex.quote(f"{k}={v}") for k, v in config.to_dict().items() if v is not None),
        "provenance": provenance,
        "_space": space,
    }


# ---------------------------------------------------------------------------------------------- the formats


def _public(b: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in b.items() if not k.startswith("_")}


def _comment_lines(b: dict[str, Any]) -> list[str]:
    p = b["provenance"]
    m = p["measured"]
    ci = m.get("speedup_ci")
    lines = [
        f"# autotune {p['autotune_version']}: study {p['study']}, trial {p['trial']}"
        + (" [SIMULATED]" if p.get("simulated") else "")
        + f", exported {p['exported_at']}",
        f"# measured {_f(m.get('tok_per_s'))} {m.get('units') or 'tok/s'}"
        + (f", speedup {ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else "")
        + (f" against baseline trial {p['baseline']['trial']}" if p.get("baseline") else ""),
    ]
    return lines + [PROVENANCE_COMMENT + json.dumps(p, sort_keys=True, separators=(",", ":"))]


def _f(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}"


def _secret_names(b: dict[str, Any]) -> list[str]:
    return sorted(k for k in b["launch"]["env"] if is_secret_name(k))


def fmt_command(b: dict[str, Any], _opts: Options) -> str:
    """A shell command line; secrets come from the deploying shell's environment (``NAME="$NAME"``)."""
    env = b["launch"]["env"]
    prefix = [f'{k}="${k}"' if is_secret_name(k) else f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return "\n".join(_comment_lines(b)) + "\n" + " ".join([*prefix, b["launch"]["command"]]) + "\n"


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
    """What compose and Kubernetes share: name, image, GPUs, port, the model directories to mount."""
    space: Space = b["_space"]
    version = b["provenance"]["server_version"]
    images = DEFAULT_IMAGES.get(space.server.backend, ("{version}", "latest"))
    image = opts.image or (images[0].format(version=version) if version else images[1])
    name = re.sub(r"[^a-z0-9-]+", "-", (opts.name or space.name).lower()).strip("-")[:63] or "autotune"
    mounts = sorted(
        {
            str(Path(c["path"]).parent if c.get("file_sha256_first_mib") else Path(c["path"]))
            for c in b["provenance"]["checkpoints"]
        }
    )
    return {
        "name": name,
        "image": image,
        "gpus": opts.gpus or _gpus(space),
        "port": space.server.port,
        "mounts": mounts,
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


def fmt_compose(b: dict[str, Any], opts: Options) -> str:
    """A docker-compose file with one service: the exact argv as its command, the host's network (the server binds
    where it was measured), the GPUs reserved, the checkpoints mounted read-only at the same paths."""
    d = _deploy(b, opts)
    env = {k: (f"${{{k}:?set {k}}}" if is_secret_name(k) else v) for k, v in sorted(b["launch"]["env"].items())}
    service: dict[str, Any] = {
        "image": d["image"],
        "command": b["launch"]["argv"],
        "network_mode": "host",
        "ipc": "host",
        "volumes": [f"{m}:{m}:ro" for m in d["mounts"]],
        "deploy": {
            "resources": {
                "reservations": {"devices": [{"driver": "nvidia", "count": d["gpus"], "capabilities": ["gpu"]}]}
            }
        },
    }
    if env:
        service["environment"] = env
    doc = {"x-autotune": b["provenance"], "services": {d["name"]: service}}
    return "\n".join(_comment_lines(b)[:2]) + "\n" + _dump(doc)


def fmt_k8s(b: dict[str, Any], opts: Options) -> str:
    """A Kubernetes Deployment: the launcher as ``command``, the exact args, GPUs as ``nvidia.com/gpu`` limits, the
    checkpoints as hostPath volumes at the same paths, secrets from a Secret named ``NAME-secrets``, and the
    provenance as an annotation."""
    d = _deploy(b, opts)
    launch = b["launch"]
    env = []
    for k, v in sorted(launch["env"].items()):
        if is_secret_name(k):
            env.append({"name": k, "valueFrom": {"secretKeyRef": {"name": f"{d['name']}-secrets", "key": k}}})
        else:
            env.append({"name": k, "value": v})
    volumes = [{"name": f"ckpt-{i}", "hostPath": {"path": m, "type": "Directory"}} for i, m in enumerate(d["mounts"])]
    mounts = [{"name": f"ckpt-{i}", "mountPath": m, "readOnly": True} for i, m in enumerate(d["mounts"])]
    volumes.append({"name": "shm", "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    p = b["provenance"]
    labels = {"app.kubernetes.io/name": d["name"], "app.kubernetes.io/managed-by": "autotune"}
    container: dict[str, Any] = {
        "name": "server",
        "image": d["image"],
        "command": launch["launcher"],
        "args": launch["argv"][len(launch["launcher"]) :],
        "ports": [{"containerPort": d["port"], "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": d["gpus"]}},
        "volumeMounts": mounts,
    }
    if env:
        container["env"] = env
    doc = {
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
    return "\n".join(_comment_lines(b)[:2]) + "\n" + _dump(doc)


#: format name -> renderer (one function per format)
FORMATS: dict[str, Callable[[dict[str, Any], Options], str]] = {
    "sglang": fmt_command,
    "command": fmt_command,
    "yaml": fmt_yaml,
    "json": fmt_json,
    "env": fmt_env,
    "compose": fmt_compose,
    "k8s": fmt_k8s,
    "vllm": fmt_command,  # without load levels: the launch command; with them, the schedule (render_schedule)
}


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
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    b = bundle(space, backend, report, trial=trial, read_space=read_space)
    return FORMATS[fmt](b, options or Options())


# ---------------------------------------------------------------------------------------------- reading back


def read_provenance(text: str, where: str = "the file") -> dict[str, Any]:
    """The provenance of any export format (``autotune reverify``); ValueError when there is none."""
    for line in text.splitlines():
        if line.startswith(PROVENANCE_COMMENT):
            return _checked(json.loads(line[len(PROVENANCE_COMMENT) :]), where)
    try:
        doc = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as e:
        raise ValueError(f"{where}: not an autotune export (neither YAML nor JSON: {e})") from None
    if isinstance(doc, dict):
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


def render_schedule(space: Space, backend: Backend, report: dict[str, Any], schedule_: dict[str, Any], fmt: str) -> str:
    """A per-load-level schedule (``autotune.schedule``) in an engine's format: ``vllm`` the
    ``--speculative-config`` JSON with ``num_speculative_tokens_per_batch_size``; ``sglang`` the launch command
    with ``--speculative-adaptive`` and the adaptive config file's JSON; ``command`` the recommended static
    config's command (engines without schedules: llama.cpp); ``yaml``/``json`` add the schedule to the bundle.
    The text formats start with the schedule as a table (comment lines)."""
    from autotune import schedule

    table = "\n".join("# " + line for line in schedule.render_text(schedule_).splitlines())
    static = schedule_["static"]
    drafter = space.drafter(static["drafter"]) if static.get("drafter") else None
    if fmt == "vllm":
        if drafter is None:
            return table + "\n# speculation loses at every level: launch without --speculative-config"
        method = _method(space, drafter.name)
        cfg = schedule.vllm_config(schedule_, method=method, model=drafter.path)
        return table + "\n--speculative-config " + shlex.quote(json.dumps(cfg, sort_keys=True))
    if fmt == "sglang":
        cmd = render(space, backend, report, "sglang").rstrip("\n")
        if drafter is None or not schedule_["on_up_to"]:
            return table + "\n" + cmd
        file_ = {**schedule.sglang_adaptive(schedule_)}
        if int(static.get("topk") or 1) == 1:  # SGLang refuses a --speculative-num-steps in no entry of the file
            k = schedule.sglang_initial_steps(schedule_)
            head, _, last = cmd.rpartition("\n")
            last = re.sub(r"(--speculative-num-steps )\d+", rf"\g<1>{k}", last)
            last = re.sub(r"(--speculative-num-draft-tokens )\d+", rf"\g<1>{k + 1}", last)
            cmd = f"{head}\n{last}" if head else last
        note = "# write the JSON below to adaptive.json (topk 1 only)"
        return "\n".join(
            [
                table,
                cmd + " --speculative-adaptive --speculative-adaptive-config adaptive.json",
                note,
                json.dumps(file_),
            ]
        )
    if fmt == "command":  # an engine without schedules (llama.cpp): the recommended static config
        return table + "\n" + render(space, backend, report, "command")
    b = _public(bundle(space, backend, report))
    b["schedule"] = schedule_
    return json.dumps(b, indent=2) if fmt == "json" else yaml.safe_dump(b, sort_keys=False)


def _method(space: Space, drafter: str) -> str:
    """vLLM's method name for a drafter (eagle3 / eagle / draft_model)."""
    if space.server.backend == "sglang":
        from autotune.backends.sglang import resolved_algorithm

        return resolved_algorithm(space, drafter).lower()
    algo = space.drafter(drafter).algorithm
    return algo.lower() if algo else "eagle3"

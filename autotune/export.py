"""Trial -> deployment: the recommended config as a launch command, or as a provenance-stamped YAML/JSON bundle."""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from typing import Any

import yaml

from autotune import __version__
from autotune.backends.base import Backend
from autotune.config import TrialConfig
from autotune.redact import redact_env
from autotune.space import Space

FORMATS = ("sglang", "command", "yaml", "json")


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


def bundle(space: Space, backend: Backend, report: dict[str, Any]) -> dict[str, Any]:
    rec = report["recommended"]
    if rec.get("config") is None:
        raise ValueError("nothing to export yet: no baseline has been measured")
    config = TrialConfig.from_dict(rec["config"])
    argv = launch_argv(space, backend, config)
    env = redact_env(backend.env(config, space))
    knobs = config.knob_dict
    return {
        "autotune_version": __version__,
        "exported_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "study": report["study"],
        "simulated": report.get("simulated"),
        "space": space.path,
        "backend": space.server.backend,
        "verdict": report["verdict"],
        "why": rec.get("why"),
        "trial": rec.get("trial"),
        "config": config.to_dict(),
        "speculative": not config.is_baseline,
        "knobs": knobs,
        "measured": {
            "tok_per_s": rec.get("tok_per_s"),
            "speedup_ci": rec.get("speedup_ci"),
            "units": report.get("units"),
        },
        "launch": {"argv": argv, "command": shlex.join(argv), "env": env},
        "verify": "autotune bench "
        + shlex.quote(space.path or "SPACE")
        + "".join(" --set " + shlex.quote(f"{k}={v}") for k, v in config.to_dict().items() if v is not None),
    }


def render(space: Space, backend: Backend, report: dict[str, Any], fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    b = bundle(space, backend, report)
    if fmt in ("sglang", "command"):
        env = b["launch"]["env"]
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return (prefix + " " if prefix else "") + b["launch"]["command"]
    if fmt == "json":
        return json.dumps(b, indent=2)
    return yaml.safe_dump(b, sort_keys=False)

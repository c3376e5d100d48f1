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

FORMATS = ("sglang", "command", "yaml", "json", "vllm")


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
    if fmt in ("sglang", "command", "vllm"):
        env = b["launch"]["env"]
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return (prefix + " " if prefix else "") + b["launch"]["command"]
    if fmt == "json":
        return json.dumps(b, indent=2)
    return yaml.safe_dump(b, sort_keys=False)


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
        cmd = render(space, backend, report, "sglang")
        if drafter is None or not schedule_["on_up_to"]:
            return table + "\n" + cmd
        file_ = {**schedule.sglang_adaptive(schedule_)}
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
    b = bundle(space, backend, report)
    b["schedule"] = schedule_
    return json.dumps(b, indent=2) if fmt == "json" else yaml.safe_dump(b, sort_keys=False)


def _method(space: Space, drafter: str) -> str:
    """vLLM's method name for a drafter (eagle3 / eagle / draft_model)."""
    if space.server.backend == "sglang":
        from autotune.backends.sglang import resolved_algorithm

        return resolved_algorithm(space, drafter).lower()
    algo = space.drafter(drafter).algorithm
    return algo.lower() if algo else "eagle3"

"""How each runtime runs an export: the argv a shell, docker compose or Kubernetes starts from an export's text, taken
the way that runtime takes it (never from autotune's own structures):

- a script (``command`` and each server's own format): ``bash FILE``, run for real with stand-in launchers on PATH
  that record the argv they were started with;
- an env file: the README's start line (``ENV_START``), run for real under ``bash`` and under ``sh``;
- compose: the image's entrypoint (the service's ``entrypoint:`` when it sets one), then ``command:``;
- Kubernetes: the container's ``command`` (else the image's entrypoint), then its ``args`` (else the image's CMD).

The images' entrypoints below are read from the projects' Dockerfiles, not from autotune (whose
``Backend.image_entrypoint`` the tests check against them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

#: image repository -> (ENTRYPOINT, CMD) of its default images
IMAGES: dict[str, tuple[list[str], list[str]]] = {
    # vLLM docker/Dockerfile, target vllm-openai: ENTRYPOINT ["vllm", "serve"], no CMD
    "vllm/vllm-openai": (["vllm", "serve"], []),
    # llama.cpp .devops/cuda.Dockerfile, target server: ENTRYPOINT [ "/app/llama-server" ], no CMD
    "ghcr.io/ggml-org/llama.cpp": (["/app/llama-server"], []),
    # SGLang docker/Dockerfile: no ENTRYPOINT or CMD; the nvidia/cuda base's /opt/nvidia/nvidia_entrypoint.sh runs the
    # command it is given (exec "$@"), so the command is what runs
    "lmsysorg/sglang": ([], []),
}

#: the launchers an export may start, as stand-ins that record their argv (``$0`` and ``"$@"``, NUL-separated)
LAUNCHERS = ("vllm", "python3", "llama-server")
_RECORDER = '#!/bin/sh\nprintf \'%s\\0\' "$(basename "$0")" "$@" > "$ARGV_OUT"\n'


def image_of(image: str) -> tuple[list[str], list[str]]:
    repo = re.sub(r"(@sha256:[0-9a-f]+|:[^/:]+)$", "", image)
    return IMAGES[repo]


def env_start_line() -> str:
    """The README's line that starts an env export (checked to be there, and to be autotune's ``ENV_START``)."""
    from autotune.export_formats import ENV_START

    assert ENV_START in (REPO / "README.md").read_text(), "the README's env start line is not ENV_START"
    return ENV_START


def _stand_ins(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in LAUNCHERS:
        (bin_dir / name).write_text(_RECORDER)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"), "ARGV_OUT": str(tmp / "argv")}


def _recorded(tmp: Path) -> list[str]:
    data = (tmp / "argv").read_bytes().decode()
    (tmp / "argv").unlink()
    return data.split("\0")[:-1]


def env_argv(text: str, shell: str, tmp: Path) -> list[str]:
    """The argv the README's start line runs from env export ``text`` under ``shell`` (``bash`` or ``sh``), in a
    folder holding the file as ``server.env``."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "server.env").write_text(text)
    line = env_start_line().replace("FILE", "server.env")
    subprocess.run([shell, "-c", line], cwd=tmp, env=_stand_ins(tmp), check=True, timeout=30)
    return _recorded(tmp)


def script_argv(text: str, tmp: Path) -> list[str]:
    """The argv ``bash FILE`` runs from script export ``text`` (run from another folder than the script's)."""
    script = tmp / "deploy" / "launch.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    subprocess.run(["bash", str(script)], cwd=tmp, env=_stand_ins(tmp), check=True, timeout=30)
    return _recorded(tmp)


def compose_argv(text: str) -> list[str]:
    """What docker compose runs in the service's container: entrypoint, then command."""
    ((_name, svc),) = yaml.safe_load(text)["services"].items()
    entrypoint, cmd = image_of(svc["image"])
    if "entrypoint" in svc:  # compose: an entrypoint set by the service also drops the image's CMD
        entrypoint, cmd = list(svc["entrypoint"]), []
    return [*entrypoint, *(svc["command"] if "command" in svc else cmd)]


def k8s_container(text: str) -> dict[str, Any]:
    (deployment,) = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "Deployment"]
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def k8s_argv(text: str) -> list[str]:
    """What Kubernetes runs in the Deployment's container: ``command`` replaces the image's entrypoint, ``args`` its
    CMD."""
    c = k8s_container(text)
    entrypoint, cmd = image_of(c["image"])
    return [*(c["command"] if "command" in c else entrypoint), *(c["args"] if "args" in c else cmd)]


def exported_argv(text: str, fmt: str, tmp: Path) -> list[str]:
    """The argv export ``text`` in format ``fmt`` runs as its runtime runs it; an env file under bash and sh alike
    (asserted)."""
    import json

    if fmt == "env":
        bash, sh = env_argv(text, "bash", tmp / "bash"), env_argv(text, "sh", tmp / "sh")
        assert bash == sh, (bash, sh)
        return bash
    if fmt in ("json", "yaml"):  # read by a program, not run: the launch's argv as written
        return [str(a) for a in (json.loads(text) if fmt == "json" else yaml.safe_load(text))["launch"]["argv"]]
    if fmt == "compose":
        return [str(a) for a in compose_argv(text)]
    if fmt == "k8s":
        return [str(a) for a in k8s_argv(text)]
    return script_argv(text, tmp)


def after(argv: list[str], launcher: list[str]) -> list[str]:
    """The arguments after ``launcher`` (asserted to start ``argv``)."""
    assert argv[: len(launcher)] == launcher, (launcher, argv)
    return argv[len(launcher) :]


#: the formats whose export is a shell script (run by ``bash FILE``)
_DATA_FORMATS = ("env", "json", "yaml", "compose", "k8s")


@dataclass(frozen=True)
class Exported:
    """One ``autotune export -o PATH`` of a study: the text it wrote, and what it wrote beside it (a file the launch
    reads) by name."""

    fmt: str
    path: Path
    text: str
    files: dict[str, Path]


def autotune_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m autotune ARGS`` of this checkout (PYTHONPATH), asserted to exit 0."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    assert r.returncode == 0, f"autotune {' '.join(args)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    return r


def study_then_export(
    space: Path, formats: Sequence[str], tmp: Path, *, n_trials: int, in_process: bool = True
) -> dict[str, Exported]:
    """A simulated study of ``space`` (``--in-process``, or a server process per start over real HTTP), then its
    recommendation exported with ``-o`` in each of ``formats``, each into a folder of its own under ``tmp`` (a script
    as ``FMT/deploy/launch.sh``, run from elsewhere; anything else as ``FMT/server.FMT``): fmt -> ``Exported``."""
    tmp.mkdir(parents=True, exist_ok=True)
    studies = tmp / "studies"
    run = ["--in-process"] if in_process else []
    autotune_cli(
        "study", str(space), "--simulate", *run, "--n-trials", str(n_trials), "--studies-dir", str(studies), cwd=tmp
    )
    out = {}
    for fmt in formats:
        folder = tmp / fmt
        path = folder / f"server.{fmt}" if fmt in _DATA_FORMATS else folder / "deploy" / "launch.sh"
        path.parent.mkdir(parents=True)
        autotune_cli(
            "export", str(space), "--simulate", "--format", fmt, "--studies-dir", str(studies), "-o", str(path), cwd=tmp
        )
        files = {p.name: p for p in path.parent.iterdir() if p != path}
        out[fmt] = Exported(fmt, path, path.read_text(), files)
    return out


def stand_ins(space: Path) -> dict[str, str]:
    """The space's deployment checkpoints -> the simulator's stand-ins for them (this machine has no /models)."""
    from autotune.sim import simulated_space
    from autotune.space import load_space

    deploy = load_space(space)
    sim = simulated_space(deploy)
    here = {deploy.server.model_path: sim.server.model_path}
    here.update({d.path: s.path for d, s in zip(deploy.drafters, sim.drafters, strict=True)})
    return here

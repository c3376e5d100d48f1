"""A vLLM study on the simulator, for tests of what a vLLM study exports: ``--simulate`` plays SGLang only, so at the
runner's seam (what the ``ModelRunner`` sees of the backend) the ``vllm serve`` argv autotune builds is read back and
turned into the SGLang flags that stand for it (``--speculative-config``'s method and K as a chain of K drafted
tokens, ``--enforce-eager`` as CUDA graphs off). Everything else is autotune's own: the vLLM backend suggests,
resolves and launches, the orchestrator searches and confirms, and the report is the study's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune.backends.base import flag_value
from autotune.backends.vllm import VLLMBackend
from autotune.checks import resolved_algorithm
from autotune.clock import VirtualClock
from autotune.config import TrialConfig
from autotune.report import build_report
from autotune.sim import simulated_space
from autotune.sim.runner import ModelRunner
from autotune.space import Space, load_space
from autotune.study import Orchestrator, open_study

REPO = Path(__file__).resolve().parents[2]

#: vLLM's --speculative-config method -> the SGLang algorithm the simulator runs for it
_ALGORITHMS = {"eagle3": "EAGLE3", "eagle": "EAGLE", "draft_model": "STANDALONE"}


class VLLMSeam:
    """The vLLM backend as the simulator sees it: its argv read back into SGLang's flags."""

    def __init__(self, backend: VLLMBackend) -> None:
        self.backend = backend
        self.launched: list[list[str]] = []

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        return self.backend.env(config, space)

    def argv(self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False) -> list[str]:
        argv = self.backend.argv(config, space, port=port, simulate=simulate)
        self.launched.append(argv)
        launcher = list(space.server.launcher)
        assert argv[: len(launcher)] == launcher, argv
        out = [*launcher, "--model-path", argv[len(launcher)], "--port", str(port)]
        spec = flag_value(argv, "--speculative-config")
        if spec is not None:
            s = json.loads(str(spec))
            k = int(s["num_speculative_tokens"])
            out += ["--speculative-algorithm", _ALGORITHMS[s["method"]], "--speculative-draft-model-path", s["model"]]
            out += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
            out += ["--speculative-num-draft-tokens", str(k + 1)]
        if "--enforce-eager" in argv:
            out.append("--disable-cuda-graph")
        return out


def vllm_space_file(tmp_path: Path, **server: Any) -> Path:
    """The shipped Llama-3.1-8B EAGLE-3 space as a vLLM 0.33.0 space (K from 1 to 6, CUDA graphs on)."""
    data = yaml.safe_load((REPO / "spaces" / "llama-8b-eagle3.yaml").read_text())
    data["name"] = "llama31-8b-vllm"
    data["server"].update(backend="vllm", version="0.33.0", extra_args=["--dtype", "bfloat16"], port=8000, **server)
    data["search"] = {"cuda_graph": [True], "num_speculative_tokens": {"low": 1, "high": 6}}
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclasses.dataclass
class VLLMStudy:
    deploy: Space  # the space as a deployment reads it (the real checkpoint paths)
    sim: Space  # the simulated space the study ran (the stand-in checkpoints)
    backend: VLLMBackend
    report: dict[str, Any]


def run_vllm_study(space_path: Path, n_trials: int = 10, seed: int = 3) -> VLLMStudy:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    deploy = load_space(str(space_path))
    sim = simulated_space(
        dataclasses.replace(deploy, budget=dataclasses.replace(deploy.budget, n_trials=n_trials)), seam=True
    )
    backend = VLLMBackend()
    runner = ModelRunner(sim, VLLMSeam(backend), VirtualClock(), seed=seed)
    study = open_study(sim, optuna.storages.InMemoryStorage(), deploy.name + "-sim", seed=seed, simulated=True)
    orch = Orchestrator(sim, backend, runner, study)
    orch.search(n_trials)
    orch.confirm()
    # as autotune.commands.deploy.deploy_space does after a simulated study: each drafter keeps the algorithm it ran
    # with, read from its stand-in (the real checkpoint is not on this machine)
    drafters = tuple(
        d if d.algorithm else dataclasses.replace(d, algorithm=resolved_algorithm(sim, d.name)) for d in deploy.drafters
    )
    return VLLMStudy(dataclasses.replace(deploy, drafters=drafters), sim, backend, build_report(study))

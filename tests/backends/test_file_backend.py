"""Adding a server is one new module: a backend defined here, registered through the registry, that takes its
speculative settings as a config file (``Backend.files``), runs a simulated study end to end and exports, with
no generic module knowing it.

The simulator plays SGLang: at the seam (the ``ModelRunner``'s view of the backend) the test reads the config file
the backend wrote and launches the simulator with the SGLang flags that file stands for.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import export, export_bundle, export_formats
from autotune.backends import Backend
from autotune.backends.base import flag_value
from autotune.backends.methods import int_values, suggest_drafter, suggest_int
from autotune.config import EffectiveConfig, TrialConfig
from autotune.errors import InfeasibleConfig, ServerExited
from autotune.process.runner import ProcessRunner
from autotune.seam import VirtualClock
from autotune.servers import KnobDomain, register_backend, unregister_backend
from autotune.sim import simulated_space
from autotune.sim.runner import ModelRunner
from autotune.space import Space, load_space
from autotune.study import Orchestrator, open_study
from autotune.study.result import study_result
from autotune.verdict import Verdict

from ..cli.helpers import REPO

NAME = "filespec"
SPEC_FILE = "spec.json"


class FileSpecBackend(Backend):
    """A server that reads its speculation from a JSON file named by ``--spec-config``: a drafter and a chain of
    ``depth`` drafted tokens."""

    name = NAME
    display_name = "FileSpec"
    knob_names = ("depth",)
    knob_domains = {"depth": KnobDomain("int", 1)}
    managed_flags = ("--spec-config", "--port", "--host", "--model")
    size_knob = "depth"
    images = ("example.org/filespec:{version}", "example.org/filespec:latest")
    deploy_launcher = ("filespec-server",)
    schedule_knob = "depth"
    export_format = NAME
    export_format_launches = True

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        drafter, cuda_graph = suggest_drafter(trial, space)
        spec = space.search.knobs.get("depth")
        depth = suggest_int(trial, "depth", spec, int_values(spec, self.display_name) or [3])
        return TrialConfig.make(drafter, cuda_graph, depth=depth)

    def params(self, config: TrialConfig, space: Space) -> dict[str, Any]:
        if config.is_baseline:
            return {"cuda_graph": config.cuda_graph}
        eff = self.resolve(config, space)
        return {"drafter": eff.drafter, "cuda_graph": eff.cuda_graph, "depth": eff.knob("depth")}

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        if config.is_baseline:
            return EffectiveConfig.baseline(config.cuda_graph)
        self.require_known(config, space)
        depth = int(config.knob("depth", 3))
        if depth < 1:
            raise InfeasibleConfig(f"depth must be at least 1 but got {depth}")
        return EffectiveConfig.make(config.drafter, config.cuda_graph, depth=depth)

    def files(self, config: TrialConfig, space: Space) -> dict[str, str]:
        eff = self.effective(config, space)
        if eff.is_baseline:
            return {}
        drafter = space.drafter(eff.drafter or "")
        spec = {"drafter": drafter.path, "depth": eff.knob("depth")}
        return {SPEC_FILE: json.dumps(spec, sort_keys=True) + "\n"}

    def argv(
        self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False, files_dir: str | None = None
    ) -> list[str]:
        eff = self.effective(config, space)
        server = space.server
        argv = [*self.launcher(space), "--model", server.model_path, "--host", server.host, "--port", str(port)]
        if not eff.is_baseline:
            argv += ["--spec-config", self.file_arg(SPEC_FILE, files_dir)]
        if not eff.cuda_graph:
            argv.append("--no-cuda-graph")
        return argv + [str(a) for a in server.extra_args]


class SimSeam:
    """What the ``ModelRunner`` sees of the backend: the FileSpec launch, its file written and read back, turned
    into the SGLang flags the simulator parses."""

    def __init__(self, backend: FileSpecBackend, files_dir: Path) -> None:
        self.backend = backend
        self.files_dir = files_dir
        self.spec_files: list[dict[str, Any]] = []

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        return self.backend.env(config, space)

    def argv(self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False) -> list[str]:
        eff = self.backend.effective(config, space)
        for name, text in self.backend.files(eff, space).items():
            (self.files_dir / name).write_text(text)
        argv = self.backend.argv(eff, space, port=port, simulate=simulate, files_dir=str(self.files_dir))
        launcher = list(space.server.launcher)
        assert argv[: len(launcher)] == launcher
        out = [*launcher, "--model-path", str(flag_value(argv, "--model")), "--port", str(port)]
        path = flag_value(argv, "--spec-config")
        if path is not None:
            spec = json.loads(Path(path).read_text())
            self.spec_files.append(spec)
            depth = int(spec["depth"])
            out += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", spec["drafter"]]
            out += ["--speculative-num-steps", str(depth), "--speculative-eagle-topk", "1"]
            out += ["--speculative-num-draft-tokens", str(depth + 1)]
        if "--no-cuda-graph" in argv:
            out.append("--disable-cuda-graph")
        return out


@pytest.fixture
def filespec_backend():
    register_backend(NAME, FileSpecBackend)
    yield FileSpecBackend
    unregister_backend(NAME)


def _space_file(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "spaces" / "llama-8b-eagle3.yaml").read_text())
    data["server"]["backend"] = NAME
    data["server"]["extra_args"] = []
    data["search"] = {"cuda_graph": [True], "depth": {"low": 1, "high": 6}}
    path = tmp_path / "filespec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_registering_a_backend(filespec_backend):
    from autotune.backends import backend_class, get_backend
    from autotune.servers import backend_names, knob_domains

    assert NAME in backend_names() and backend_class(NAME) is FileSpecBackend
    assert isinstance(get_backend(NAME), FileSpecBackend)
    assert knob_domains(NAME) == {"depth": KnobDomain("int", 1)}
    with pytest.raises(ValueError, match="already registered"):
        register_backend(NAME, FileSpecBackend)

    class Clash(FileSpecBackend):
        name = "clash"
        knob_domains = {"topk": KnobDomain("int", 1)}

    with pytest.raises(ValueError, match="knobs other backends have"):
        register_backend("clash", Clash)
    with pytest.raises(ValueError, match="built in"):
        unregister_backend("sglang")


def test_a_space_file_names_the_new_backend_and_its_knobs(tmp_path, filespec_backend):
    space = load_space(str(_space_file(tmp_path)))
    assert space.server.backend == NAME and "depth" in space.search.knobs
    bad = _space_file(tmp_path)
    bad.write_text(bad.read_text().replace("depth:", "num_steps:"))
    with pytest.raises(Exception, match="unknown knob 'num_steps' for backend filespec"):
        load_space(str(bad))


def test_a_simulated_study_runs_end_to_end_and_exports_its_file(tmp_path, filespec_backend):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    deploy = load_space(str(_space_file(tmp_path)))
    space = simulated_space(
        dataclasses.replace(deploy, budget=dataclasses.replace(deploy.budget, n_trials=10)), seam=True
    )
    backend = FileSpecBackend()
    files_dir = tmp_path / "launch"
    files_dir.mkdir()
    seam = SimSeam(backend, files_dir)
    runner = ModelRunner(space, seam, VirtualClock(), seed=3)
    study = open_study(space, optuna.storages.InMemoryStorage(), "filespec", seed=3)
    orch = Orchestrator(space, backend, runner, study)
    orch.search(10)
    orch.confirm()

    measured = [t for t in study.trials if t.user_attrs.get("role") != "baseline" and t.value]
    assert measured, "no speculative trial was measured"
    assert {int(s["depth"]) for s in seam.spec_files} >= {int(t.params["depth"]) for t in measured}
    report = study_result(study)
    assert report.verdict == Verdict.SPECULATION_WINS
    config = TrialConfig.from_dict(report.recommended.config)
    assert config.drafter == "eagle3-llama31-8b"

    text = export.export(deploy, backend, report, NAME, read_space=space).text
    command = text.splitlines()[-1]
    assert command.startswith("CUDA_VISIBLE_DEVICES=0 filespec-server --model /models/Llama-3.1-8B-Instruct")
    assert command.endswith('--spec-config "$(dirname "$0")"/spec.json')  # beside the script
    assert f"# reads {SPEC_FILE} beside this script" in text
    assert export_bundle.read_provenance(text)["backend"] == NAME
    out = tmp_path / "deploy" / "filespec.sh"
    out.parent.mkdir()
    written = export.write(out, text, export.export(deploy, backend, report, NAME, read_space=space).files)
    assert written == [out.parent / SPEC_FILE] and out.read_text() == text
    spec = json.loads((out.parent / SPEC_FILE).read_text())
    assert spec == {"drafter": "/models/EAGLE3-LLaMA3.1-Instruct-8B", "depth": config.knob("depth")}
    doc = yaml.safe_load(export.export(deploy, backend, report, "compose", read_space=space).text)
    assert doc["services"]["llama31-8b-eagle3"]["image"] == "example.org/filespec:0.5.23"
    assert json.loads(export.export(deploy, backend, report, "json", read_space=space).text)["launch"]["files"] == {
        SPEC_FILE: (out.parent / SPEC_FILE).read_text()
    }
    problem = export_formats.format_problem(backend, "sglang")
    assert problem.startswith("--format sglang: it launches SGLang, which takes no")
    assert export_formats.format_problem(backend, "vllm") is None and export_formats.suggested_format(backend) == NAME


def test_the_process_runner_writes_the_files_where_argv_names_them(tmp_path, filespec_backend):
    deploy = load_space(str(_space_file(tmp_path)))
    # a "server" that exits at once with status 0 when the file argv names holds the config, 3 otherwise
    check = (
        "import json, sys; a = sys.argv; spec = json.load(open(a[a.index('--spec-config') + 1])); "
        "sys.exit(0 if spec['depth'] == 4 else 3)"
    )
    server = dataclasses.replace(deploy.server, launcher=(sys.executable, "-c", check), port=39517)
    space = dataclasses.replace(deploy, server=server)
    runner = ProcessRunner(space, FileSpecBackend(), log_dir=tmp_path / "logs", simulated=True)
    config = EffectiveConfig.make("eagle3-llama31-8b", True, depth=4)
    with pytest.raises(ServerExited) as e:
        runner.launch(config)
    assert e.value.returncode == 0
    [written] = (tmp_path / "logs").glob(f"server-*/{SPEC_FILE}")
    assert json.loads(written.read_text())["depth"] == 4
    assert written.parent.with_suffix(".log").is_file()

"""A llama.cpp study's exports, from recorded GPU data: the H200 sweep (tests/llamacpp/samples/h200-sweep-prompts.json,
per-prompt tok/s of every config, two starts each) replayed at the runner seam as a study of the shipped
llamacpp-tiny space (its good drafter), then exported in every format that fits. The method (``--spec-type``) is
in every provenance, the script is one bash accepts, compose and Kubernetes mount the relative GGUF paths and run
from the directory they are relative to, and vLLM's format is refused: it cannot load GGUF checkpoints."""

from __future__ import annotations

import dataclasses
import json
import shlex
import socket
import subprocess
import time
from pathlib import Path

import httpx
import optuna
import pytest
import yaml

from autotune import export, export_bundle, export_formats
from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.llamacpp_methods import NEW_SPELLING, find_llama_server
from autotune.config import LaunchInfo, PromptResult, TrialConfig
from autotune.seam import VirtualClock
from autotune.space import Choices, load_space
from autotune.study import Orchestrator, open_study
from autotune.study.result import study_result
from tests.llamacpp.conftest import models_dir
from tests.servers import as_run

REPO = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).parent / "samples" / "h200-sweep-prompts.json"
TOKENS = 256  # the sweep's answers: 256 tokens each


class ReplaySession:
    def __init__(self, tok_per_s: list[float], clock: VirtualClock) -> None:
        self.values, self.clock = tok_per_s, clock
        self.info = LaunchInfo(argv=["llama-server"], simulated=False)

    def warmup(self) -> None:
        pass

    def run_prompt(self, index: int) -> PromptResult:
        seconds = TOKENS / self.values[index]
        self.clock.sleep(seconds)
        return PromptResult(index, TOKENS, seconds)

    def run_level(self, level: int):
        raise AssertionError("the recorded sweep has one stream only")

    def reference(self, index: int, top_n: int):
        return None  # the sweep kept no log-probabilities

    def close(self) -> None:
        pass


class ReplayRunner:
    """Each launch of a config replays its next recorded start (the two starts in turn)."""

    simulated = False

    def __init__(self, starts: list[dict], clock: VirtualClock) -> None:
        self.clock = clock
        self.by: dict[tuple, list[list[float]]] = {}
        for s in sorted(starts, key=lambda s: s["pass"]):
            c = s["config"]
            self.by.setdefault((c.get("drafter"), c["cuda_graph"], c.get("draft_n_max")), []).append(s["tok_per_s"])
        self.launches: dict[tuple, int] = {}

    def launch(self, config: TrialConfig) -> ReplaySession:
        key = (config.drafter, config.cuda_graph, config.knob("draft_n_max") if config.drafter else None)
        n = self.launches.get(key, 0)
        self.launches[key] = n + 1
        starts = self.by[key]
        return ReplaySession(starts[n % len(starts)], self.clock)


@pytest.fixture(scope="module")
def replayed():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    starts = json.loads(SAMPLE.read_text())["starts"]
    space = load_space(str(REPO / "spaces" / "llamacpp-tiny.yaml"))
    lengths = sorted({s["config"]["draft_n_max"] for s in starts if s["config"].get("drafter") == "good"})
    search = dataclasses.replace(
        space.search,
        drafters=("good",),
        cuda_graph=(True, False),
        knobs={**space.search.knobs, "draft_n_max": Choices(tuple(lengths)), "draft_p_min": Choices((0.0,))},
    )
    space = dataclasses.replace(space, search=search)
    clock = VirtualClock()
    backend = LlamaCppBackend(spelling=NEW_SPELLING)
    study = open_study(space, optuna.storages.InMemoryStorage(), "llamacpp-recorded", seed=1)
    orch = Orchestrator(space, backend, ReplayRunner(starts, clock), study, clock=clock)
    orch.search(10)
    orch.confirm()
    report = study_result(study)
    assert (report.recommended.config or {})["drafter"] == "good"  # the good draft wins on the H200
    return space, backend, report


def test_every_fitting_format_exports_the_recorded_winner_with_its_method(replayed, tmp_path):
    space, backend, report = replayed
    rec = report.recommended.config
    assert export_formats.fitting_formats(backend) == ["command", "yaml", "json", "env", "compose", "k8s"]
    for fmt in export_formats.fitting_formats(backend):
        out = export.export(space, backend, report, fmt)
        p = export_bundle.read_provenance(out.text)
        assert p["method"] == "draft-simple" and p["config"] == rec and p["backend"] == "llamacpp"
        assert p["simulated"] is None and "SIMULATED" not in out.text
        if fmt not in ("yaml", "json"):
            assert "method draft-simple" in out.text.splitlines()[0]
    script = tmp_path / "launch.sh"
    text = export.export(space, backend, report, "command").text
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    argv = shlex.split(text.strip().splitlines()[-1])
    i = argv.index("llama-server")
    assert argv[i : i + 3] == ["llama-server", "-m", "studies/llamacpp-models/target.gguf"]
    assert ("GGML_CUDA_DISABLE_GRAPHS=1" in argv[:i]) is (not rec["cuda_graph"])
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--spec-draft-n-max") + 1] == str(rec["draft_n_max"])


def test_compose_and_k8s_mount_the_relative_gguf_paths_and_listen_on_every_interface(replayed):
    space, backend, report = replayed
    models = str(Path.cwd() / "studies" / "llamacpp-models")
    doc = yaml.safe_load(export.export(space, backend, report, "compose").text)
    ((_name, svc),) = doc["services"].items()
    assert svc["volumes"] == [f"{models}:{models}:ro"] and svc["working_dir"] == str(Path.cwd())
    assert svc["command"][svc["command"].index("--host") + 1] == "0.0.0.0"
    assert svc["ports"] == ["127.0.0.1:30080:30080"] and svc["image"] == "ghcr.io/ggml-org/llama.cpp:server-cuda"
    # the image's entrypoint is /app/llama-server: the command is its arguments, the model first
    assert svc["command"][:2] == ["-m", "studies/llamacpp-models/target.gguf"] and "entrypoint" not in svc
    k8s = next(
        d for d in yaml.safe_load_all(export.export(space, backend, report, "k8s").text) if d["kind"] == "Deployment"
    )
    (c,) = k8s["spec"]["template"]["spec"]["containers"]
    assert c["workingDir"] == str(Path.cwd()) and c["args"][c["args"].index("--host") + 1] == "0.0.0.0"
    assert c["command"] == ["/app/llama-server"]  # the only place that image installs it
    assert {"name": "ckpt-0", "mountPath": models, "readOnly": True} in c["volumeMounts"]


@pytest.mark.llamacpp
@pytest.mark.parametrize("fmt", ["command", "env", "compose", "k8s"])
def test_the_real_llama_server_starts_from_each_export_as_its_runtime_runs_it(replayed, fmt, tmp_path):
    """Each export's argv as its runtime runs it (``as_run``: bash, the README's env line under bash and sh, the
    image's entrypoint /app/llama-server + compose's command, Kubernetes' command + args), the launcher swapped for
    this machine's llama-server, the GGUF paths for the tiny models here and the port for a free one: the real
    binary parses it, loads the models and answers its health endpoint."""
    server = find_llama_server()
    if server is None:
        pytest.skip("no llama-server binary (scripts/llamacpp_setup.sh)")
    space, backend, report = replayed
    text = export.export(space, backend, report, fmt).text
    argv = as_run.exported_argv(text, fmt, tmp_path / "run")
    launcher = ["/app/llama-server"] if fmt in ("compose", "k8s") else ["llama-server"]
    args = as_run.after(argv, launcher)
    models = models_dir()
    here = {str(Path("studies/llamacpp-models") / p.name): str(p) for p in models.glob("*.gguf")}
    args = [here.get(a, a) for a in args]
    assert sum(a in here.values() for a in args) == 2  # the target and the drafter
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args[args.index("--port") + 1] = str(port)
    args[args.index("--host") + 1] = "127.0.0.1"
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([server, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"llama-server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_gguf_study_has_no_vllm_or_sglang_launch(replayed):
    space, backend, report = replayed
    for fmt in ("vllm", "sglang"):
        with pytest.raises(ValueError, match=f"--format {fmt}: it launches .*; formats that fit: command, yaml"):
            export.export(space, backend, report, fmt)
    with pytest.raises(ValueError, match="GGUF files, which no other server loads"):
        backend.portable(TrialConfig.from_dict(report.recommended.config), space)

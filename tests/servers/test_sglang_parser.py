"""SGLang's own parser and adaptive-config loader as a standing check: every SGLang launch the shipped spaces produce
(baselines, the server's default config per drafter, a sample of the search grid; load-level flags included), the
exported deployment commands, and the adaptive-config files of load-level spaces are handed to SGLang 0.5.23's
``prepare_server_args`` + ``ServerArgs.resolve_once`` and ``_load_adaptive_config`` (tests/servers/sglang_parse.py,
run by the venv of scripts/sglang_setup.sh), and the speculative values SGLang resolves must equal autotune's
effective config.

Needs AUTOTUNE_SGLANG_PYTHON (the path scripts/sglang_setup.sh prints last); skipped without it, set in CI."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("sglang_parse.py")
SGLANG_PYTHON = os.environ.get("AUTOTUNE_SGLANG_PYTHON")
#: grid points checked per space (evenly spread over the grid, its ends included)
GRID_SAMPLE = 24

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(not SGLANG_PYTHON, reason="AUTOTUNE_SGLANG_PYTHON not set (scripts/sglang_setup.sh)"),
]


# ---------------------------------------------------------------------------------------------------------------
# The one adapter to autotune's internals: what autotune launches and exports for a space. Update it (only it) when
# the package moves.


def autotune_sglang_launches(space_path: Path) -> dict:
    """For an SGLang space file: ``{"launches": [(name, flags, expected)], "schedule_files": [(name, json_obj,
    flags)]}``. ``flags`` are the arguments after the launcher, with checkpoint paths that exist here (the simulator's
    stand-ins, which carry the real config.json); ``expected`` is autotune's effective config as SGLang names it
    (``speculative_algorithm`` None for a baseline). ``schedule_files``: for load-level spaces, the adaptive-config
    file autotune writes for a per-level schedule, with the launch flags it is exported with (without the file's
    path: the test appends it)."""
    from autotune import checks, export_bundle
    from autotune.backends import get_backend
    from autotune.backends.sglang import adaptive_config, resolved_algorithm
    from autotune.config import TrialConfig
    from autotune.sim import simulated_space
    from autotune.sim.scenario import SCENARIO_DIR, read_scenario, scenario_loader
    from autotune.space import load_space

    space = load_space(space_path)
    bench = REPO / "scripts" / "bench_scenarios"  # the bench spaces' scenarios (as scripts/bench_load.py reads them)
    extra = {}
    for p in sorted(bench.glob("*.scenario.yaml")):
        sc = read_scenario(str(p), dirs=[str(bench), SCENARIO_DIR])
        extra[sc.name] = sc
    sim = simulated_space(space, scenarios=scenario_loader(extra))
    backend = get_backend("sglang")
    here = {space.server.model_path: sim.server.model_path}
    here.update({d.path: s.path for d, s in zip(space.drafters, sim.drafters, strict=True)})

    files_dir = tempfile.mkdtemp(prefix="autotune-sglang-files-")  # files a launch reads (the adaptive config)

    def launch_argv(config: TrialConfig) -> list[str]:
        for name, text in backend.files(config, sim).items():
            Path(files_dir, name).write_text(text)
        return backend.argv(config, sim, port=30000, simulate=True, files_dir=files_dir)

    def expected(config: TrialConfig) -> dict:
        eff = backend.resolve(config, sim)
        if eff.is_baseline:
            return {"speculative_algorithm": None}
        if eff.knob("method") is not None:  # a method space: the algorithm flag autotune passes, as SGLang names it
            argv = launch_argv(config)
            algorithm = argv[argv.index("--speculative-algorithm") + 1].upper()
            algorithm = "EAGLE" if algorithm == "NEXTN" else algorithm  # NEXTN is EAGLE inside SGLang
        else:
            algorithm = resolved_algorithm(sim, eff.drafter)
        out = {
            "speculative_algorithm": algorithm,
            "speculative_num_steps": eff.knob("num_steps"),
            "speculative_eagle_topk": eff.knob("topk"),
            "speculative_num_draft_tokens": eff.knob("num_draft_tokens"),
        }
        if eff.knob("method") is not None:  # adaptive stays on where autotune runs it (adaptive MTP too), else off
            out["speculative_adaptive"] = backend.methods[str(eff.knob("method"))].adaptive
        return out

    grid = backend.grid(sim) or []
    step = max(1, len(grid) // GRID_SAMPLE)
    sample = grid[::step] + grid[-1:]
    baselines = [TrialConfig.baseline(bool(cg)) for cg in space.search.cuda_graph]
    launches = []
    for kind, configs in (("baseline", baselines), ("default", backend.defaults(sim)), ("grid", sample)):
        for c in configs:
            argv = launch_argv(c)  # what --simulate launches (SGLang's flags)
            launches.append((f"{kind} {_name(c)}", argv[len(backend.launcher(sim)) :], expected(c)))
    # the exported deployment command (export --format sglang): the real space, each drafter keeping the algorithm
    # read from its stand-in (as autotune.commands.deploy.deploy_space does after a simulated study)
    deploy = dataclasses.replace(
        space,
        drafters=tuple(
            d if d.algorithm else dataclasses.replace(d, algorithm=checks.resolved_algorithm(sim, d.name))
            for d in space.drafters
        ),
    )
    for c in baselines + backend.defaults(sim):
        launch_argv(c)  # writes the files the launch reads into files_dir
        argv = export_bundle.launch_argv(deploy, backend, c, files_dir=files_dir)
        flags = [here.get(a, a) for a in argv[len(backend.launcher(space, deploy=True)) :]]
        launches.append((f"export {_name(c)}", flags, expected(c)))

    files = []
    levels = list(space.benchmark.concurrency)
    if len(levels) > 1:
        d = backend.defaults(sim)[0]
        # a falling ladder that ends off, as load studies find (schedule.build's output shape)
        drafts = [max(0, 5 - i) for i in range(len(levels))]
        sched = {
            "static": {"drafter": d.drafter, "cuda_graph": d.cuda_graph, "topk": 1},
            "draft_knob": "num_steps",
            "levels": [
                {"level": c, "draft": k, "trial": None, "config": None, "speedup": None}
                for c, k in zip(levels, drafts, strict=True)
            ],
            "on_up_to": max(c for c, k in zip(levels, drafts, strict=True) if k),
        }
        file_ = adaptive_config(sched)
        c = TrialConfig.make(d.drafter, d.cuda_graph, num_steps=drafts[0], topk=1, num_draft_tokens=drafts[0] + 1)
        argv = backend.argv(c, sim, port=30000, simulate=True)
        files.append(("ladder 5..0", file_, [*argv[len(backend.launcher(sim)) :], "--speculative-adaptive"]))
    return {"launches": launches, "schedule_files": files, "standin_paths": here}


def _name(c) -> str:  # noqa: ANN001
    knobs = ",".join(f"{k}={v}" for k, v in sorted(c.knob_dict.items()))
    return f"{c.drafter or 'baseline'} cuda_graph={c.cuda_graph} {knobs}".strip()


# ---------------------------------------------------------------------------------------------------------------


def sglang_spaces() -> list[Path]:
    out = []
    for p in sorted([*REPO.glob("spaces/*.yaml"), *REPO.glob("scripts/bench_scenarios/*.space.yaml")]):
        if "backend: sglang" in p.read_text():
            out.append(p)
    return out


class Driver:
    """``sglang_parse.py --serve`` in SGLang's venv, one for the module (SGLang's import costs ~10 CPU-s on 2 cores;
    each check still runs in its own forked child), every request with a time limit."""

    def __init__(self) -> None:
        assert SGLANG_PYTHON is not None
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [SGLANG_PYTHON, str(DRIVER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
        )
        self.buf = b""

    def run(self, src: Path, dst: Path, timeout_s: float = 900.0) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{src}\t{dst}\n".encode())
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"@@done\n" not in self.buf:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], left)[0] if left > 0 else []
            chunk = os.read(fd, 65536) if ready else None
            if not chunk:  # it exited (b""), or the limit passed (None)
                self.close()
                self.stderr.seek(0)
                tail = self.stderr.read().decode(errors="replace")[-4000:]
                pytest.fail(f"the SGLang driver {'exited' if chunk == b'' else 'timed out'}: {tail}")
            self.buf += chunk
        self.buf = self.buf.partition(b"@@done\n")[2]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


_DRIVER: list[Driver] = []


@pytest.fixture(scope="module", autouse=True)
def _driver():
    yield
    while _DRIVER:
        _DRIVER.pop().close()


def run_sglang(items: list[dict], tmp_path: Path) -> dict:
    path, out = tmp_path / "items.json", tmp_path / "results.json"
    path.write_text(json.dumps(items))
    if not _DRIVER or _DRIVER[0].proc.poll() is not None:
        _DRIVER[:] = [Driver()]
    _DRIVER[0].run(path, out)
    return {x["id"]: x for x in json.loads(out.read_text())}


def _problems(items: list[dict], results: dict, expected: dict) -> list[str]:
    out = []
    for it in items:
        res = results[it["id"]]
        if not res["accepted"]:
            out.append(f"{it['id']}: rejected at {res['stage']}: {res['error']}\n    {shlex.join(it.get('argv', []))}")
            continue
        if res.get("deprecated"):  # a launch in a spelling this release deprecates
            out.append(f"{it['id']}: SGLang warns {res['deprecated']}\n    {shlex.join(it.get('argv', []))}")
        want = expected.get(it["id"])
        got = res.get("resolved", {})
        if want is not None:
            diff = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
            if diff:
                out.append(f"{it['id']}: autotune's effective config vs SGLang's (autotune, sglang): {diff}")
    return out


@pytest.mark.parametrize("space_path", sglang_spaces(), ids=lambda p: str(p.relative_to(REPO)))
def test_sglang_accepts_every_launch_and_resolves_it_as_autotune_says(space_path, tmp_path):
    got = autotune_sglang_launches(space_path)
    items, expected = [], {}
    for name, flags, want in got["launches"]:
        items.append({"id": name, "argv": flags})
        expected[name] = want
    for name, file_, flags in got["schedule_files"]:
        f = tmp_path / f"adaptive-{len(items)}.json"
        f.write_text(json.dumps(file_))
        items.append({"id": f"adaptive file {name}", "adaptive_config": str(f)})
        items.append({"id": f"adaptive launch {name}", "argv": [*flags, "--speculative-adaptive-config", str(f)]})
        expected[f"adaptive launch {name}"] = {"speculative_adaptive": True}
    assert len(items) > 3
    results = run_sglang(items, tmp_path)
    problems = _problems(items, results, expected)
    assert not problems, f"{len(problems)} of {len(items)} rejected or resolved otherwise:\n" + "\n".join(problems)


def test_the_exported_load_schedule_is_accepted(tmp_path):
    """A real load study on the simulator, ``export --format sglang``: its command and adaptive file as SGLang reads
    them."""
    from . import as_run

    space = REPO / "spaces" / "llama-8b-load.yaml"
    exported = as_run.study_then_export(space, ["sglang"], tmp_path, n_trials=16)["sglang"]
    script = exported.path
    adaptive = exported.files.get("adaptive.json")  # written beside the script by -o
    assert adaptive is not None, exported.files
    (line,) = [ln for ln in script.read_text().splitlines() if "sglang.launch_server" in ln and not ln.startswith("#")]
    argv = shlex.split(line)
    argv = argv[argv.index("sglang.launch_server") + 1 :]
    # deployment paths -> the stand-in checkpoints (this machine has no /models); the script's file path -> the file
    standin = autotune_sglang_launches(space)["standin_paths"]
    argv = [str(adaptive) if a.endswith("adaptive.json") else standin.get(a, a) for a in argv]
    items = [{"id": "file", "adaptive_config": str(adaptive)}, {"id": "command", "argv": argv}]
    results = run_sglang(items, tmp_path)
    problems = _problems(items, results, {"command": {"speculative_adaptive": True}})
    assert not problems, "\n".join(problems) + "\n" + script.read_text()


@pytest.mark.parametrize("base", ["llama-8b-load.yaml", "llama-8b-eagle3.yaml"])
def test_every_export_runs_as_its_runtime_runs_it(base, tmp_path):
    """A study on the simulator (the load space: a schedule with its adaptive file; the EAGLE-3 space: a tree), its
    recommendation exported with ``-o`` in every format of an SGLang study, each run as its runtime runs it
    (``as_run``: bash for the scripts, the README's env line under bash and under sh, the image's entrypoint + the
    command for compose, command + args for Kubernetes, the argv as written for yaml/json): SGLang accepts each and
    resolves every one to the same speculative config."""
    from autotune.backends import get_backend
    from autotune.export_formats import fitting_formats

    from . import as_run

    space = tmp_path / base
    space.write_text((REPO / "spaces" / base).read_text().replace("prompts_file: ../", f"prompts_file: {REPO}/"))
    formats = [f for f in fitting_formats(get_backend("sglang")) if f != "vllm"]
    here = as_run.stand_ins(space)
    items = []
    for fmt, exported in as_run.study_then_export(space, formats, tmp_path, n_trials=12).items():
        folder, text, files = exported.path.parent, exported.text, exported.files
        if fmt == "env":
            argvs = {f"env ({sh})": as_run.env_argv(text, sh, folder) for sh in ("bash", "sh")}
        elif fmt in ("sglang", "command"):
            argvs = {fmt: as_run.script_argv(text, folder.parent)}
        else:
            argvs = {fmt: as_run.exported_argv(text, fmt, folder)}
        for name, argv in argvs.items():
            flags = as_run.after(argv, ["python3", "-m", "sglang.launch_server"])
            # checkpoints: the stand-ins here; a file the launch reads: the one -o wrote (a script's and an env
            # file's path must be that very file; the container's is mounted from it)
            for i, a in enumerate(flags):
                if Path(a).name in files:
                    if fmt in ("sglang", "command", "env"):
                        assert folder.joinpath(a).resolve() == files[Path(a).name].resolve(), a
                    flags[i] = str(files[Path(a).name])
            items.append({"id": name, "argv": [here.get(a, a) for a in flags]})
    assert len(items) == 8
    results = run_sglang(items, tmp_path)
    problems = _problems(items, results, {})
    assert not problems, "\n".join(problems)
    resolved = {it["id"]: results[it["id"]]["resolved"] for it in items}
    assert len({json.dumps(v, sort_keys=True) for v in resolved.values()}) == 1, resolved
    (one,) = {json.dumps(v, sort_keys=True) for v in resolved.values()}
    assert json.loads(one)["speculative_algorithm"] == "EAGLE3", one


def test_sglang_keeps_adaptive_on_over_nextn(tmp_path):
    """Adaptive over MTP (method adaptive-mtp): SGLang 0.5.23 resolves NEXTN to EAGLE
    (``speculative_hook._resolve_speculative_algorithm_alias``) before ``adaptive_unsupported_reason`` asks for
    EAGLE/EAGLE3 at topk 1, so it accepts the launch and keeps ``speculative_adaptive`` on, as autotune says."""
    got = autotune_sglang_launches(REPO / "spaces" / "methods-mtp.yaml")
    mine = [(n, f, w) for n, f, w in got["launches"] if "method=adaptive-mtp" in n]
    assert mine and all("NEXTN" in f and "--speculative-adaptive" in f for _, f, _ in mine)
    items = [{"id": n, "argv": f} for n, f, _ in mine]
    results = run_sglang(items, tmp_path)
    assert not _problems(items, results, {n: w for n, _, w in mine})
    assert all(results[n]["resolved"]["speculative_adaptive"] is True for n, _, _ in mine)
    assert all(results[n]["resolved"]["speculative_algorithm"] == "EAGLE" for n, _, _ in mine)

"""vLLM's own parser and engine-config builder as a standing check: every ``vllm serve`` launch autotune makes for
the vLLM spaces below (baselines, each method's server default, every grid point of a method space, every feasible
config of a flat space; load-level flags included) and every export that carries a command (each fitting format of
a vLLM study, hand-made and from a study of spaces/vllm-llama-8b-eagle3.yaml on the simulator playing vLLM, SGLang
studies translated with ``--format vllm``, a load study's ``--format vllm`` schedule), each run as its runtime runs
it (``as_run``: bash, the env file's start line under bash and sh, compose and Kubernetes with the image's
entrypoint), goes through vLLM 0.33.0's ``vllm serve`` parser, ``validate_parsed_serve_args`` and
``create_engine_config`` (tests/servers/vllm_parse.py, run by the venv of scripts/vllm_setup.sh), and the
``SpeculativeConfig`` vLLM builds must be the one autotune means: method, num_speculative_tokens, model,
prompt_lookup_min/max, draft_tensor_parallel_size, num_speculative_tokens_per_batch_size, plus enforce_eager (CUDA
graphs off) and max_num_seqs (load levels).

Besides the shipped vLLM space, the spaces are here, on the simulator's stand-in checkpoints (real config.json
files, no weights), covering every method autotune has for vLLM (eagle, eagle3, draft_model, mtp, ngram), a flat
space (``method`` as a knob), load levels, and a server-side extra flag.

Needs AUTOTUNE_VLLM_PYTHON (the path scripts/vllm_setup.sh prints last); skipped without it, set in CI."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from . import as_run

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("vllm_parse.py")
VLLM_PYTHON = os.environ.get("AUTOTUNE_VLLM_PYTHON")
SCEN = REPO / "autotune" / "sim" / "scenarios"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_PYTHON, reason="AUTOTUNE_VLLM_PYTHON not set (scripts/vllm_setup.sh)"),
]

LLAMA = SCEN / "llama31-8b-h100" / "target"
EAGLE3_LLAMA = SCEN / "llama31-8b-h100" / "drafters" / "eagle3-llama31-8b"
LLAMA_1B = SCEN / "llama31-8b-h100-methods" / "drafters" / "llama32-1b"
DSV3 = SCEN / "deepseek-v3-mtp-h200" / "target"  # num_nextn_predict_layers: 1
EAGLE3_DSV3 = SCEN / "deepseek-v3-mtp-h200" / "drafters" / "eagle3-dsv3"
#: an EAGLE (1) head for Llama-3.1-8B as vLLM loads one (yuhuili/EAGLE-LLaMA3.1-Instruct-8B's config.json: one
#: LlamaForCausalLM layer; vLLM names it EagleLlamaForCausalLM). The simulator's EAGLE-1 stand-in is SGLang's format
#: (LlamaForCausalLMEagle), which vLLM 0.33.0 refuses ("Model architectures ['LlamaForCausalLMEagle'] are not
#: supported"), so this test writes its own (``eagle_head``).
EAGLE1_LLAMA = Path(os.environ.get("TMPDIR", "/tmp")) / "autotune-vllm-parser" / "eagle-llama31-8b"
EAGLE_HEAD = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128009,
}

SPACES = {
    # every method but mtp (a Llama target has no MTP layers: not searched), CUDA graphs on and off
    "methods-llama": f"""
name: vllm-methods-llama
server: {{backend: vllm, model_path: {LLAMA}, version: "0.33.0"}}
drafters:
  - {{name: eagle3-llama31-8b, path: {EAGLE3_LLAMA}, algorithm: EAGLE3}}
  - {{name: llama32-1b, path: {LLAMA_1B}}}
search:
  cuda_graph: [true, false]
  methods:
    eagle3: {{drafters: [eagle3-llama31-8b], num_speculative_tokens: {{low: 1, high: 8}}}}
    draft_model: {{drafters: [llama32-1b], num_speculative_tokens: [2, 4, 6]}}
    mtp: {{num_speculative_tokens: [1, 2]}}
    ngram: {{num_speculative_tokens: [2, 4, 8], prompt_lookup_max: [2, 4, 5], prompt_lookup_min: [1, 2, 5]}}
benchmark: {{prompts: [hello]}}
""",
    # the target's own MTP layers, an EAGLE-3 head of DeepSeek-V3, n-gram with vLLM's defaults
    "methods-deepseek": f"""
name: vllm-methods-deepseek
server: {{backend: vllm, model_path: {DSV3}, version: "0.33.0"}}
drafters:
  - {{name: eagle3-dsv3, path: {EAGLE3_DSV3}, algorithm: EAGLE3}}
search:
  cuda_graph: [true]
  methods:
    mtp: {{num_speculative_tokens: [1, 2, 3]}}
    eagle3: {{drafters: [eagle3-dsv3], num_speculative_tokens: [2, 5]}}
    ngram: {{}}
benchmark: {{prompts: [hello]}}
""",
    # an EAGLE (1) head in vLLM's format (EAGLE_HEAD below)
    "methods-eagle": f"""
name: vllm-methods-eagle
server: {{backend: vllm, model_path: {LLAMA}, version: "0.33.0"}}
drafters:
  - {{name: eagle-llama31-8b, path: {EAGLE1_LLAMA}, algorithm: EAGLE}}
search:
  cuda_graph: [true, false]
  methods:
    eagle: {{drafters: [eagle-llama31-8b], num_speculative_tokens: {{low: 1, high: 5}}}}
    ngram: {{num_speculative_tokens: [3], prompt_lookup_max: [3], prompt_lookup_min: [3]}}
benchmark: {{prompts: [hello]}}
""",
    # no search.methods: the method is a knob, derived from each drafter; a server flag in extra_args
    "flat": f"""
name: vllm-flat
server: {{backend: vllm, model_path: {LLAMA}, version: "0.33.0", extra_args: [--max-model-len, "8192"]}}
drafters:
  - {{name: eagle3-llama31-8b, path: {EAGLE3_LLAMA}, algorithm: EAGLE3}}
  - {{name: llama32-1b, path: {LLAMA_1B}, algorithm: STANDALONE}}
search:
  cuda_graph: [true, false]
  num_speculative_tokens: [1, 3, 6]
  method: [eagle3, draft_model, ngram, mtp]
benchmark: {{prompts: [hello]}}
""",
    # load levels: the server is launched for the highest (--max-num-seqs)
    "load": f"""
name: vllm-load
server: {{backend: vllm, model_path: {LLAMA}, version: "0.33.0"}}
drafters:
  - {{name: eagle3-llama31-8b, path: {EAGLE3_LLAMA}, algorithm: EAGLE3}}
search:
  cuda_graph: [true]
  num_speculative_tokens: {{low: 1, high: 5}}
benchmark: {{prompts: [hello], concurrency: [1, 4, 16]}}
""",
}


# ---------------------------------------------------------------------------------------------------------------
# The adapter to autotune's internals: what autotune launches and exports for a vLLM space, and what it means by
# it. Update it (only it) when the package moves.


def load(name: str, tmp_path: Path):  # noqa: ANN201
    from autotune.space import load_space

    EAGLE1_LLAMA.mkdir(parents=True, exist_ok=True)
    (EAGLE1_LLAMA / "config.json").write_text(json.dumps(EAGLE_HEAD))

    p = tmp_path / f"{name}.yaml"
    p.write_text(SPACES[name])
    return load_space(p)


def configs(space) -> list:  # noqa: ANN001
    """Every config autotune may launch for ``space``: baselines, the method defaults, the whole grid of a method
    space; for a flat space every feasible (drafter, method, K, CUDA graphs)."""
    from autotune.backends.methods import int_values
    from autotune.backends.vllm import VLLMBackend
    from autotune.config import TrialConfig
    from autotune.errors import InfeasibleConfig

    backend = VLLMBackend()
    out = [TrialConfig.baseline(bool(cg)) for cg in space.search.cuda_graph]
    out += backend.defaults(space)
    grid = backend.grid(space)
    if grid is not None:
        return out + list(grid)
    knobs = space.search.knobs
    for d in space.searched_drafters():
        for method in [str(m) for m in knobs["method"].values] if "method" in knobs else [None]:
            for k in int_values(knobs["num_speculative_tokens"], "vLLM") or []:
                for cg in space.search.cuda_graph:
                    c = TrialConfig.make(d, bool(cg), method=method, num_speculative_tokens=int(k))
                    try:
                        backend.resolve(c, space)
                    except InfeasibleConfig:
                        continue
                    out.append(c)
    return out


def meant(config, space) -> dict:  # noqa: ANN001
    """What autotune means vLLM to run for ``config``: its effective speculative config as vLLM's
    ``SpeculativeConfig`` names its fields after resolution (None for a baseline), CUDA graphs, the load level."""
    from autotune.backends.vllm import VLLMBackend

    backend = VLLMBackend()
    eff = backend.resolve(config, space)
    levels = list(space.benchmark.concurrency)
    out: dict = {"enforce_eager": not eff.cuda_graph}
    if len(levels) > 1:
        out["max_num_seqs"] = max(levels)
    if eff.is_baseline:
        out["speculative"] = None
        return out
    method = str(eff.knob("method"))
    spec = backend.tree.speculative_config(eff, space)
    if method == "mtp":  # the target's own layers (a flat space's drafter is not launched)
        model = space.server.model_path
    elif method == "ngram":
        model = "ngram"
    else:
        model = space.drafter(eff.drafter).path
    out["speculative"] = {
        "method": method,
        "num_speculative_tokens": int(eff.knob("num_speculative_tokens")),
        # vLLM's model field: the drafter; the target itself for mtp; the method's name for ngram
        "model": model,
        # vLLM zeroes the lookup bounds of every method but ngram
        "prompt_lookup_min": spec.get("prompt_lookup_min", 0) if method == "ngram" else 0,
        "prompt_lookup_max": spec.get("prompt_lookup_max", 0) if method == "ngram" else 0,
        "draft_tensor_parallel_size": 1,
        "num_speculative_tokens_per_batch_size": None,
    }
    if method == "ngram":  # what autotune's knobs say, not what its JSON says: both must agree
        out["speculative"]["prompt_lookup_min"] = int(eff.knob("prompt_lookup_min") or spec["prompt_lookup_min"])
        out["speculative"]["prompt_lookup_max"] = int(eff.knob("prompt_lookup_max") or spec["prompt_lookup_max"])
    return out


def launch_flags(config, space) -> list[str]:  # noqa: ANN001
    """The argv autotune launches for ``config``, after ``vllm serve``."""
    from autotune.backends.vllm import VLLMBackend

    backend = VLLMBackend()
    argv = backend.argv(config, space, port=8000)
    assert argv[:2] == ["vllm", "serve"], argv
    return argv[2:]


def report_for(config):  # noqa: ANN001, ANN201
    """The smallest study result an export reads: ``config`` recommended."""
    from autotune.verdict import Verdict
    from tests.study.conftest import recommending

    winner = config.drafter or config.knob("method")
    verdict = Verdict.SPECULATION_WINS if winner else Verdict.BASELINE_WINS
    return recommending(config.to_dict(), "vllm-parser-check", verdict, "the config under test", 1, 100.0)


def exported_flags(space, config, fmt: str) -> list[str]:  # noqa: ANN001
    """The ``vllm serve`` arguments an export of ``config`` in format ``fmt`` launches (read back from its text)."""
    from autotune import export
    from autotune.backends.vllm import VLLMBackend

    text = export.export(space, VLLMBackend(), report_for(config), fmt).text
    return serve_flags(text, fmt)


def serve_flags(text: str, fmt: str) -> list[str]:
    """The arguments after ``vllm serve`` of an export's text, as its runtime runs it (``as_run``: a script by
    bash, an env file by the README's line under bash and sh, compose and Kubernetes with the image's entrypoint)."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = as_run.exported_argv(text, fmt, Path(tmp))
    return as_run.after(argv, ["vllm", "serve"])


def standins(flags: list[str], here: dict) -> list[str]:
    """Deployment checkpoint paths (``/models/...``, not on this machine) -> the simulator's stand-ins, in the
    arguments and in the ``--speculative-config`` JSON's ``model``."""
    out = [here.get(a, a) for a in flags]
    if "--speculative-config" in out:
        i = out.index("--speculative-config") + 1
        spec = json.loads(out[i])
        if spec.get("model") in here:
            spec["model"] = here[spec["model"]]
        out[i] = json.dumps(spec)
    return out


def _name(c) -> str:  # noqa: ANN001
    knobs = ",".join(f"{k}={v}" for k, v in sorted(c.knob_dict.items()))
    return f"{c.drafter or 'baseline'} cuda_graph={c.cuda_graph} {knobs}".strip()


# ---------------------------------------------------------------------------------------------------------------


def run_vllm(items: list[dict], tmp_path: Path) -> dict:
    """vLLM's reading of each item's argv, by item id. The same argv is parsed once (about half the launches and
    exports repeat one another, and each parse builds vLLM's engine config: ~0.2 CPU-s)."""
    first: dict[tuple[str, ...], str] = {}
    for it in items:
        first.setdefault(tuple(it["argv"]), it["id"])
    path = tmp_path / "items.json"
    path.write_text(json.dumps([it for it in items if first[tuple(it["argv"])] == it["id"]]))
    r = subprocess.run([VLLM_PYTHON, str(DRIVER), str(path)], capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    parsed = {x["id"]: x for x in json.loads(r.stdout.splitlines()[-1])}
    assert {x["vllm"] for x in parsed.values()} == {"0.33.0"} and len(parsed) == len(first)
    return {it["id"]: {**parsed[first[tuple(it["argv"])]], "id": it["id"]} for it in items}


def problems(items: list[dict], results: dict, expected: dict) -> list[str]:
    out = []
    for it in items:
        res = results[it["id"]]
        if not res["accepted"]:
            out.append(
                f"{it['id']}: rejected at {res['stage']}: {res['error']}\n    vllm serve {shlex.join(it['argv'])}"
            )
            continue
        want = expected[it["id"]]
        got = {k: res.get(k) for k in want}
        if got != want:
            out.append(
                f"{it['id']}: autotune means {want}\n    vLLM read {got}\n    vllm serve {shlex.join(it['argv'])}"
            )
    return out


def check(batch: dict, group: str) -> None:
    items, expected, results = batch[group]
    bad = problems(items, results, expected)
    assert not bad, f"{len(bad)} of {len(items)} rejected or read otherwise by vLLM 0.33.0:\n" + "\n".join(bad)


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> dict:
    """Every group of launches below, handed to vLLM in one run of the driver (importing vLLM takes a while):
    group -> (items, expected, results)."""
    tmp = tmp_path_factory.mktemp("vllm-parser")
    groups = {f"launch {n}": launches(n, tmp) for n in sorted(SPACES)}
    groups.update({f"export {n}": exports(n, tmp) for n in EXPORTED})
    groups["schedule"] = schedule_exports(tmp)
    groups["study"] = study_exports(tmp)
    groups["translated"] = translated(tmp)
    items = [{**it, "id": f"{g}: {it['id']}"} for g, (its, _) in groups.items() for it in its]
    results = run_vllm(items, tmp)
    out = {}
    for g, (its, want) in groups.items():
        its = [{**it, "id": f"{g}: {it['id']}"} for it in its]
        out[g] = (its, {f"{g}: {k}": v for k, v in want.items()}, results)
    return out


@pytest.mark.parametrize("name", sorted(SPACES))
def test_vllm_accepts_every_launch_and_reads_it_as_autotune_means(name, batch):
    check(batch, f"launch {name}")


def launches(name: str, tmp_path: Path) -> tuple[list[dict], dict]:
    space = load(name, tmp_path)
    items, expected = [], {}
    for c in configs(space):
        i = f"{_name(c)} #{len(items)}"
        items.append({"id": i, "argv": launch_flags(c, space)})
        expected[i] = meant(c, space)
    methods = {(e["speculative"] or {}).get("method") for e in expected.values()}
    assert len(items) > 3 and methods - {None}, methods
    return items, expected


def test_every_method_is_covered():
    """The spaces above launch every method autotune has for vLLM (a method added to the backend without a space
    here fails this)."""
    from autotune.backends.vllm import METHODS

    covered = set()
    for text in SPACES.values():
        doc = yaml.safe_load(text)
        covered |= set(doc["search"].get("methods") or {}) | {str(m) for m in doc["search"].get("method") or []}
    covered |= {"eagle3"}  # the flat load space's drafter
    assert covered >= set(METHODS)


EXPORTED = ["methods-llama", "methods-deepseek", "methods-eagle", "flat"]


@pytest.mark.parametrize("name", EXPORTED)
def test_every_export_format_of_a_vllm_study_is_accepted(name, batch):
    """Each format that fits a vLLM study (all carry the command), for every method's server default and a
    baseline: the command it launches parses and reads as autotune means."""
    check(batch, f"export {name}")


def exports(name: str, tmp_path: Path) -> tuple[list[dict], dict]:
    from autotune import export_formats
    from autotune.backends.vllm import VLLMBackend

    space = load(name, tmp_path)
    fmts = export_formats.fitting_formats(VLLMBackend())
    assert fmts == ["vllm", "command", "yaml", "json", "env", "compose", "k8s"]
    chosen = configs(space)
    by_method: dict = {}
    for c in chosen:  # a baseline with and without CUDA graphs, one config per method and CUDA-graph setting
        eff = VLLMBackend().resolve(c, space)
        by_method.setdefault((eff.knob("method"), eff.cuda_graph), c)
    items, expected = [], {}
    for c in by_method.values():
        for fmt in fmts:
            i = f"{fmt}: {_name(c)}"
            items.append({"id": i, "argv": exported_flags(space, c, fmt)})
            want = meant(c, space)
            expected[i] = want
    return items, expected


def test_a_simulated_vllm_study_exports_what_vllm_runs_as_each_runtime_runs_it(batch):
    """The shipped vLLM space studied on the simulator playing vLLM (``autotune study --simulate``: a server process
    per start, real HTTP, acceptance from vLLM's /metrics counters), its recommendation exported with ``-o`` in
    every format that fits, each run as its runtime runs it (``as_run``): the scripts by bash, the env file by the
    README's line under bash and under sh (the ``--speculative-config`` JSON kept whole), compose and Kubernetes
    with the image's entrypoint: vLLM accepts each and reads the speculative config the study recommended."""
    check(batch, "study")


def study_exports(tmp_path: Path) -> tuple[list[dict], dict]:
    from autotune import export_formats
    from autotune.backends.vllm import VLLMBackend
    from autotune.config import TrialConfig
    from autotune.sim import simulated_space
    from autotune.space import load_space

    # the shipped space at a faster clock (the simulator's hardware seconds / 400 of wall time)
    space = tmp_path / "vllm-llama-8b-eagle3.yaml"
    text = (REPO / "spaces" / "vllm-llama-8b-eagle3.yaml").read_text()
    space.write_text(text.replace("time_scale: 50,", "time_scale: 400,"))
    formats = export_formats.fitting_formats(VLLMBackend())
    exported = as_run.study_then_export(space, formats, tmp_path / "study", n_trials=6, in_process=False)
    studies = str(tmp_path / "study" / "studies")
    report = json.loads(
        as_run.autotune_cli("report", str(space), "--simulate", "--json", "--studies-dir", studies, cwd=tmp_path).stdout
    )
    rec = TrialConfig.from_dict(report["recommended"]["config"])
    assert rec.drafter and report["verdict"] == "speculation-wins", report["recommended"]
    # acceptance came from vLLM's counters over HTTP: 1 + accepted / drafts of every measured speculative trial
    measured = [t["accept_length"] for t in report["trials"] if t["config"].get("drafter") and t["accept_length"]]
    assert measured and all(1.5 < a < 9 for a in measured), measured
    here = as_run.stand_ins(space)
    want = meant(rec, simulated_space(load_space(space)))
    items, expected = [], {}
    for fmt, ex in exported.items():
        if fmt == "env":
            argvs = {f"env ({sh})": as_run.env_argv(ex.text, sh, ex.path.parent / sh) for sh in ("bash", "sh")}
        else:
            argvs = {fmt: as_run.exported_argv(ex.text, fmt, ex.path.parent)}
        for i, argv in argvs.items():
            items.append({"id": i, "argv": standins(as_run.after(argv, ["vllm", "serve"]), here)})
            expected[i] = want
    assert len(items) == 8 and want["speculative"]["method"] == "eagle3"
    return items, expected


def test_a_vllm_load_study_exports_its_schedule_as_vllm_reads_it(batch):
    """A load space's per-level schedule (``num_speculative_tokens_per_batch_size``, K the largest level's draft):
    every format's command, read back by vLLM."""
    check(batch, "schedule")


def schedule_exports(tmp_path: Path) -> tuple[list[dict], dict]:
    from autotune import export, export_formats
    from autotune.backends.vllm import VLLMBackend
    from autotune.config import TrialConfig
    from autotune.schedule import batch_ranges

    space = load("load", tmp_path)
    config = TrialConfig.make("eagle3-llama31-8b", True, method="eagle3", num_speculative_tokens=4)
    sched = {
        "static": {"drafter": "eagle3-llama31-8b", "cuda_graph": True},
        "draft_knob": "num_speculative_tokens",
        "levels": [
            {"level": 1, "draft": 4, "trial": None, "config": None, "speedup": None},
            {"level": 4, "draft": 2, "trial": None, "config": None, "speedup": None},
            {"level": 16, "draft": 1, "trial": None, "config": None, "speedup": None},
        ],
        "on_up_to": 16,
    }
    ranges = [list(r) for r in batch_ranges(sched)]
    want = meant(config, space)
    want["speculative"].update(num_speculative_tokens=4, num_speculative_tokens_per_batch_size=ranges)
    items, expected = [], {}
    for fmt in export_formats.fitting_formats(VLLMBackend()):
        text = export.export(space, VLLMBackend(), report_for(config), fmt, schedule=sched).text
        items.append({"id": fmt, "argv": serve_flags(text, fmt)})
        expected[fmt] = want
    return items, expected


# -- SGLang studies exported as `vllm serve` (export --format vllm: a translation)


def sglang_spaces() -> list[Path]:
    return sorted(p for p in REPO.glob("spaces/*.yaml") if "backend: sglang" in p.read_text())


def test_sglang_studies_translated_to_vllm_are_accepted(batch):
    """Every shipped SGLang space's translatable configs exported with ``--format vllm`` (``translated``)."""
    check(batch, "translated")


def translated(tmp_path: Path) -> tuple[list[dict], dict]:
    """Every shipped SGLang space's translatable configs (baselines, each drafter's server default, a sample of the
    grid) exported with ``--format vllm``: the command parses, and vLLM reads the drafter, the method autotune
    names (EAGLE3 -> eagle3, STANDALONE -> draft_model, ...) and K = the chain's length."""
    import dataclasses

    from autotune import checks, export
    from autotune.backends import get_backend
    from autotune.backends.vllm import VLLMBackend
    from autotune.config import TrialConfig
    from autotune.sim import simulated_space
    from autotune.space import load_space

    sglang = get_backend("sglang")
    items, expected, skipped = [], {}, []
    for path in sglang_spaces():
        deploy = load_space(path)
        sim = simulated_space(deploy)
        here = {deploy.server.model_path: sim.server.model_path}
        here.update({d.path: s.path for d, s in zip(deploy.drafters, sim.drafters, strict=True)})
        deploy = dataclasses.replace(  # as autotune.commands.deploy does after a simulated study
            deploy,
            drafters=tuple(
                d if d.algorithm else dataclasses.replace(d, algorithm=checks.resolved_algorithm(sim, d.name))
                for d in deploy.drafters
            ),
        )
        grid = sglang.grid(sim) or []
        sample = grid[:: max(1, len(grid) // 12)]
        cs = [TrialConfig.baseline(bool(cg)) for cg in deploy.search.cuda_graph] + sglang.defaults(sim) + sample
        for c in cs:
            try:
                text = export.export(deploy, sglang, report_for(c), "vllm").text
            except ValueError as e:  # no faithful translation (a tree, an n-gram method): refused, as documented
                skipped.append(f"{path.name} {_name(c)}: {e}")
                continue
            flags = standins(serve_flags(text, "vllm"), here)
            vspace, vconfig = VLLMBackend().translate(deploy, sglang.portable(c, deploy))
            vspace = dataclasses.replace(  # read on this machine: the stand-in checkpoints
                vspace,
                server=dataclasses.replace(vspace.server, model_path=here[vspace.server.model_path]),
                drafters=tuple(dataclasses.replace(d, path=here.get(d.path, d.path)) for d in vspace.drafters),
            )
            i = f"{path.name} {_name(c)} #{len(items)}"
            items.append({"id": i, "argv": flags})
            expected[i] = meant(vconfig, vspace)
    methods = {(e["speculative"] or {}).get("method") for e in expected.values()} - {None}
    assert methods >= {"eagle3", "draft_model"}, (methods, skipped)
    return items, expected


def test_the_exported_sglang_load_schedule_as_vllm_is_accepted(tmp_path):
    """A real load study on the simulator, ``export --format vllm`` (its schedule as
    ``num_speculative_tokens_per_batch_size``): the script's command as vLLM reads it."""
    from autotune import export_bundle
    from autotune.space import load_space

    space = REPO / "spaces" / "llama-8b-load.yaml"
    text = as_run.study_then_export(space, ["vllm"], tmp_path, n_trials=16)["vllm"].text
    deploy = load_space(space)
    here = as_run.stand_ins(space)
    flags = standins(serve_flags(text, "vllm"), here)
    spec_i = flags.index("--speculative-config") if "--speculative-config" in flags else None
    spec = json.loads(flags[spec_i + 1]) if spec_i is not None else {}
    p = export_bundle.read_provenance(text)
    sched = p.get("schedule") or []
    want: dict = {"max_num_seqs": max(deploy.benchmark.concurrency)}
    if spec_i is not None:
        drafts = [int(x["draft"]) for x in sched]
        want["speculative"] = {
            "method": p["translated"]["method"],
            "num_speculative_tokens": max(drafts),
            "num_speculative_tokens_per_batch_size": [list(r) for r in spec["num_speculative_tokens_per_batch_size"]],
        }
    items = [{"id": "command", "argv": flags}]
    results = run_vllm(items, tmp_path)
    res = results["command"]
    assert res["accepted"], f"{res['stage']}: {res['error']}\n{text}"
    assert res["max_num_seqs"] == want["max_num_seqs"], text
    if spec_i is not None:
        got = {k: res["speculative"][k] for k in want["speculative"]}
        assert got == want["speculative"], text
        # the ranges are the schedule's levels: each level's batch size gets its draft length
        for x in sched:
            (k,) = [r[2] for r in got["num_speculative_tokens_per_batch_size"] if r[0] <= x["level"] <= r[1]]
            assert k == x["draft"], (x, got)


# -- the drafters autotune refuses before launch (autotune.backends.vllm_methods) ---------------------------------

#: (method, architectures of the drafter's config.json): the SGLang formats, vLLM's formats, a base model vLLM has no
#: EAGLE head for
DRAFTER_CASES = [
    ("eagle", ["LlamaForCausalLM"]),
    ("eagle", ["EagleLlamaForCausalLM"]),
    ("eagle", ["MistralForCausalLM"]),
    ("eagle", ["LlamaForCausalLMEagle"]),
    ("eagle", ["Qwen2ForCausalLM"]),
    ("eagle3", ["LlamaForCausalLMEagle3"]),
    ("eagle3", ["Eagle3LlamaForCausalLM"]),
    ("eagle3", ["LlamaForCausalLM"]),
    ("eagle3", ["LlamaForCausalLMEagle"]),
    ("eagle3", ["Qwen2ForCausalLM"]),
]


def test_vllm_refuses_exactly_the_drafters_autotune_refuses(tmp_path):
    """Each case's drafter (a one-layer Llama head's config.json with those architectures) launched under its
    method on the Llama target: vLLM's own create_engine_config accepts it iff ``architecture_problem`` is None, and
    a refused one is refused for its architectures."""
    from autotune.backends.vllm_methods import architecture_problem

    items, want = [], {}
    for i, (method, archs) in enumerate(DRAFTER_CASES):
        d = tmp_path / f"drafter-{i}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({**EAGLE_HEAD, "architectures": archs}))
        spec = {"method": method, "model": str(d), "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}
        item_id = f"{method} {archs}"
        items.append({"id": item_id, "argv": [str(LLAMA), "--speculative-config", json.dumps(spec)]})
        want[item_id] = architecture_problem(method, f"drafter-{i}", str(d)) is None
    assert set(want.values()) == {True, False}
    results = run_vllm(items, tmp_path)
    bad = []
    for item_id, ok in want.items():
        res = results[item_id]
        if res["accepted"] != ok:
            bad.append(f"{item_id}: autotune {'accepts' if ok else 'refuses'}, vLLM: {res.get('error') or 'accepted'}")
        elif not ok and "are not supported" not in res["error"]:
            bad.append(f"{item_id}: vLLM refused it for another reason: {res['error'][:300]}")
    assert not bad, "\n".join(bad)


def test_the_accepted_tables_are_vllms_registry():
    """``vllm_drafters.ACCEPTED`` recomputed from vLLM 0.33.0's model registry and EAGLEConfig's renaming."""
    from autotune.backends.vllm_methods import ACCEPTED

    code = (
        "import json\n"
        "from vllm.model_executor.models.registry import ModelRegistry\n"
        "archs = set(ModelRegistry.get_supported_archs())\n"
        "e = lambda a: a if a.startswith('Eagle') else 'Eagle' + a\n"
        "e3 = lambda a: a if a.startswith('Eagle3') or a.endswith('Eagle3') else 'Eagle3' + a\n"
        "print(json.dumps({'eagle': sorted(a for a in archs if e(a) in archs),"
        " 'eagle3': sorted(a for a in archs if e3(a) in archs)}))\n"
    )
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    r = subprocess.run([VLLM_PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    assert {k: sorted(v) for k, v in ACCEPTED.items()} == got
    # and EAGLEConfig renames as vllm_drafters.renamed does (its source, the rule the tables are read with)
    src = subprocess.run(
        [VLLM_PYTHON, "-c", "import inspect, vllm.transformers_utils.configs.eagle as m; print(inspect.getsource(m))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    ).stdout
    assert 'f"Eagle{arch}" if not arch.startswith("Eagle") else arch' in src
    assert 'if arch.startswith("Eagle3") or arch.endswith("Eagle3")' in src


def test_the_metrics_samples_are_what_vllm_writes(tmp_path):
    """tests/backends/samples/vllm-0.33.0_metrics_*.txt written again by vLLM's own SpecDecodingProm
    (vllm_metrics_gen.py): the same series and values (the ``_created`` timestamps aside)."""
    from autotune.backends.streams import parse_prometheus

    gen = Path(__file__).with_name("vllm_metrics_gen.py")
    r = subprocess.run([VLLM_PYTHON, str(gen), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    samples = REPO / "tests" / "backends" / "samples"
    for name in ("before", "after"):
        fresh = parse_prometheus((tmp_path / f"{name}.txt").read_text())
        kept = parse_prometheus((samples / f"vllm-0.33.0_metrics_{name}.txt").read_text())
        assert {k: v for k, v in fresh.items() if "_created" not in k} == {
            k: v for k, v in kept.items() if "_created" not in k
        }

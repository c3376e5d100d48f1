"""vLLM's methods as a searched choice (``search.methods``): the ``--speculative-config`` JSON per method (one argv
element), the knobs of each, resolution rules (ngram's lookup bounds, the EAGLE/EAGLE-3 trap, MTP only on a target
with MTP layers), suggest/params round trips and the space validator.

vLLM drafters refused before launch: a drafter whose ``config.json`` architectures vLLM 0.33.0 does not load under
its method (``autotune.backends.vllm_methods``; SGLang's EAGLE-1 format ``LlamaForCausalLMEagle`` under ``eagle``)
is an error of ``autotune validate`` / ``autotune study`` (exit 2, nothing written or launched) and an infeasible
config at resolve. tests/servers/test_vllm_parser.py asks vLLM's own code the same questions.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.backends import check_space
from autotune.backends.vllm import VLLMBackend
from autotune.backends.vllm_methods import ACCEPTED, architecture_problem, renamed
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig, SpaceError
from autotune.space import load_space

SPACE = """\
name: v
server: {{backend: vllm, model_path: {target}, launcher: [vllm, serve]}}
drafters:
  - {{name: e3, path: /m/eagle3-head, algorithm: EAGLE3}}
  - {{name: e1, path: /m/eagle-head, algorithm: EAGLE}}
  - {{name: small, path: /m/small-model}}
search:
  methods:
{methods}
benchmark: {{prompts: [hello]}}
"""

ALL = """\
    eagle: {drafters: [e1], num_speculative_tokens: [2, 4]}
    eagle3: {drafters: [e3], num_speculative_tokens: {low: 1, high: 6}}
    draft_model: {drafters: [small], num_speculative_tokens: [3]}
    mtp: {num_speculative_tokens: [1, 2]}
    ngram: {num_speculative_tokens: [3, 5], prompt_lookup_max: [3, 5], prompt_lookup_min: [1, 2, 4]}
"""


def space(tmp_path, methods=ALL, target="/m/target"):
    p = tmp_path / "s.yaml"
    p.write_text(SPACE.format(methods=methods, target=target))
    return load_space(p)


def mtp_target(tmp_path, layers=1):
    d = tmp_path / "target"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(
        json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": layers})
    )
    return str(d)


@pytest.mark.parametrize(
    "method, drafter, knobs, expected",
    [
        ("eagle", "e1", {"num_speculative_tokens": 4},
         {"method": "eagle", "model": "/m/eagle-head", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1}),
        ("eagle3", "e3", {"num_speculative_tokens": 2},
         {"method": "eagle3", "model": "/m/eagle3-head", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}),
        ("draft_model", "small", {"num_speculative_tokens": 3},
         {"method": "draft_model", "model": "/m/small-model", "num_speculative_tokens": 3,
          "draft_tensor_parallel_size": 1}),
        ("mtp", None, {"num_speculative_tokens": 2}, {"method": "mtp", "num_speculative_tokens": 2}),
        ("ngram", None, {"num_speculative_tokens": 5, "prompt_lookup_max": 5, "prompt_lookup_min": 2},
         {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 5, "prompt_lookup_min": 2}),
    ],
)  # fmt: skip
def test_speculative_config_per_method_is_one_argv_element(tmp_path, method, drafter, knobs, expected):
    s = space(tmp_path, target=mtp_target(tmp_path))
    argv = VLLMBackend().argv(TrialConfig.make(drafter, True, method=method, **knobs), s, port=1)
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == expected
    assert argv[i + 2 :] == [] or argv[i + 2].startswith("--")  # the JSON is one element, nothing split off


def test_every_method_is_suggested_and_replays(tmp_path):
    s = space(tmp_path, target=mtp_target(tmp_path))
    b = VLLMBackend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(60):
        t = study.ask()
        cfg = b.suggest(t, s)
        assert b.params(b.resolve(cfg, s), s) == t.params
        if cfg.knob("method") == "ngram":
            assert cfg.knob("prompt_lookup_min") <= cfg.knob("prompt_lookup_max")
        seen.add(cfg.knob("method"))
        study.tell(t, 1.0)
    assert seen == set(s.search.methods)
    assert {c.knob("method") for c in b.defaults(s)} == set(s.search.methods)
    assert {c.knob("method") for c in b.grid(s) or []} == set(s.search.methods)


def test_resolution_rules(tmp_path):
    s = space(tmp_path, target=mtp_target(tmp_path))
    b = VLLMBackend()
    with pytest.raises(InfeasibleConfig, match="prompt_lookup_min"):
        b.resolve(TrialConfig.make(None, True, method="ngram", prompt_lookup_max=2, prompt_lookup_min=4), s)
    with pytest.raises(InfeasibleConfig, match="runs no drafter"):
        b.resolve(TrialConfig.make("small", True, method="ngram"), s)
    # vLLM's defaults for what a config leaves out: 5 / 5 for the lookup, as SpeculativeConfig sets them
    eff = b.resolve(TrialConfig.make(None, True, method="ngram"), s)
    assert (eff.knob("prompt_lookup_min"), eff.knob("prompt_lookup_max")) == (5, 5)
    assert b.deploy_method(eff, s) == "ngram"
    assert not b.checks_engagement(eff)
    assert b.checks_engagement(b.resolve(TrialConfig.make("e3", True, method="eagle3"), s))


def test_an_eagle3_head_under_eagle_is_refused(tmp_path):
    s = space(tmp_path, "    eagle: {drafters: [e3]}")
    with pytest.raises(InfeasibleConfig, match="EAGLE-3 head; method eagle"):
        VLLMBackend().resolve(TrialConfig.make("e3", True, method="eagle"), s)
    assert VLLMBackend().defaults(s) == []


def test_mtp_only_on_a_target_with_mtp_layers(tmp_path):
    b = VLLMBackend()
    with_layers = space(tmp_path, "    mtp: {}\n    ngram: {}", target=mtp_target(tmp_path))
    assert b.method_unavailable(with_layers, "mtp") is None
    without = space(tmp_path, "    mtp: {}\n    ngram: {}", target=mtp_target(tmp_path, layers=0))
    assert "MTP not available" in str(b.method_unavailable(without, "mtp"))
    assert [c.knob("method") for c in b.defaults(without)] == ["ngram"]


@pytest.mark.parametrize(
    "methods, message",
    [
        ("    ngram: {drafters: [small]}", "runs no drafter"),
        ("    eagle3: {}", "needs an EAGLE-3 head"),
        ("    ngram: {prompt_lookup_max: [0]}", "prompt_lookup_max"),
        ("    suffix: {}", "unknown method"),
        ("    mtp: {prompt_lookup_min: [1]}", "unknown knob"),
    ],
)
def test_space_errors(tmp_path, methods, message):
    with pytest.raises(SpaceError, match=message):
        space(tmp_path, methods)


# -- found by vLLM 0.33.0's own parser and SpeculativeConfig (tests/servers/test_vllm_parser.py) and read from older
# releases' source


@pytest.mark.parametrize(
    "version, methods, added",
    [
        ("0.10.2", "    mtp: {}", "method mtp (MTP) needs server version 0.11.0 or newer; server.version is 0.10.2"),
        ("0.8.4", "    eagle3: {drafters: [e3]}", "method eagle3 (EAGLE-3) needs server version 0.8.5 or newer"),
        ("0.8.1", "    ngram: {}", "method ngram (n-gram) needs server version 0.8.2 or newer"),
        (
            "0.8.1",
            "    draft_model: {drafters: [small]}",
            "method draft_model (draft model) needs server version 0.8.2",
        ),
        ("0.8.1", "    eagle: {drafters: [e1]}", "method eagle (EAGLE) needs server version 0.8.2 or newer"),
    ],
)
def test_a_version_before_the_release_that_added_a_method_is_refused(tmp_path, version, methods, added):
    p = tmp_path / "s.yaml"
    p.write_text(
        SPACE.format(methods=methods, target="/m/target").replace("launcher:", f'version: "{version}", launcher:')
    )
    with pytest.raises(SpaceError, match=re.escape(added)):
        load_space(p)
    ok = p.read_text().replace(f'version: "{version}"', 'version: "0.33.0"')
    p.write_text(ok)
    load_space(p)  # the release autotune was checked against has them all


def flat_space(tmp_path, target, version=None, methods=("eagle3", "ngram", "mtp")):
    p = tmp_path / "flat.yaml"
    v = f', version: "{version}"' if version else ""
    p.write_text(
        f"name: f\nserver: {{backend: vllm, model_path: {target}{v}}}\n"
        "drafters: [{name: e3, path: /m/eagle3-head, algorithm: EAGLE3}]\n"
        f"search: {{method: [{', '.join(methods)}], num_speculative_tokens: [1, 3]}}\n"
        "benchmark: {prompts: [hello]}\n"
    )
    return load_space(p)


def test_a_flat_space_never_launches_mtp_on_a_target_without_mtp_layers(tmp_path):
    """vLLM 0.33.0 refuses it at startup ("Unsupported speculative method: 'mtp'": the target's config is no MTP
    model); the flat space used to suggest it."""
    b = VLLMBackend()
    without = flat_space(tmp_path, mtp_target(tmp_path, layers=0))
    with pytest.raises(InfeasibleConfig, match="MTP not available for this target"):
        b.resolve(TrialConfig.make("e3", True, method="mtp", num_speculative_tokens=1), without)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        t = study.ask()
        seen.add(b.suggest(t, without).knob("method"))
        study.tell(t, 1.0)
    assert seen == {"eagle3", "ngram"}
    with_layers = flat_space(tmp_path, mtp_target(tmp_path, layers=1))
    eff = b.resolve(TrialConfig.make("e3", True, method="mtp", num_speculative_tokens=2), with_layers)
    assert b.tree.speculative_config(eff, with_layers) == {"method": "mtp", "num_speculative_tokens": 2}


def test_a_flat_space_names_the_release_that_added_a_method(tmp_path):
    b = VLLMBackend()
    old = flat_space(tmp_path, mtp_target(tmp_path), version="0.10.2")
    with pytest.raises(InfeasibleConfig, match=re.escape("method mtp needs vLLM 0.11.0 or newer")):
        b.resolve(TrialConfig.make("e3", True, method="mtp", num_speculative_tokens=1), old)
    older = flat_space(tmp_path, mtp_target(tmp_path), version="0.8.4")
    with pytest.raises(InfeasibleConfig, match=re.escape("method eagle3 needs vLLM 0.8.5 or newer")):
        b.resolve(TrialConfig.make("e3", True, method="eagle3", num_speculative_tokens=1), older)
    assert b._methods_for(older, "e3") == ["ngram"]


def test_a_load_schedule_needs_the_release_with_per_batch_size_draft_lengths(tmp_path):
    b = VLLMBackend()
    sched = {
        "levels": [{"level": 1, "draft": 3}, {"level": 8, "draft": 1}],
        "on_up_to": 8,
    }
    for version, ok in (("0.23.0", False), ("0.24.0", True), (None, True)):
        s = flat_space(tmp_path, mtp_target(tmp_path), version=version)
        argv = b.argv(TrialConfig.make("e3", True, method="eagle3", num_speculative_tokens=3), s, port=1)
        if ok:
            out = b.schedule_launch(s, sched, argv, files_dir=None).argv
            assert "num_speculative_tokens_per_batch_size" in out[out.index("--speculative-config") + 1]
        else:
            with pytest.raises(ValueError, match=re.escape("needs vLLM 0.24.0 or newer; server.version is 0.23.0")):
                b.schedule_launch(s, sched, argv, files_dir=None)


def test_an_sglang_method_study_translates_to_a_flat_vllm_config(tmp_path):
    """An SGLang study with search.methods (its catalogue: standalone, ...) exported as vLLM: the translated
    space has no search.methods, so the draft model resolves as vLLM's draft_model (it raised InfeasibleConfig)."""
    from autotune.backends import get_backend
    from autotune.sim import simulated_space

    repo = Path(__file__).resolve().parents[2]
    sglang = get_backend("sglang")
    deploy = load_space(repo / "spaces" / "methods.yaml")
    c = next(c for c in sglang.defaults(simulated_space(deploy)) if c.knob("method") == "standalone")
    vspace, vconfig = VLLMBackend().translate(deploy, sglang.portable(c, deploy))
    assert not vspace.search.methods
    argv = VLLMBackend().argv(vconfig, vspace, port=8000)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "draft_model",
        "model": "/models/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": c.knob("num_steps"),
        "draft_tensor_parallel_size": 1,
    }


REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "autotune" / "sim" / "scenarios" / "llama31-8b-h100" / "target"
HEAD = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1, "vocab_size": 128256}


def _drafter(tmp_path: Path, name: str, archs: list[str], **extra: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**HEAD, "architectures": archs, **extra}))
    return d


def _space(tmp_path: Path, drafters: dict[str, tuple[Path, str | None]], methods: str | None = None) -> Path:
    lines = [
        "name: vllm-drafters",
        f"server: {{backend: vllm, model_path: {LLAMA}, version: '0.33.0'}}",
        "drafters:",
    ]
    for name, (path, algo) in drafters.items():
        lines.append(f"  - {{name: {name}, path: {path}" + (f", algorithm: {algo}}}" if algo else "}"))
    lines.append("search:")
    lines.append(methods or "  num_speculative_tokens: [2, 3]")
    lines += ["benchmark:", "  prompts: [{id: a, text: hello there}]", "  max_tokens: 32"]
    p = tmp_path / "space.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("method", "archs", "ok"),
    [
        ("eagle", ["LlamaForCausalLM"], True),  # vLLM's EAGLE-1 format (yuhuili/EAGLE-LLaMA3.1-Instruct-8B)
        ("eagle", ["LlamaForCausalLMEagle"], False),  # SGLang's EAGLE-1 format
        ("eagle", ["Qwen2ForCausalLM"], False),  # no EagleQwen2ForCausalLM in vLLM 0.33.0
        ("eagle", ["Qwen2ForCausalLM", "EagleLlamaForCausalLM"], True),  # one loadable is enough
        ("eagle3", ["LlamaForCausalLMEagle3"], True),  # SGLang's EAGLE-3 format
        ("eagle3", ["Eagle3LlamaForCausalLM"], True),
        ("eagle3", ["LlamaForCausalLM"], True),  # -> Eagle3LlamaForCausalLM
        ("eagle3", ["LlamaForCausalLMEagle"], False),
        ("eagle3", ["Qwen2ForCausalLM"], False),
        ("draft_model", ["LlamaForCausalLMEagle"], True),  # not this check's: draft models are not checked
    ],
)
def test_architecture_problem(tmp_path, method, archs, ok):
    d = _drafter(tmp_path, "d", archs)
    why = architecture_problem(method, "d", str(d))
    assert (why is None) == ok, why
    if not ok:
        assert "\n" not in why
        assert f"drafter d ({d / 'config.json'})" in why and f"under method {method}" in why
        assert "vLLM 0.33.0" in why and "LlamaForCausalLM" in why  # what it accepts


@pytest.mark.parametrize(
    "extra",
    [{"model_type": "eagle"}, {"speculators_config": {"algorithm": "eagle"}}, {"auto_map": {"AutoModel": "m.M"}}],
)
def test_formats_vllm_reads_otherwise_are_not_judged(tmp_path, extra):
    d = _drafter(tmp_path, "d", ["LlamaForCausalLMEagle"], **extra)
    assert architecture_problem("eagle", "d", str(d)) is None


def test_unreadable_or_remote_configs_are_not_judged(tmp_path):
    assert architecture_problem("eagle", "d", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B") is None
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text("{not json")
    assert architecture_problem("eagle", "x", str(tmp_path / "x")) is None


def test_the_tables_follow_the_renaming_rule():
    for method, archs in ACCEPTED.items():
        for a in archs:
            assert renamed(method, a) in ACCEPTED["eagle"] | ACCEPTED["eagle3"] | {f"Eagle{a}", f"Eagle3{a}"}
    assert renamed("eagle", "LlamaForCausalLMEagle") == "EagleLlamaForCausalLMEagle"
    assert renamed("eagle3", "LlamaForCausalLMEagle3") == "LlamaForCausalLMEagle3"


def test_validate_refuses_an_sglang_eagle1_head(tmp_path):
    bad = _drafter(tmp_path, "sglang-eagle1", ["LlamaForCausalLMEagle"])
    good = _drafter(tmp_path, "vllm-eagle1", ["LlamaForCausalLM"])
    space = load_space(_space(tmp_path, {"sglang-eagle1": (bad, "EAGLE"), "vllm-eagle1": (good, "EAGLE")}))
    errors = [p for p in check_space(space) if p.is_error]
    assert [p.drafter for p in errors] == ["sglang-eagle1"]
    assert errors[0].field == "drafters[0].path" and "LlamaForCausalLMEagle" in errors[0].message
    b = VLLMBackend()
    with pytest.raises(InfeasibleConfig, match="not loaded by vLLM 0.33.0 under method eagle"):
        b.resolve(TrialConfig.make("sglang-eagle1", method="eagle", num_speculative_tokens=3), space)
    assert b.resolve(TrialConfig.make("vllm-eagle1", method="eagle", num_speculative_tokens=3), space)


def test_a_method_space_checks_each_method_its_drafter_runs(tmp_path):
    bad = _drafter(tmp_path, "e1", ["LlamaForCausalLMEagle"])
    methods = "  methods:\n    eagle: {drafters: [e1], num_speculative_tokens: [2]}\n    ngram: {}"
    space = load_space(_space(tmp_path, {"e1": (bad, "EAGLE")}, methods))
    (err,) = [p for p in check_space(space) if p.is_error]
    assert "under method eagle" in err.message


def test_study_exits_2_and_launches_nothing(tmp_path):
    bad = _drafter(tmp_path, "sglang-eagle1", ["LlamaForCausalLMEagle"])
    space = _space(tmp_path, {"sglang-eagle1": (bad, "EAGLE")})
    studies = tmp_path / "studies"
    run = subprocess.run(
        [sys.executable, "-m", "autotune", "study", str(space), "--studies-dir", str(studies)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "not loaded by vLLM 0.33.0 under method eagle" in run.stdout + run.stderr
    assert not studies.exists() or not any(studies.iterdir())

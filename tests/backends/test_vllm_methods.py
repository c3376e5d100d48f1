"""vLLM's methods as a searched choice (``search.methods``): the ``--speculative-config`` JSON per method (one argv
element), the knobs of each, resolution rules (ngram's lookup bounds, the EAGLE/EAGLE-3 trap, MTP only on a target
with MTP layers), suggest/params round trips and the space validator."""

from __future__ import annotations

import json

import optuna
import pytest

from autotune.backends.vllm import VLLMBackend
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

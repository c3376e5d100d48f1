"""llama.cpp's ``--spec-type`` methods (``search.methods``): the catalogue with comma-list combinations, resolution,
argv per method, the probed binary's list, the engagement rule, Optuna params round trips and the space validator."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.llamacpp_methods import (
    METHODS,
    combination_problem,
    flag_spelling,
    help_flags,
    help_spec_types,
    mtp_unavailable,
)
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig, SpaceError, UserError
from autotune.space import load_space

SAMPLES = Path(__file__).parent / "samples"
HELP = (SAMPLES / "help-0.3.36.txt").read_text()

SPACE = """\
name: m
server: {{backend: llamacpp, model_path: /m/target.gguf, launcher: [/opt/llama-server]}}
drafters:
  - {{name: good, path: /m/draft-good.gguf}}
search:
  methods:
{methods}
benchmark: {{prompts: [hello]}}
"""


def space(tmp_path, methods: str):
    p = tmp_path / "s.yaml"
    p.write_text(SPACE.format(methods=methods))
    return load_space(p)


def probed() -> LlamaCppBackend:
    b = LlamaCppBackend(spelling=flag_spelling(HELP))
    b.spec_types, b.help_flags = help_spec_types(HELP), help_flags(HELP)
    return b


ALL = """\
    draft-simple: {drafters: [good], draft_n_max: [2, 4]}
    ngram-simple: {ngram_simple_size_n: [3], ngram_simple_size_m: [16]}
    ngram-map-k: {ngram_map_k_size_n: [2], ngram_map_k_min_hits: [2]}
    ngram-map-k4v: {}
    ngram-mod: {ngram_mod_n_match: [8], ngram_mod_n_max: [16], ngram_mod_n_min: [2]}
    ngram-cache: {}
    draft-simple,ngram-mod: {drafters: [good], draft_n_max: [4], ngram_mod_n_max: [16], ngram_mod_n_min: [1]}
"""


@pytest.mark.parametrize(
    "method, knobs, drafter, expected",
    [
        (
            "draft-simple",
            {"draft_n_max": 4},
            "good",
            ["--spec-type", "draft-simple", "--spec-draft-model", "/m/draft-good.gguf", "--spec-draft-n-max", "4",
             "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.0"],
        ),
        (
            "ngram-simple",
            {"ngram_simple_size_n": 3},
            None,
            ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "48",
             "--spec-ngram-simple-min-hits", "1"],
        ),
        (
            "ngram-map-k",
            {"ngram_map_k_size_n": 2, "ngram_map_k_min_hits": 2},
            None,
            ["--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "2", "--spec-ngram-map-k-size-m", "48",
             "--spec-ngram-map-k-min-hits", "2"],
        ),
        (
            "ngram-map-k4v",
            {},
            None,
            ["--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-n", "12", "--spec-ngram-map-k4v-size-m", "48",
             "--spec-ngram-map-k4v-min-hits", "1"],
        ),
        (
            "ngram-mod",
            {"ngram_mod_n_match": 8, "ngram_mod_n_max": 16, "ngram_mod_n_min": 2},
            None,
            ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-max", "16",
             "--spec-ngram-mod-n-min", "2"],
        ),
        ("ngram-cache", {}, None, ["--spec-type", "ngram-cache"]),
        (
            "draft-simple,ngram-mod",
            {"draft_n_max": 4, "ngram_mod_n_max": 16, "ngram_mod_n_min": 1},
            "good",
            ["--spec-type", "draft-simple,ngram-mod", "--spec-draft-model", "/m/draft-good.gguf",
             "--spec-draft-n-max", "4", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.0",
             "--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-max", "16", "--spec-ngram-mod-n-min", "1"],
        ),
    ],
)  # fmt: skip
def test_argv_per_method(tmp_path, method, knobs, drafter, expected):
    s = space(tmp_path, ALL)
    b = probed()
    argv = b.argv(TrialConfig.make(drafter, True, method=method, **knobs), s, port=1)
    i = argv.index("--spec-type")
    tail = argv[i:]
    assert sorted(zip(tail[2::2], tail[3::2], strict=False)) == sorted(
        zip(expected[2::2], expected[3::2], strict=False)
    )
    assert tail[:2] == expected[:2]
    assert len(tail) == len(expected)
    # every flag is one the real 0.3.36 binary lists
    assert all(f in help_flags(HELP) for f in tail[0::2])


def test_every_method_of_the_space_is_suggested_and_replays_to_the_same_params(tmp_path):
    s = space(tmp_path, ALL)
    b = probed()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(60):
        t = study.ask()
        cfg = b.suggest(t, s)
        eff = b.resolve(cfg, s)
        assert b.params(eff, s) == t.params
        seen.add(cfg.knob("method"))
        study.tell(t, 1.0)
    assert seen == set(s.search.methods)
    assert {c.knob("method") for c in b.defaults(s)} == set(s.search.methods)
    grid = b.grid(s)
    assert grid is not None and {c.knob("method") for c in grid} == set(s.search.methods)


def test_resolution_rules(tmp_path):
    s = space(tmp_path, ALL)
    b = LlamaCppBackend()
    with pytest.raises(InfeasibleConfig, match="runs no drafter"):
        b.resolve(TrialConfig.make("good", True, method="ngram-mod"), s)
    with pytest.raises(InfeasibleConfig, match="drop every draft"):
        b.resolve(TrialConfig.make(None, True, method="ngram-mod", ngram_mod_n_min=20, ngram_mod_n_max=16), s)
    with pytest.raises(InfeasibleConfig, match="unknown knobs"):
        b.resolve(TrialConfig.make(None, True, method="ngram-simple", draft_n_max=3), s)
    with pytest.raises(InfeasibleConfig, match="not one of method draft-simple's drafters"):
        b.resolve(TrialConfig.make(None, True, method="draft-simple"), s)
    with pytest.raises(InfeasibleConfig, match="must not exceed"):
        b.resolve(TrialConfig.make("good", True, method="draft-simple", draft_n_max=2, draft_n_min=3), s)
    # the server's defaults fill what a config leaves out
    eff = b.resolve(TrialConfig.make(None, True, method="ngram-map-k4v"), s)
    assert eff.knob_dict == {
        "method": "ngram-map-k4v",
        "ngram_map_k4v_size_n": 12,
        "ngram_map_k4v_size_m": 48,
        "ngram_map_k4v_min_hits": 1,
    }
    assert b.deploy_method(eff, s) == "ngram-map-k4v"


def test_combinations_in_the_catalogue():
    assert "draft-simple,ngram-mod" in METHODS and "ngram-mod,ngram-simple" in METHODS
    combo = METHODS["draft-simple,ngram-mod"]
    assert combo.needs_drafter and {"draft_n_max", "ngram_mod_n_max"} <= set(combo.knobs)
    assert "ngram-mod,ngram-mod" not in METHODS and "draft-simple,draft-mtp" not in METHODS
    assert "one draft model" in str(combination_problem("draft-simple,draft-eagle3"))
    assert "unknown" in str(combination_problem("draft-simple,ngram-foo"))
    assert list(METHODS) == [
        "draft-simple", "draft-eagle3", "draft-mtp", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
        "ngram-cache",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "methods, message",
    [
        ("    ngram-mod: {drafters: [good]}", "runs no drafter"),
        ("    draft-simple: {}", "needs a small draft GGUF model"),
        ("    ngram-simple: {ngram_mod_n_max: [4]}", "unknown knob"),
        ("    ngram-mod,ngram-mod: {}", "unknown method"),
        ("    ngram-simple: {ngram_simple_size_n: [0, 2]}", "ngram_simple_size_n"),
    ],
)
def test_space_errors(tmp_path, methods, message):
    with pytest.raises(SpaceError, match=message):
        space(tmp_path, methods)


def test_a_type_the_binary_does_not_list_is_refused_before_launch(tmp_path):
    s = space(tmp_path, "    ngram-mod: {}\n    ngram-simple,ngram-mod: {}")
    b = probed()
    b.spec_types = ("draft-simple", "ngram-simple", "ngram-cache")  # an older build without ngram-mod
    with pytest.raises(UserError, match=r"does not list --spec-type ngram-mod; it lists draft-simple, ngram-simple"):
        b.argv(TrialConfig.make(None, True, method="ngram-simple,ngram-mod"), s, port=1)
    # a build without --spec-type at all
    old = LlamaCppBackend(spelling=flag_spelling((SAMPLES / "help-old.txt").read_text()))
    with pytest.raises(UserError, match="no --spec-type"):
        old.argv(TrialConfig.make(None, True, method="ngram-mod"), s, port=1)


def test_the_help_lists_the_types():
    assert help_spec_types(HELP) == (
        "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple", "ngram-map-k",
        "ngram-map-k4v", "ngram-mod", "ngram-cache",
    )  # fmt: skip
    assert help_spec_types((SAMPLES / "help-old.txt").read_text()) is None


def test_engagement_alarm_only_where_a_draft_type_runs():
    b = LlamaCppBackend()
    assert not b.checks_engagement(TrialConfig.make(None, True, method="ngram-mod"))
    assert not b.checks_engagement(TrialConfig.make(None, True, method="ngram-simple,ngram-mod"))
    assert b.checks_engagement(TrialConfig.make("good", True, method="draft-simple,ngram-mod"))
    assert b.checks_engagement(TrialConfig.make("good", True, draft_n_max=3))  # outside method spaces: as before


def test_mtp_unavailable_on_a_target_without_nextn_layers(tmp_path):
    import dataclasses

    from llamacpp_models import ModelSpec, write_models

    write_models(tmp_path, dataclasses.replace(ModelSpec(), width=64, layers=2, heads=2, kv_heads=2, ffn=128))
    target = str(tmp_path / "target.gguf")
    why = mtp_unavailable(target)
    assert why and "MTP not available" in why
    assert mtp_unavailable(str(tmp_path / "missing.gguf")) is None
    s = space(tmp_path, "    draft-mtp: {}\n    ngram-mod: {}")
    s = dataclasses.replace(s, server=dataclasses.replace(s.server, model_path=target))
    assert LlamaCppBackend().method_unavailable(s, "draft-mtp") == why
    assert [c.knob("method") for c in LlamaCppBackend().defaults(s)] == ["ngram-mod"]

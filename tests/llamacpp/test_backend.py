"""llama.cpp backend: flag spelling, argv, env, resolve, suggest, acceptance parsing. No binary needed."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autotune.backends import get_backend
from autotune.backends.llamacpp import DEFAULT_N_MAX, LlamaCppBackend
from autotune.backends.llamacpp_methods import (
    NEW_SPELLING,
    cached_server_path,
    find_llama_server,
    flag_spelling,
    help_flags,
)
from autotune.backends.streams import accept_length, metrics_delta, parse_prometheus, timings_accept_length
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.space import Choices, FloatRange, IntRange

from .conftest import make_space

SAMPLES = Path(__file__).with_name("samples")

#: the flag names of llama-server builds before the ``--spec-*`` rename
OLD_SPELLING: dict[str, str | None] = {
    "draft_model": "--model-draft",
    "spec_type": None,
    "draft_n_max": "--draft-max",
    "draft_n_min": "--draft-min",
    "draft_p_min": "--draft-p-min",
    "no_webui": None,
    "parallel": "-np",
}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def new_backend() -> LlamaCppBackend:
    return LlamaCppBackend(spelling=NEW_SPELLING)


# -- flag spelling ----------------------------------------------------------------------------------


def test_spelling_of_the_built_release_from_its_recorded_help():
    spelling = flag_spelling(sample("help-0.3.36.txt"))
    assert spelling["draft_n_max"] == "--spec-draft-n-max"
    assert spelling["draft_n_min"] == "--spec-draft-n-min"
    assert spelling["draft_p_min"] == "--spec-draft-p-min"
    assert spelling["spec_type"] == "--spec-type"
    assert spelling["draft_model"] == "--spec-draft-model"
    assert spelling["no_webui"] == "--no-ui"  # the current name: this release logs --no-webui as deprecated
    assert spelling["parallel"] == "-np"


def test_removed_arguments_are_not_offered():
    flags = help_flags(sample("help-0.3.36.txt"))
    # listed in --help, but as "the argument has been removed" (exit 1 when used)
    assert "--draft-max" not in flags and "--draft-min" not in flags
    assert "--draft-p-min" in flags  # still an alias of --spec-draft-p-min


def test_spelling_of_an_older_release():
    spelling = flag_spelling(sample("help-old.txt"))
    assert spelling["draft_n_max"] == "--draft-max"
    assert spelling["draft_n_min"] == "--draft-min"
    assert spelling["draft_p_min"] == "--draft-p-min"
    assert spelling["spec_type"] is None
    assert spelling["draft_model"] == "--model-draft"


@pytest.mark.parametrize("text", ["", "usage: something else\n  --foo N   does foo\n", "\x00\xff garbage"])
def test_unrecognised_help_gives_the_newest_spelling(text):
    assert flag_spelling(text) == NEW_SPELLING


# -- argv and env -----------------------------------------------------------------------------------


def test_baseline_argv_has_no_speculative_flags():
    space = make_space()
    argv = new_backend().argv(TrialConfig.baseline(), space, port=31234)
    assert argv[:8] == [
        "/opt/llama/llama-server",
        "-m",
        "/m/target.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "31234",
        "--metrics",
    ]
    assert not [a for a in argv if a.startswith("--spec") or a in ("-md", "--model-draft")]
    assert argv[argv.index("-np") + 1] == "1"
    assert int(argv[argv.index("-c") + 1]) >= 2048
    assert all(isinstance(a, str) for a in argv)


def test_drafter_argv_always_names_the_spec_type():
    space = make_space()
    cfg = TrialConfig.make("good", draft_n_max=8, draft_n_min=2, draft_p_min=0.5)
    argv = new_backend().argv(cfg, space, port=1)
    tail = argv[argv.index("--spec-type") :]
    assert tail == [
        "--spec-type", "draft-simple",
        "--spec-draft-model", "/m/draft-good.gguf",
        "--spec-draft-n-max", "8",
        "--spec-draft-n-min", "2",
        "--spec-draft-p-min", "0.5",
    ]  # fmt: skip


def test_old_spelling_argv():
    space = make_space()
    backend = LlamaCppBackend(spelling=flag_spelling(sample("help-old.txt")))
    argv = backend.argv(TrialConfig.make("bad", draft_n_max=4), space, port=1)
    assert "--spec-type" not in argv
    assert argv[argv.index("--model-draft") + 1] == "/m/draft-bad.gguf"
    assert argv[argv.index("--draft-max") + 1] == "4"
    assert argv[argv.index("--draft-min") + 1] == "0"
    assert argv[argv.index("--draft-p-min") + 1] == "0.0"
    with pytest.raises(InfeasibleConfig, match="--spec-type"):
        backend.argv(TrialConfig.make("bad", spec_type="draft-eagle3", draft_n_max=4), space, port=1)


def test_ngram_types_take_no_draft_model():
    space = make_space(knobs={"spec_type": Choices(("ngram-simple",)), "draft_n_max": IntRange(1, 4)})
    argv = new_backend().argv(TrialConfig.make("good", spec_type="ngram-simple", draft_n_max=2), space, port=1)
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert "--spec-draft-model" not in argv


def test_extra_args_come_last_and_override_context_and_threads():
    space = make_space(extra_args=("-c", "8192", "--threads", "1", "--no-warmup"))
    argv = new_backend().argv(TrialConfig.baseline(), space, port=1)
    assert argv[-5:] == ["-c", "8192", "--threads", "1", "--no-warmup"]
    assert argv.count("-c") == 1 and "-t" not in argv


def test_context_fits_prompt_and_max_tokens():
    space = make_space(max_tokens=4000, prompts=("x" * 3000,))
    assert LlamaCppBackend.context_size(space) >= 7000


def test_no_webui_only_when_the_binary_has_it():
    space = make_space()
    with_ui = LlamaCppBackend(spelling=flag_spelling(sample("help-0.3.36.txt")))
    argv = with_ui.argv(TrialConfig.baseline(), space, port=1)
    assert "--no-ui" in argv and "--no-webui" not in argv
    old_argv = LlamaCppBackend(spelling=OLD_SPELLING).argv(TrialConfig.baseline(), space, port=1)
    assert "--no-webui" not in old_argv and "--no-ui" not in old_argv
    # a release that only knows the older name gets that one
    older = sample("help-0.3.36.txt").replace("--ui,  --webui, --no-ui, --no-webui", "--webui, --no-webui")
    older_argv = LlamaCppBackend(spelling=flag_spelling(older)).argv(TrialConfig.baseline(), space, port=1)
    assert "--no-webui" in older_argv and "--no-ui" not in older_argv


def test_cuda_graphs_off_is_an_environment_variable():
    space = make_space(env={"OMP_NUM_THREADS": "2"})
    b = new_backend()
    assert b.env(TrialConfig.baseline(cuda_graph=True), space) == {"OMP_NUM_THREADS": "2"}
    assert b.env(TrialConfig.baseline(cuda_graph=False), space) == {
        "OMP_NUM_THREADS": "2",
        "GGML_CUDA_DISABLE_GRAPHS": "1",
    }
    argv_on = b.argv(TrialConfig.baseline(cuda_graph=True), space, port=1)
    assert argv_on == b.argv(TrialConfig.baseline(cuda_graph=False), space, port=1)


def test_default_launcher_search_order(tmp_path, monkeypatch):
    exe = tmp_path / "my-llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("AUTOTUNE_LLAMA_SERVER", str(exe))
    assert find_llama_server() == str(exe)
    space = make_space(launcher=())
    assert new_backend().argv(TrialConfig.baseline(), space, port=1)[0] == str(exe)
    monkeypatch.setenv("AUTOTUNE_LLAMA_SERVER", str(tmp_path / "missing"))
    assert find_llama_server() is None
    monkeypatch.delenv("AUTOTUNE_LLAMA_SERVER")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    assert cached_server_path() == tmp_path / "cache" / "llama-server-0.3.36" / "llama-server"
    assert find_llama_server() is None
    assert new_backend().argv(TrialConfig.baseline(), space, port=1)[0] == "llama-server"
    cached_server_path().parent.mkdir(parents=True)
    cached_server_path().write_text("#!/bin/sh\n")
    cached_server_path().chmod(0o755)
    assert find_llama_server() == str(cached_server_path())


def test_probe_reads_help_once_per_binary(tmp_path):
    calls = tmp_path / "calls"
    exe = tmp_path / "llama-server"
    help_file = SAMPLES / "help-old.txt"
    exe.write_text(f'#!/bin/sh\necho x >> "{calls}"\ncat "{help_file}"\n')
    exe.chmod(0o755)
    space = make_space(launcher=(str(exe),))
    first = LlamaCppBackend()
    first.probe(space)  # an explicit step: argv never runs the server
    argv = first.argv(TrialConfig.make("good", draft_n_max=5), space, port=1)
    assert "--draft-max" in argv
    second = LlamaCppBackend()
    second.probe(space)
    assert second.spelling == first.spelling
    assert calls.read_text().count("x") == 1


def test_a_build_whose_spec_type_names_only_model_free_types_drafts_with_the_model_alone(tmp_path):
    """llama-cpp-python 0.3.23: ``--spec-*`` names, but ``--spec-type [none|ngram-...]`` takes
    no draft type (it would exit "unknown speculative decoding type without draft model"): draft-simple is the
    draft model alone; n-gram types keep ``--spec-type``; other draft types this build cannot run."""
    from autotune.backends.llamacpp_methods import help_spec_types

    text = sample("help-0.3.23.txt")  # `llama-server --help` of llama-cpp-python 0.3.23's build
    listed = help_spec_types(text)
    assert listed == ("ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")
    assert help_spec_types(sample("help-0.3.36.txt"))[:2] == ("draft-simple", "draft-eagle3")  # the comma form
    exe = tmp_path / "llama-server-0.3.23"
    exe.write_text(f'#!/bin/sh\ncat "{SAMPLES / "help-0.3.23.txt"}"\n')
    exe.chmod(0o755)
    space = make_space(launcher=(str(exe),), knobs={"draft_n_max": IntRange(1, 16)})
    b = LlamaCppBackend()
    b.probe(space)
    assert b.spec_types == listed
    argv = b.argv(TrialConfig.make("good", draft_n_max=5, draft_p_min=0.5), space, port=1)
    assert "--spec-type" not in argv
    assert argv[argv.index("--spec-draft-model") + 1] == "/m/draft-good.gguf"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "5"
    assert argv[argv.index("--spec-draft-p-min") + 1] == "0.5"
    assert "--no-webui" in argv  # this build has no --no-ui
    cfg = TrialConfig.make("good", spec_type="ngram-mod", draft_n_max=5)
    types = make_space(
        launcher=(str(exe),),
        knobs={"draft_n_max": IntRange(1, 16), "spec_type": Choices(("draft-simple", "ngram-mod", "draft-eagle3"))},
    )
    argv = b.argv(cfg, types, port=1)
    assert argv[argv.index("--spec-type") + 1] == "ngram-mod"
    with pytest.raises(InfeasibleConfig, match="draft-eagle3"):
        b.argv(TrialConfig.make("good", spec_type="draft-eagle3", draft_n_max=5), types, port=1)


def test_argv_never_probes_and_export_probes_first(tmp_path):
    from autotune.export_bundle import launch_argv

    calls = tmp_path / "calls"
    exe = tmp_path / "llama-server-old"
    exe.write_text(f'#!/bin/sh\necho x >> "{calls}"\ncat "{SAMPLES / "help-old.txt"}"\n')
    exe.chmod(0o755)
    space = make_space(launcher=(str(exe),))
    b = LlamaCppBackend()
    assert b.probe_before_argv
    assert "--spec-draft-n-max" in b.argv(TrialConfig.make("good", draft_n_max=5), space, port=1)
    assert not calls.exists() and b.spelling is None
    assert "--draft-max" in launch_argv(space, b, TrialConfig.make("good", draft_n_max=5))
    assert calls.read_text().count("x") == 1


def test_probe_of_a_missing_binary_keeps_the_newest_spelling(tmp_path):
    space = make_space(launcher=(str(tmp_path / "nope"),))
    b = LlamaCppBackend()
    b.probe(space, timeout_s=5)
    assert b.spelling is None
    assert "--spec-draft-n-max" in b.argv(TrialConfig.make("good"), space, port=1)


# -- resolve ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({}, {"spec_type": "draft-simple", "draft_n_max": 3, "draft_n_min": 0, "draft_p_min": 0.0}),
        ({"draft_n_max": 8}, {"spec_type": "draft-simple", "draft_n_max": 8, "draft_n_min": 0, "draft_p_min": 0.0}),
        (
            {"draft_n_max": 4, "draft_n_min": 4, "draft_p_min": 1.0, "spec_type": "DRAFT-SIMPLE"},
            {"spec_type": "draft-simple", "draft_n_max": 4, "draft_n_min": 4, "draft_p_min": 1.0},
        ),
    ],
)
def test_resolve_fills_server_defaults(knobs, expected):
    eff = new_backend().resolve(TrialConfig.make("good", **knobs), make_space())
    assert eff.knob_dict == expected


@pytest.mark.parametrize(
    ("knobs", "match"),
    [
        ({"draft_n_max": 2, "draft_n_min": 3}, "must not exceed"),
        ({"draft_n_max": 0}, "at least 1"),
        ({"draft_n_min": -1}, "at least 0"),
        ({"draft_p_min": 1.5}, r"\[0, 1\]"),
        ({"draft_p_min": -0.1}, r"\[0, 1\]"),
        ({"spec_type": "none"}, "baseline is drafter 'none'"),
        ({"spec_type": "medusa"}, "spec_type must be one of"),
        ({"num_steps": 3}, "unknown llama.cpp knobs"),
    ],
)
def test_resolve_rejects(knobs, match):
    with pytest.raises(InfeasibleConfig, match=match):
        new_backend().resolve(TrialConfig.make("good", **knobs), make_space())


def test_resolve_unknown_drafter_and_baseline():
    b = new_backend()
    with pytest.raises(InfeasibleConfig, match="not in the space"):
        b.resolve(TrialConfig.make("other"), make_space())
    assert b.resolve(TrialConfig.baseline(False), make_space()) == TrialConfig.baseline(False)


def test_forced_algorithm_is_the_default_spec_type():
    space = make_space(drafters=(("e3", "/m/e3.gguf", "draft-eagle3"),))
    assert new_backend().resolve(TrialConfig.make("e3"), space).knob("spec_type") == "draft-eagle3"


# -- suggest ----------------------------------------------------------------------------------------

SPACES = {
    "n_max only": {"draft_n_max": IntRange(1, 16)},
    "all knobs": {
        "draft_n_max": IntRange(1, 12),
        "draft_n_min": IntRange(0, 6),
        "draft_p_min": FloatRange(0.0, 0.9),
        "spec_type": Choices(("draft-simple", "ngram-simple")),
    },
    "choices": {
        "draft_n_max": Choices((2, 4, 8)),
        "draft_n_min": Choices((0, 3, 5)),
        "draft_p_min": Choices((0.0, 0.5)),
    },
    "nothing searched": {},
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_suggest_only_reaches_feasible_configs_with_stable_param_names(name):
    space = make_space(knobs=SPACES[name], cuda_graph=(True, False))
    b = new_backend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    dists: dict[str, optuna.distributions.BaseDistribution] = {}
    seen_baseline = seen_spec = False
    for _ in range(120):
        trial = study.ask()
        cfg = b.suggest(trial, space)
        assert b.resolve(cfg, space) == cfg  # already effective: nothing to rewrite
        if cfg.is_baseline:
            seen_baseline = True
            assert set(trial.params) == {"drafter", "cuda_graph"}
        else:
            seen_spec = True
            assert cfg.knob("draft_n_min") <= cfg.knob("draft_n_max")
            assert b.params(cfg, space) == trial.params
        for k, d in trial.distributions.items():
            assert dists.setdefault(k, d) == d, f"parameter {k} changed distribution"
        study.tell(trial, 1.0)
    # the sampler never proposes the baseline: the study enqueues it once per CUDA-graph setting
    assert not seen_baseline and seen_spec


def test_n_min_values_above_n_max_get_their_own_parameter_name():
    space = make_space(knobs={"draft_n_max": Choices((2, 8)), "draft_n_min": Choices((0, 3, 5))})
    b = new_backend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    names = set()
    for _ in range(60):
        t = study.ask()
        cfg = b.suggest(t, space)
        names.update(k for k in t.params if k.startswith("draft_n_min"))
        if not cfg.is_baseline and cfg.knob("draft_n_max") == 2:
            assert "draft_n_min_le2" in t.params and cfg.knob("draft_n_min") == 0
        study.tell(t, 1.0)
    assert names == {"draft_n_min", "draft_n_min_le2"}


def test_enqueued_params_reproduce_the_config():
    space = make_space(knobs=SPACES["all knobs"])
    b = new_backend()
    cfg = TrialConfig.make("bad", spec_type="draft-simple", draft_n_max=7, draft_n_min=2, draft_p_min=0.25)
    study = optuna.create_study()
    study.enqueue_trial(b.params(cfg, space))
    assert b.suggest(study.ask(), space) == b.resolve(cfg, space)


def test_defaults_are_the_server_defaults_inside_the_space():
    b = new_backend()
    got = b.defaults(make_space(knobs={"draft_n_max": IntRange(1, 16)}))
    assert [c.drafter for c in got] == ["good", "bad"]
    assert all(c.knob("draft_n_max") == DEFAULT_N_MAX and c.knob("draft_p_min") == 0.0 for c in got)
    got = b.defaults(make_space(knobs={"draft_n_max": Choices((6, 10)), "draft_p_min": FloatRange(0.2, 0.8)}))
    assert got[0].knob_dict == {"draft_n_max": 6, "draft_n_min": 0, "draft_p_min": 0.2, "spec_type": "draft-simple"}


@pytest.mark.parametrize("name", ["n_max only", "choices", "nothing searched"])
def test_the_grid_is_every_point_suggest_can_draw_and_each_enqueues_as_itself(name):
    space = make_space(knobs=SPACES[name], cuda_graph=(True, False))
    b = new_backend()
    grid = b.grid(space)
    assert grid is not None and len({c.key() for c in grid}) == len(grid)
    for cfg in grid:  # each one launches as drawn: effective, feasible, and its params give it back
        assert b.resolve(cfg, space) == cfg
        assert b.suggest(optuna.trial.FixedTrial(b.params(cfg, space)), space) == cfg
    # every config the sampler can reach is in it
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    keys = {c.key() for c in grid}
    for _ in range(150):
        t = study.ask()
        assert b.suggest(t, space).key() in keys
        study.tell(t, 1.0)
    expected = {
        "n_max only": 2 * 2 * 16,  # drafters x graphs x n_max 1..16 (n_min 0, p_min 0.0: the server's)
        "choices": 2 * 2 * (1 + 2 + 3) * 2,  # n_min 0/3/5 <= n_max: 1 at n_max 2, 2 at 4, 3 at 8; p_min 2 values
        "nothing searched": 2 * 2,
    }[name]
    assert len(grid) == expected


def test_no_grid_over_a_float_range_of_draft_p_min():
    """A float range is not a finite grid: the search leaves it to the sampler (no design, no surrogate picks)."""
    assert new_backend().grid(make_space(knobs=SPACES["all knobs"])) is None


def test_registered_under_its_name():
    b = get_backend("llamacpp")
    assert isinstance(b, LlamaCppBackend)
    assert b.health_path == "/health" and b.info_path == "/props" and b.metrics_path == "/metrics"


# -- reading the server -----------------------------------------------------------------------------


def test_request_is_openai_streaming_with_usage_and_no_prompt_cache():
    path, body = new_backend().request("Hi", max_tokens=32, temperature=0.0)
    assert path == "/v1/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["prompt"] == "Hi" and body["max_tokens"] == 32 and body["temperature"] == 0.0
    assert body["cache_prompt"] is False


def test_recorded_stream_gives_tokens_and_acceptance():
    b = new_backend()
    chunks = [json.loads(line) for line in sample("stream-good.jsonl").splitlines() if line.strip()]
    infos = [b.parse_chunk(c) for c in chunks]
    text = "".join(i.text or "" for i in infos)
    assert text
    final = [i for i in infos if i.final]
    assert final and final[-1].completion_tokens == 64
    accepts = [i.accept_length for i in infos if i.accept_length is not None]
    assert accepts and accepts[-1] > 2.0
    timings = next(c["timings"] for c in reversed(chunks) if "timings" in c)
    predicted, accepted = timings["predicted_n"], timings["draft_n_accepted"]
    assert timings_accept_length(timings) == pytest.approx(predicted / (predicted - accepted))


@pytest.mark.parametrize(
    ("timings", "length"),
    [
        ({"predicted_n": 64, "draft_n": 60, "draft_n_accepted": 48}, 4.0),
        ({"predicted_n": 64, "draft_n": 90, "draft_n_accepted": 0}, 1.0),
        ({"predicted_n": 64}, 1.0),  # no draft_n: nothing was drafted
        ({"predicted_n": 0}, None),
    ],
)
def test_timings(timings, length):
    assert timings_accept_length(timings) == (pytest.approx(length) if length is not None else None)


def test_accept_length_edges():
    assert accept_length(10, 10) is None and accept_length(None, 1) is None and accept_length(10, -1) is None


def test_error_and_usage_chunks():
    b = new_backend()
    assert b.parse_chunk({"error": {"message": "boom"}}).error == "boom"
    usage = b.parse_chunk({"choices": [], "usage": {"completion_tokens": 5, "prompt_tokens": 3}})
    assert usage.final and usage.completion_tokens == 5 and usage.accept_length is None


def test_acceptance_from_metrics_deltas():
    b = new_backend()
    before = parse_prometheus(sample("metrics-before.txt"))
    after = parse_prometheus(sample("metrics-after.txt"))
    d = metrics_delta(before, after)
    assert d.drafts > 0 and d.accepted > 0
    got = b.acceptance_from_metrics(before, after)
    assert got == pytest.approx(d.predicted / (d.predicted - d.accepted))
    no_tokens = {k: v for k, v in after.items() if "tokens_predicted" not in k}
    assert b.acceptance_from_metrics(before, no_tokens) == pytest.approx(1 + d.accepted / d.drafts)
    assert b.acceptance_from_metrics(after, after) is None


def test_read_effective_from_recorded_props():
    b = new_backend()
    eff = b.read_effective(json.loads(sample("props.json")))
    assert eff["total_slots"] == 1 and eff["n_ctx"] >= 2048
    assert eff["reported_spec_types"] == "none"  # wrong while speculating: never compared
    cfg = b.resolve(TrialConfig.make("good", draft_n_max=8), make_space())
    assert b.check_effective(cfg, eff) == []
    assert b.check_effective(cfg, {"draft_n_max": 3}) == ["draft_n_max: launched 8, server runs 3"]


def test_the_tiny_study_space_loads_and_suggests():
    from autotune.space import load_space

    repo = Path(__file__).resolve().parents[2]
    space = load_space(str(repo / "spaces" / "llamacpp-tiny.yaml"))
    assert space.server.backend == "llamacpp"
    assert {d.name for d in space.drafters} == {"good", "bad"}
    b = new_backend()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drafters = set()
    for _ in range(30):
        t = study.ask()
        cfg = b.suggest(t, space)
        drafters.add(cfg.drafter)
        b.argv(cfg, space, port=30080)
        study.tell(t, 1.0)
    assert drafters == {"good", "bad"}  # never the baseline: the study enqueues it

"""SGLang's methods as a searched choice: the space, the Optuna encoding, SGLang 0.5.23's resolution rules, argv
as the simulator's SGLang parser reads it, and the per-method results."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import optuna
import pytest

from autotune.backends import get_backend
from autotune.backends.sglang_methods import mtp_unavailable
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig, SpaceError
from autotune.sim import parse_launch_args, simulated_space
from autotune.sim.runner import sim_argv
from autotune.space import load_space
from autotune.space.model import MethodSpec
from autotune.study import methods as per_method

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "spaces" / "methods.yaml"
SCENARIOS = ROOT / "autotune" / "sim" / "scenarios"


@pytest.fixture(scope="module")
def space():
    return simulated_space(load_space(SPACE))


@pytest.fixture(scope="module")
def backend():
    return get_backend("sglang")


def _write(tmp_path: Path, search: str, version: str = "0.5.23") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        f"""name: t
server: {{backend: sglang, model_path: /m, version: "{version}"}}
drafters:
  - {{name: head, path: /d, algorithm: EAGLE3}}
search:
{search}
benchmark: {{prompts: [hello]}}
""",
        encoding="utf-8",
    )
    return p


def test_shipped_space_loads_with_its_methods():
    s = load_space(SPACE)
    assert list(s.search.methods) == ["eagle3", "mtp", "ngram", "standalone", "adaptive"]
    assert s.search.methods["ngram"].drafters == ()
    assert s.searched_drafters() == ("eagle3-llama31-8b", "llama32-1b")


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ("  methods: {nextn: {}}", "unknown method"),
        ("  methods: {ngram: {drafters: [head]}}", "runs no drafter"),
        ("  methods: {eagle3: {num_steps: [1, 2]}}", "needs an EAGLE-3 head"),
        ("  methods: {ngram: {topk: [1]}}", "unknown knob"),
        ("  methods: {ngram: {}}\n  num_steps: [1]", "given per method"),
        ("  methods: {eagle3: {drafters: [nope]}}", "drafters' names"),
    ],
)
def test_bad_method_sections_are_refused(tmp_path, search, message):
    with pytest.raises(SpaceError, match=message):
        load_space(_write(tmp_path, search))


def test_a_version_without_adaptive_is_refused_naming_the_version(tmp_path):
    with pytest.raises(SpaceError, match=r"needs server version 0\.5\.23 or newer; server.version is 0\.5\.20"):
        load_space(_write(tmp_path, "  methods: {adaptive: {drafters: [head]}}", version="0.5.20"))


def test_mtp_needs_the_targets_mtp_layers():
    assert "not available" in mtp_unavailable(str(SCENARIOS / "llama31-8b-h100" / "target"))
    assert mtp_unavailable(str(SCENARIOS / "deepseek-v3-mtp-h200" / "target")) is None
    assert mtp_unavailable("org/hub-id") is None  # unknown here: the server decides


def test_model_free_configs_are_not_baselines():
    assert not TrialConfig.make(None, True, method="ngram").is_baseline
    assert TrialConfig.baseline().is_baseline


def test_ngram_resolves_as_sglang_does(space, backend):
    eff = backend.resolve(TrialConfig.make(None, True, method="ngram", num_draft_tokens=16, max_bfs_breadth=4), space)
    # _handle_ngram: topk := max BFS breadth, steps := num_draft_tokens // topk; the other knobs at their defaults
    assert (eff.knob("topk"), eff.knob("num_steps"), eff.knob("min_bfs_breadth"), eff.knob("match_type")) == (
        4,
        4,
        1,
        "BFS",
    )
    args = parse_launch_args(sim_argv(backend.argv(eff, space, port=1)))
    assert (args.speculative_eagle_topk, args.speculative_num_steps, args.speculative_num_draft_tokens) == (4, 4, 16)
    assert backend.check_effective(eff, backend.read_effective(args.server_args())) == []


def test_traps_are_refused_before_launch(space, backend):
    with pytest.raises(InfeasibleConfig, match="not available"):
        backend.resolve(TrialConfig.make(None, True, method="mtp", num_steps=3, topk=1, num_draft_tokens=4), space)
    methods = {**space.search.methods, "adaptive": MethodSpec("adaptive", drafters=("llama32-1b",))}
    odd = dataclasses.replace(space, search=dataclasses.replace(space.search, methods=methods))
    with pytest.raises(InfeasibleConfig, match="adaptive needs an EAGLE"):  # SGLang would switch it off silently
        backend.resolve(TrialConfig.make("llama32-1b", True, method="adaptive"), odd)
    with pytest.raises(InfeasibleConfig, match="not one of method"):
        backend.resolve(TrialConfig.make("llama32-1b", True, method="eagle3", num_steps=3, topk=1), space)


def test_eagle3_head_under_eagle_is_refused(tmp_path, backend):
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}), encoding="utf-8")
    p = _write(tmp_path, "  methods: {eagle: {drafters: [head]}}").read_text().replace("path: /d", f"path: {head}")
    p = p.replace(", algorithm: EAGLE3", "")
    (tmp_path / "s2.yaml").write_text(p, encoding="utf-8")
    s = load_space(tmp_path / "s2.yaml")
    with pytest.raises(InfeasibleConfig, match="EAGLE-3 head"):
        backend.resolve(TrialConfig.make("head", True, method="eagle", num_steps=3, topk=1), s)


def test_every_default_config_launches_as_resolved(space, backend, tmp_path):
    """Each method's server default per drafter: argv parses with the simulator's SGLang 0.5.23 rules to the same
    effective config, the adaptive config file is read and adaptive stays on, and the server reports it engaged."""
    defaults = backend.defaults(space)
    assert sorted({c.knob("method") for c in defaults}) == ["adaptive", "eagle3", "ngram", "standalone"]
    for eff in defaults:
        files = backend.files(eff, space)
        for name, text in files.items():
            (tmp_path / name).write_text(text, encoding="utf-8")
        argv = backend.argv(eff, space, port=1, files_dir=str(tmp_path))
        args = parse_launch_args(sim_argv(argv))
        assert args.speculative_adaptive == (eff.knob("method") == "adaptive")
        assert backend.check_effective(eff, backend.read_effective(args.server_args())) == [], eff.label()


def test_suggest_and_params_agree_on_every_grid_point(space, backend):
    grid = backend.grid(space)
    assert {c.knob("method") for c in grid} == {"adaptive", "eagle3", "ngram", "standalone"}
    study = optuna.create_study()
    for cfg in grid[:: max(1, len(grid) // 40)]:
        study.enqueue_trial(backend.params(cfg, space))
        trial = study.ask()
        assert backend.resolve(backend.suggest(trial, space), space) == cfg
        study.tell(trial, 1.0)


def test_the_summary_names_the_winner_and_sets_adaptive_beside_static():
    info = {
        "methods": {
            "eagle3": {"label": "EAGLE-3", "adaptive": False, "unavailable": None},
            "mtp": {"label": "MTP", "adaptive": False, "unavailable": "MTP not available for this target: x"},
            "ngram": {"label": "n-gram", "adaptive": False, "unavailable": None},
            "adaptive": {"label": "adaptive", "adaptive": True, "unavailable": None},
        },
        "categories": ["code", "chat"],
    }

    def row(n, method, drafter, speedup, accept):
        return {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "config": {"method": method, "drafter": drafter},
            "speedup_vs_fastest": speedup,
            "accept_length": accept,
            "prompts_measured": 2,
            "gpu_s": 100.0,
        }

    rows = [row(1, "eagle3", "h", 1.1, 3.0), row(2, "ngram", None, 1.3, 2.0), row(3, "adaptive", "h", 1.2, 2.5)]
    ci = {"point": 1.31, "low": 1.24, "high": 1.38}
    confirmed = [{"trial": 2, "config": rows[1]["config"], "deploy_speedup_ci": ci, "speedup_ci": ci}]
    out = per_method.summarize(
        info, rows, confirmed, {"config": rows[1]["config"]}, "speculation-wins", {2: [2.0, 1.0], 1: [1.0, 1.2]}
    )
    assert out["winner"] == "ngram"
    assert out["text"].startswith("n-gram wins on this prompt set: 1.31x [1.24, 1.38]; ")
    assert "MTP: MTP not available for this target" in out["text"]
    assert out["adaptive"][0]["static_method"] == "eagle3"  # the same drafter's static config
    # one EAGLE-3 config measured: never called tuned static
    assert out["adaptive"][0]["text"] == (
        "adaptive 1.20x (1 config measured) vs static 1.10x (EAGLE-3, 1 config measured: fewer than 3, not a tuned "
        "static config)"
    )
    assert not out["adaptive"][0]["static_tuned"]
    eagle3 = next(e for e in out["methods"] if e["method"] == "eagle3")
    assert eagle3["budget"]["trials_share"] == pytest.approx(1 / 3) and eagle3["budget"]["gpu_s"] == 100.0
    assert eagle3["budget"]["text"] == "1 config measured; 1 trials (33% of the search's), 0.03 h of server time (33%)"
    # three EAGLE-3 configs measured (one stopped early counts; a duplicate and one never launched do not): tuned
    more = [
        row(4, "eagle3", "h", 1.0, 3.0),
        {**row(5, "eagle3", "h", 0.9, 3.0), "state": "PRUNED"},
        {**row(6, "eagle3", "h", 1.1, 3.0), "duplicate_of": 1},
        {**row(7, "eagle3", "h", None, None), "state": "PRUNED", "prompts_measured": 0},
    ]
    tuned = per_method.summarize(info, rows + more, confirmed, {"config": rows[1]["config"]}, "speculation-wins")
    assert tuned["adaptive"][0]["static_tuned"]
    assert tuned["adaptive"][0]["text"] == (
        "adaptive 1.20x (1 config measured) vs tuned static 1.10x (EAGLE-3, 3 configs measured)"
    )
    eagle3 = next(e for e in tuned["methods"] if e["method"] == "eagle3")
    assert (eagle3["configs_measured"], eagle3["trials"], eagle3["budget"]["trials_share"]) == (3, 4, 4 / 6)
    assert out["categories"]["ngram"] == {"chat": 1.0, "code": 2.0}
    # ranking by throughput, never by acceptance: EAGLE-3's higher acceptance does not win
    lost = per_method.summarize(info, rows, confirmed, None, "inconclusive")
    assert lost["winner"] is None and lost["text"].startswith("no method wins")


def test_methods_whose_confirmed_bests_are_within_the_tie_are_named_together():
    """Two methods' confirmed speedups within ``METHOD_TIE`` (2%) of each other: the summary names both, the
    recommended one first ("n-gram and EAGLE-3 tie on this prompt set (within 2%: either; ..."); one 3% behind, or
    one only measured in the search, does not tie (#46: most wrong-method studies were pairs 0.996-0.999 apart)."""
    info = {
        "methods": {
            "eagle3": {"label": "EAGLE-3", "adaptive": False, "unavailable": None},
            "ngram": {"label": "n-gram", "adaptive": False, "unavailable": None},
            "adaptive": {"label": "adaptive", "adaptive": True, "unavailable": None},
        },
        "categories": ["code", "chat"],
    }
    rows = [
        {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "config": {"method": m, "drafter": None},
            "speedup_vs_fastest": 1.0,
            "accept_length": 2.0,
            "prompts_measured": 2,
            "gpu_s": 1.0,
        }
        for n, m in ((1, "ngram"), (2, "eagle3"), (3, "adaptive"))
    ]

    def summary(points: dict[int, float]) -> dict:
        confirmed = [
            {"trial": n, "config": rows[n - 1]["config"], "speedup_ci": {"point": p, "low": p - 0.1, "high": p + 0.1}}
            for n, p in points.items()
        ]
        return per_method.summarize(info, rows, confirmed, {"config": rows[0]["config"]}, "speculation-wins")

    tie = summary({1: 1.50, 2: 1.48, 3: 1.40})
    assert tie["winner"] == "ngram" and tie["tied"] == ["ngram", "eagle3"]
    assert tie["text"].startswith("n-gram and EAGLE-3 tie on this prompt set (within 2%: either; n-gram recommended): ")
    apart = summary({1: 1.50, 2: 1.455})  # 3% behind
    assert apart["tied"] == [] and apart["text"].startswith("n-gram wins on this prompt set: ")
    unconfirmed = summary({1: 1.50})  # EAGLE-3's figure is its search one
    assert unconfirmed["tied"] == []


def test_methods_confirmation_did_not_tell_apart_tie_even_when_their_points_are_further_apart():
    """#46: the race drops a config at 80% one-sided, enough to stop spending starts on it but not to say which
    method is faster. Two methods whose confirmed points are 2.9% apart tie when the paired interval (within each
    round, the start-to-start noise as prior, the verdict's confidence) of the other's tok/s over the winner's
    reaches 1; rounds that separate them (a steady 6% gap) do not tie."""
    from autotune.records import Round

    info = {
        "methods": {
            "eagle3": {"label": "EAGLE-3", "adaptive": False, "unavailable": None},
            "adaptive": {"label": "adaptive", "adaptive": True, "unavailable": None},
        },
        "categories": [None, None],
    }
    rows = [
        {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "config": {"method": m, "drafter": "h"},
            "speedup_vs_fastest": 1.5,
            "prompts_measured": 2,
            "gpu_s": 1.0,
        }
        for n, m in ((1, "eagle3"), (4, "adaptive"))
    ]
    confirmed = [
        {"trial": 1, "config": rows[0]["config"], "speedup_ci": {"point": 1.574, "low": 1.51, "high": 1.65}},
        {"trial": 4, "config": rows[1]["config"], "speedup_ci": {"point": 1.529, "low": 1.46, "high": 1.61}},
    ]

    def summary(adaptive: list[float]) -> dict:
        rounds = [Round({True: 55.0}, {1: 87.0, 4: a}) for a in adaptive]
        versus = per_method.paired_versus(rounds, start_noise=0.035, confidence=0.95)
        return per_method.summarize(
            info, rows, confirmed, {"config": rows[0]["config"]}, "speculation-wins", versus=versus
        )

    noisy = summary([86.0, 82.0, 85.5, 84.5])  # 2.9% behind on average, rounds that disagree
    assert noisy["tied"] == ["eagle3", "adaptive"]
    iv = next(e for e in noisy["methods"] if e["method"] == "adaptive")["best"]["versus_winner"]
    assert iv["low"] < 1.0 <= iv["high"] and iv["point"] == pytest.approx(337.999 / 348.0, rel=1e-3)
    assert noisy["text"].startswith(
        "EAGLE-3 and adaptive tie on this prompt set (not told apart, adaptive 0.97x "
    ) and noisy["text"].split("): ")[0].endswith("of EAGLE-3: either; EAGLE-3 recommended")
    steady = summary([81.5, 82.0, 81.8, 81.6, 82.1, 81.7, 81.9, 81.8])  # 6% behind in every round of 8
    assert steady["tied"] == [] and steady["text"].startswith("EAGLE-3 wins on this prompt set: ")
    # without rounds to pair (a study confirmed before #46's rule, or none): the 2% rule alone
    assert per_method.summarize(info, rows, confirmed, {"config": rows[0]["config"]}, "speculation-wins")["tied"] == []


MTP_SPACE = ROOT / "spaces" / "methods-mtp.yaml"


@pytest.fixture(scope="module")
def mtp_space():
    return simulated_space(load_space(MTP_SPACE))


def test_adaptive_over_mtp_launches_nextn_with_adaptive_on(mtp_space, backend, tmp_path):
    """SGLang 0.5.23 resolves NEXTN to EAGLE before its adaptive check, so adaptive stays on over the target's MTP
    layers: no drafter, NEXTN, the adaptive config file; the simulator's copy of SGLang's rules keeps it on and the
    server's reported config matches."""
    eff = backend.resolve(TrialConfig.make(None, True, method="adaptive-mtp", candidate_steps="1,2,3"), mtp_space)
    assert eff.drafter is None
    assert (eff.knob("num_steps"), eff.knob("topk"), eff.knob("num_draft_tokens")) == (2, 1, 3)
    files = backend.files(eff, mtp_space)
    assert json.loads(files["adaptive.json"])["1"]["candidate_steps"] == [1, 2, 3]
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = backend.argv(eff, mtp_space, port=1, files_dir=str(tmp_path))
    assert argv[argv.index("--speculative-algorithm") + 1] == "NEXTN"
    assert "--speculative-draft-model-path" not in argv and "--speculative-adaptive" in argv
    args = parse_launch_args(sim_argv(argv))
    assert args.speculative_adaptive and args.speculative_algorithm == "EAGLE"
    assert backend.check_effective(eff, backend.read_effective(args.server_args())) == []
    assert backend.deploy_method(eff, mtp_space) == "NEXTN"
    assert "adaptive-mtp" in {c.knob("method") for c in backend.defaults(mtp_space)}


def test_adaptive_over_mtp_needs_the_targets_mtp_layers(space, backend, tmp_path):
    methods = {**space.search.methods, "adaptive-mtp": MethodSpec("adaptive-mtp")}
    llama = dataclasses.replace(space, search=dataclasses.replace(space.search, methods=methods))
    assert "not available" in (backend.method_unavailable(llama, "adaptive-mtp") or "")
    assert "adaptive-mtp" not in {c.knob("method") for c in backend.defaults(llama)}
    with pytest.raises(InfeasibleConfig, match="MTP not available"):
        backend.resolve(TrialConfig.make(None, True, method="adaptive-mtp"), llama)
    with pytest.raises(SpaceError, match="runs no drafter"):
        load_space(_write(tmp_path, "  methods: {adaptive-mtp: {drafters: [head]}}"))


def test_adaptive_mtp_is_set_beside_tuned_static_mtp_not_another_drafterless_method():
    info = {
        "methods": {
            "mtp": {"label": "MTP", "adaptive": False, "unavailable": None},
            "ngram": {"label": "n-gram", "adaptive": False, "unavailable": None},
            "adaptive-mtp": {"label": "adaptive MTP", "adaptive": True, "adapts": "mtp", "unavailable": None},
        },
        "categories": [],
    }
    rows = [
        {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "config": {"method": m, "drafter": None},
            "speedup_vs_fastest": x,
            "accept_length": 2.0,
        }
        for n, m, x in ((1, "mtp", 1.5), (2, "ngram", 1.7), (3, "adaptive-mtp", 1.6))
    ]
    out = per_method.summarize(info, rows, [], None, "inconclusive")
    (row,) = out["adaptive"]
    assert row["static_method"] == "mtp"  # n-gram also runs no drafter, but adaptive MTP adapts MTP


def test_the_html_and_terminal_reports_say_what_each_method_got():
    from autotune import html, render

    info = {
        "methods": {
            "eagle3": {"label": "EAGLE-3", "adaptive": False, "unavailable": None},
            "adaptive": {"label": "adaptive", "adaptive": True, "unavailable": None},
        },
        "categories": [],
    }
    rows = [
        {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "prompts_measured": 2,
            "config": {"method": m, "drafter": "h"},
            "speedup_vs_fastest": x,
            "accept_length": 2.0,
            "gpu_s": g,
        }
        for n, m, x, g in ((1, "eagle3", 1.1, 300.0), (2, "adaptive", 1.2, 100.0), (3, "adaptive", 1.15, 100.0))
    ]
    m = per_method.summarize(info, rows, [], None, "inconclusive")
    page = "".join(html._methods(types.SimpleNamespace(methods=m)))  # the one field _methods reads
    assert "33% of trials · 60% of server time" in page  # EAGLE-3: 1 of 3 trials, 300 of 500 s
    assert "vs static 1.10x (EAGLE-3, 1 config measured: fewer than 3, not a tuned static config)" in page
    lines = render._methods_lines(m)
    assert any("EAGLE-3" in ln and "1 config measured; 1 trials (33% of the search's)" in ln for ln in lines)
    assert not any("vs tuned static" in ln for ln in lines)


def test_with_load_levels_adaptive_is_set_against_the_tuned_static_schedule_per_level():
    """#46: with load levels, the adaptive best (one config: the engine adapts it to the load) is compared at each
    level with the static method's config fastest there (the tuned static schedule's pick), each with its interval
    from confirmation's rounds where it was raced (else its search figure, said so), and the paired interval of
    adaptive over static within the rounds. A level breaking the latency limit or a lossy static config is no pick."""
    from autotune.records import Round, RoundLevels

    info = {
        "methods": {
            "eagle3": {"label": "EAGLE-3", "adaptive": False, "unavailable": None},
            "adaptive": {"label": "adaptive", "adaptive": True, "unavailable": None, "adapts": None},
        },
        "categories": [None, None],
        "start_noise": 0.035,
        "confidence": 0.95,
    }

    def row(n, method, levels, **extra):
        return {
            "number": n,
            "role": "speculative",
            "state": "COMPLETE",
            "duplicate_of": None,
            "config": {"method": method, "drafter": "h", "cuda_graph": True},
            "speedup_vs_fastest": 1.3,
            "prompts_measured": 2,
            "gpu_s": 1.0,
            "levels": [
                {"level": c, "speedup": v, "slo_broken": ["itl"] if c == 64 and n == 3 else []} for c, v in levels
            ],
            **extra,
        }

    rows = [
        row(1, "adaptive", [(1, 1.7), (64, 1.1)]),
        row(2, "eagle3", [(1, 2.3), (64, 0.9)]),  # fastest static at 1 stream (not raced)
        row(3, "eagle3", [(1, 1.9), (64, 1.5)]),  # fastest at 64 streams but breaks the latency limit there
        row(4, "eagle3", [(1, 1.5), (64, 1.2)]),  # the static pick at 64 streams, raced with the adaptive one
        row(5, "eagle3", [(1, 2.9), (64, 2.0)], lossless={"ok": False}),  # lossy: never a pick
    ]
    confirmed = [
        {"trial": 1, "config": rows[0]["config"], "speedup_ci": {"point": 1.3, "low": 1.2, "high": 1.4}},
        {"trial": 4, "config": rows[3]["config"], "speedup_ci": {"point": 1.35, "low": 1.25, "high": 1.45}},
    ]
    rounds = [
        Round(
            {True: 100.0},
            {1: 130.0, 4: 135.0},
            RoundLevels({True: {1: 100.0, 64: 1000.0}}, {1: {1: 168.0, 64: a}, 4: {1: 150.0, 64: b}}),
        )
        for a, b in ((1090.0, 1210.0), (1110.0, 1190.0), (1100.0, 1200.0))
    ]
    out = per_method.summarize(info, rows, confirmed, {"config": rows[3]["config"]}, "speculation-wins", rounds=rounds)
    (a,) = out["adaptive"]
    one, busy = a["levels"]
    assert (one["level"], one["static"]["trial"], one["static"]["speedup_ci"]) == (1, 2, None)
    assert one["adaptive"]["speedup_ci"]["point"] == pytest.approx(1.68)
    assert one["text"].startswith("1 streams: adaptive 1.68x [") and "vs static 2.30x (search) (trial 2)" in one["text"]
    assert busy["static"]["trial"] == 4 and busy["static"]["speedup_ci"]["point"] == pytest.approx(1.2, rel=1e-3)
    assert busy["versus"]["high"] < 1.0  # adaptive clearly slower than the static pick at 64 streams
    assert "adaptive over static 0.92x [" in busy["text"]
    # the terminal report shows them under the adaptive row (EAGLE-3: 4 configs measured, so "tuned static")
    from autotune.render import _methods_lines

    lines = _methods_lines(out)
    at = lines.index("    per level, adaptive vs the tuned static schedule's pick there:")
    assert lines[at - 1].startswith("  adaptive ") and lines[at + 1] == f"      {one['text']}"
    assert lines[at + 2].startswith("      64 streams: adaptive 1.10x [") and "(trial 4)" in lines[at + 2]
    # without levels: the rows stay as they were
    flat = [{**r, "levels": None} for r in rows]
    assert (
        "levels" not in per_method.summarize(info, flat, confirmed, None, "inconclusive", rounds=rounds)["adaptive"][0]
    )

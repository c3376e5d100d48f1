"""Methods beyond EAGLE (NGRAM, NEXTN/MTP, STANDALONE) and SGLang's adaptive mode: flags resolved as SGLang 0.5.23
resolves them, the expected-throughput ordering of the methods on each simulated truth, the adaptive controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.backends.sglang_methods import DEFAULT_ADAPTIVE_CONFIG
from autotune.sim.adaptive import AdaptiveController, AdaptiveSlot
from autotune.sim.batch import closed_loop
from autotune.sim.engine import SimEngine
from autotune.sim.launch import SimLaunchError, parse_launch_args
from autotune.sim.method_models import prompt_repetition

PROMPTS = Path(__file__).parent / "prompts"
METHODS = ["--scenario", "llama31-8b-h100-methods", "--model-path", "llama-3.1-8b-instruct"]
DSV3 = ["--scenario", "deepseek-v3-mtp-h200", "--model-path", "deepseek-v3"]
KIMI = ["--scenario", "kimi-k25-rtxpro6000", "--model-path", "kimi-k25"]
E3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "eagle3-llama31-8b"]


def knobs(steps: int | None = None, topk: int | None = None, ndt: int | None = None) -> list[str]:
    out: list[str] = []
    for flag, v in (
        ("--speculative-num-steps", steps),
        ("--speculative-eagle-topk", topk),
        ("--speculative-num-draft-tokens", ndt),
    ):
        if v is not None:
            out += [flag, str(v)]
    return out


def resolved(argv: list[str]) -> tuple[object, ...]:
    a = parse_launch_args(argv)
    sa = a.server_args()
    return (
        sa["speculative_algorithm"],
        a.method,
        sa["speculative_num_steps"],
        sa["speculative_eagle_topk"],
        sa["speculative_num_draft_tokens"],
        sa["speculative_adaptive"],
    )


@pytest.mark.parametrize(
    "argv,expected",
    [
        # NGRAM: topk := max BFS breadth (10), 12 draft tokens by default, steps := ndt // topk; no draft model
        ([*METHODS, "--speculative-algorithm", "NGRAM"], ("NGRAM", "NGRAM", 1, 10, 12, False)),
        (
            [*METHODS, "--speculative-algorithm", "ngram", "--speculative-ngram-max-bfs-breadth", "4", *knobs(ndt=16)],
            ("NGRAM", "NGRAM", 4, 4, 16, False),
        ),
        # the user's topk is overwritten, the user's steps kept
        ([*METHODS, "--speculative-algorithm", "NGRAM", *knobs(3, 2, 8)], ("NGRAM", "NGRAM", 3, 10, 8, False)),
        # NEXTN is EAGLE; on an MTP architecture the draft path defaults to the target: its MTP layer
        ([*DSV3, "--speculative-algorithm", "NEXTN", *knobs(3, 1, 4)], ("EAGLE", "MTP", 3, 1, 4, False)),
        ([*DSV3, "--speculative-algorithm", "NEXTN"], ("EAGLE", "MTP", 3, 1, 4, False)),
        ([*DSV3, "--speculative-algorithm", "EAGLE", *knobs(2, 1, 9)], ("EAGLE", "MTP", 2, 1, 3, False)),
        # STANDALONE: a small full model; SGLang auto-chooses (3, 1, 4) for it
        (
            [*METHODS, "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "llama32-1b"],
            ("STANDALONE", "STANDALONE", 3, 1, 4, False),
        ),
        # adaptive: topk 1 and the middle candidate of SGLang's default config ([0, 1, 3, 5, 7] -> 3), ndt = steps+1
        ([*METHODS, *E3, "--speculative-adaptive"], ("EAGLE3", "EAGLE3", 3, 1, 4, True)),
        ([*METHODS, *E3, "--speculative-adaptive", *knobs(5, 1, 9)], ("EAGLE3", "EAGLE3", 5, 1, 6, True)),
        ([*DSV3, "--speculative-algorithm", "NEXTN", "--speculative-adaptive"], ("EAGLE", "MTP", 3, 1, 4, True)),
        # adaptive switched off (a warning only): NGRAM, topk > 1, STANDALONE
        (
            [*METHODS, "--speculative-algorithm", "NGRAM", "--speculative-adaptive"],
            ("NGRAM", "NGRAM", 1, 10, 12, False),
        ),
        ([*METHODS, *E3, "--speculative-adaptive", *knobs(5, 4, 16)], ("EAGLE3", "EAGLE3", 5, 4, 16, False)),
        (
            [
                *METHODS,
                "--speculative-algorithm",
                "STANDALONE",
                "--speculative-draft-model-path",
                "llama32-1b",
                "--speculative-adaptive",
            ],
            ("STANDALONE", "STANDALONE", 3, 1, 4, False),
        ),
    ],
)
def test_resolution_table(argv: list[str], expected: tuple[object, ...]) -> None:
    assert resolved(argv) == expected


def test_ngram_flags_and_defaults() -> None:
    a = parse_launch_args([*METHODS, "--speculative-algorithm", "NGRAM"])
    sa = a.server_args()
    assert (
        sa["speculative_ngram_min_bfs_breadth"],
        sa["speculative_ngram_max_bfs_breadth"],
        sa["speculative_ngram_match_type"],
        sa["speculative_ngram_max_trie_depth"],
        sa["speculative_ngram_capacity"],
    ) == (1, 10, "BFS", 18, 10_000_000)
    assert a.drafter is None and sa["speculative_draft_model_path"] is None
    assert any("set to 12 by default for ngram" in line for line in a.log)
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*METHODS, "--speculative-algorithm", "NGRAM", "--speculative-ngram-match-type", "DFS"])
    assert "invalid choice: 'DFS' (choose from 'BFS', 'PROB')" in e.value.log and e.value.returncode == 2


def test_adaptive_warning_and_server_args() -> None:
    a = parse_launch_args([*METHODS, "--speculative-algorithm", "NGRAM", "--speculative-adaptive"])
    assert a.server_args()["speculative_adaptive"] is False
    assert any(
        "speculative_adaptive disabled: speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)" in line
        for line in a.log
    )
    b = parse_launch_args([*METHODS, *E3, "--speculative-adaptive", *knobs(5, 4, 16)])
    assert any("speculative_eagle_topk=4 (only topk=1 is supported)" in line for line in b.log)


def test_nextn_without_mtp_layers_fails() -> None:
    # a target SGLang does not default the draft path for: no draft model to load
    with pytest.raises(SimLaunchError, match="speculative-draft-model-path is required"):
        parse_launch_args([*METHODS, "--speculative-algorithm", "NEXTN", *knobs(3, 1, 4)])
    # an MTP architecture (DeepseekV3ForCausalLM) with num_nextn_predict_layers 0: the start fails at weight loading
    a = parse_launch_args([*KIMI, "--speculative-algorithm", "NEXTN", *knobs(3, 1, 4)])
    assert a.speculative_draft_model_path == "kimi-k25" and a.mtp_missing
    st = SimEngine(a, 0).startup()
    assert st.error is not None and "Only 1 nextn layer is supported" in st.error.log


def test_mtp_startup_and_standalone_mismatch() -> None:
    ok = SimEngine(parse_launch_args([*DSV3, "--speculative-algorithm", "NEXTN"]), 0).startup()
    assert ok.error is None
    bad = SimEngine(
        parse_launch_args(
            [*METHODS, "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "eagle3-llama31-8b"]
        ),
        0,
    ).startup()
    assert bad.error is not None and "not supported as a standalone draft model" in bad.error.log


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "JSONDecodeError"),
        ('{"ema_alpha": 0.3}', "must contain at least one integer-string BS key"),
        ('{"1": {"candidate_steps": [1, -2]}}', "BS 1: candidate_steps must be a list of non-negative ints"),
        ('{"1": {"candidate_steps": []}}', "BS 1: candidate_steps must be a list of non-negative ints"),
    ],
)
def test_bad_adaptive_config_rejected(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "adaptive.json"
    f.write_text(content)
    with pytest.raises(SimLaunchError) as e:
        parse_launch_args([*METHODS, *E3, "--speculative-adaptive", "--speculative-adaptive-config", str(f)])
    assert message in e.value.log and e.value.returncode == 1


def test_adaptive_config_file(tmp_path: Path) -> None:
    f = tmp_path / "adaptive.json"
    f.write_text(json.dumps({"ema_alpha": 0.5, "1": {"candidate_steps": [2, 4, 6]}}))
    a = parse_launch_args([*METHODS, *E3, "--speculative-adaptive", "--speculative-adaptive-config", str(f)])
    assert (a.speculative_num_steps, a.speculative_num_draft_tokens) == (4, 5)
    with pytest.raises(SimLaunchError, match=r"--speculative-num-steps=3 is not in the adaptive config"):
        parse_launch_args(
            [*METHODS, *E3, "--speculative-adaptive", "--speculative-adaptive-config", str(f), *knobs(3, 1, 4)]
        )
    with pytest.raises(SimLaunchError, match="No such file or directory"):
        parse_launch_args([*METHODS, *E3, "--speculative-adaptive", "--speculative-adaptive-config", "/nonexistent"])


def test_cuda_graph_max_bs_both_spellings() -> None:
    for flag in ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"):
        assert parse_launch_args([*METHODS, flag, "64"]).server_args()["cuda_graph_max_bs"] == 64


# ---------------------------------------------------------------------------------------------------------------
# expected throughput per method on each truth


def prompts(name: str) -> list[dict]:
    return yaml.safe_load((PROMPTS / f"{name}.yaml").read_text())


def tok_per_s(argv: list[str], ps: list[dict], *, categories: bool = True, max_new: int = 512) -> float:
    e = SimEngine(parse_launch_args([*argv, "--sim-no-noise"]), 0)
    secs = sum(e.expected_ms(p["text"], max_new, category=p.get("category") if categories else None) / 1000 for p in ps)
    return e.expected_tokens(max_new) * len(ps) / secs


LLAMA_METHODS = {
    "eagle3": [*E3, *knobs(6, 8, 64)],
    "eagle3-chain": [*E3, *knobs(5, 1, 6)],
    "ngram": ["--speculative-algorithm", "NGRAM"],
    "standalone": [
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-draft-model-path",
        "llama32-1b",
        *knobs(5, 1, 6),
    ],
}


@pytest.mark.parametrize("categories", [True, False])
def test_code_edit_truth_ngram_wins(categories: bool) -> None:
    ps = prompts("code_edit")
    base = tok_per_s(METHODS, ps, categories=categories)
    r = {m: tok_per_s([*METHODS, *argv], ps, categories=categories) / base for m, argv in LLAMA_METHODS.items()}
    assert r["ngram"] > r["eagle3"] > r["standalone"] > 1.0
    assert 1.15 <= r["ngram"] / r["eagle3"] <= 1.45


def test_chat_truth_eagle3_wins() -> None:
    ps = prompts("chat")
    base = tok_per_s(METHODS, ps)
    r = {m: tok_per_s([*METHODS, *argv], ps) / base for m, argv in LLAMA_METHODS.items()}
    assert r["eagle3"] > r["standalone"] and r["eagle3"] > 2.0
    assert r["ngram"] < 1.15


def test_mtp_truth_mtp_wins() -> None:
    ps = prompts("chat")
    base = tok_per_s(DSV3, ps)
    mtp = tok_per_s([*DSV3, "--speculative-algorithm", "NEXTN", *knobs(3, 1, 4)], ps) / base
    e3 = (
        max(
            tok_per_s(
                [*DSV3, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "eagle3-dsv3", *k], ps
            )
            for k in (knobs(3, 1, 4), knobs(2, 1, 3), knobs(3, 4, 8))
        )
        / base
    )
    ngram = tok_per_s([*DSV3, "--speculative-algorithm", "NGRAM"], ps) / base
    assert mtp > e3 > 1.0 > ngram
    assert mtp == pytest.approx(1.8, abs=0.1)  # SGLang's published DeepSeek-V3 MTP figure at batch 1


def test_repetition_from_text_and_category() -> None:
    for p in prompts("code_edit"):
        assert prompt_repetition(p["text"], p["category"]) > 0.9
        assert prompt_repetition(p["text"]) > 0.75  # the code block alone says so
    for p in prompts("chat"):
        assert prompt_repetition(p["text"]) < 0.2


# ---------------------------------------------------------------------------------------------------------------
# the adaptive controller


def test_slot_rule_up_and_down() -> None:
    slot = AdaptiveSlot(3, DEFAULT_ADAPTIVE_CONFIG["1"])
    for _ in range(60):
        slot.update([4.0])  # 4 accepted drafts per verify at steps 3: probe one beyond -> 5
    assert slot.current_steps == 5
    for _ in range(60):
        slot.update([0.1])
    assert slot.current_steps == 1
    # warm-up: nothing moves in the first 10 verifies
    fresh = AdaptiveSlot(3, DEFAULT_ADAPTIVE_CONFIG["1"])
    for _ in range(10):
        fresh.update([6.0])
        assert fresh.current_steps == 3


def test_controller_routes_batch_sizes() -> None:
    c = AdaptiveController(3, DEFAULT_ADAPTIVE_CONFIG, [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64])
    assert sorted({s for slot in c.slots.values() for s in slot.candidate_steps}) == [0, 1, 3, 5, 7]
    assert c.slot(1) is c.slots[1] and c.slot(3) is c.slots[1]  # 3 pads to 4, below key 8
    assert c.slot(5) is c.slots[8] and c.slot(33) is c.slots[32] and c.slot(200) is c.slots[64]
    assert c.steps(8) == 3 and c.steps(32) == 1 and c.steps(64) == 0  # not a candidate: the middle one


def _fixed_points(engine: SimEngine, text: str) -> list[int]:
    """The steps at which SGLang's rule stays put for this prompt's expected accepted drafts (its hysteresis can
    leave more than one: a run that has climbed stays up)."""
    from autotune.sim.acceptance import accept_length_distribution

    a_p, prof = engine.prompt_profile(text)  # type: ignore[misc]
    out = []
    for s in (1, 3, 5, 7):
        dist = accept_length_distribution(round(a_p, 6), prof.c, prof.th, prof.lam, s, 1, s + 1)
        drafts = sum(i * p for i, p in enumerate(dist))
        up = s < 7 and drafts > s - 0.5
        down = s > 1 and drafts <= {3: 1, 5: 3, 7: 5}[s] - 0.5 - 0.25
        if not up and not down:
            out.append(s)
    return out


@pytest.mark.parametrize(
    "argv,text",
    [
        ([*METHODS, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "eagle3-llama31-8b"], None),
        ([*DSV3, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "eagle3-dsv3"], None),
    ],
)
def test_adaptive_converges_on_a_long_run(argv: list[str], text: str | None) -> None:
    text = text or "Explain the theory of general relativity in simple terms."
    e = SimEngine(parse_launch_args([*argv, "--speculative-adaptive", "--sim-no-noise"]), 0)
    assert e.adaptive is not None and e.adaptive.steps(1) == 3  # starts at its initial steps
    for _ in range(12):
        e.generate(text, 512, alone=True)
    fixed = _fixed_points(e, text)
    assert fixed and e.adaptive.steps(1) in fixed
    last = e.adaptive.steps(1)
    for _ in range(4):
        e.generate(text, 512, alone=True)
    assert e.adaptive.steps(1) == last  # settled
    # the expected (mean-field) controller settles on the nearest fixed point from its initial steps
    for _ in range(12):
        e.expected_ms(text, 512)
    assert e._expected_adaptive is not None
    assert e._expected_adaptive.steps(1) == min(fixed, key=lambda s: (abs(s - 3), s))


def test_adaptive_under_load_uses_the_batch_slot() -> None:
    e = SimEngine(parse_launch_args([*METHODS, *E3, "--speculative-adaptive", "--sim-no-noise"]), 0)
    b = e.batcher()
    ps = prompts("chat")

    def submit(i: int):
        return e.seq(e.generate(ps[i % len(ps)]["text"], 128, request_index=i + 1))

    done, ms = closed_loop(b, submit, 32, 8)
    assert len(done) == 32 and ms > 0
    assert all(f.seq.emitted == 128 for f in done)
    assert e.adaptive is not None and e.adaptive.slots[8]._batch_count > 0  # batches of 5-8 route to slot 8

"""Log-probabilities, near ties and the reference answer, in-process (the HTTP formats are in test_reference_http)."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from autotune.config import ReferenceOutput
from autotune.seam import VirtualClock
from autotune.sim import FIELD_REPORT_PROMPTS, scenario, sim_launcher
from autotune.sim.engine import SimEngine
from autotune.sim.launch import SimLaunchError, parse_launch_args
from autotune.sim.runner import ModelRunner
from autotune.sim.server import (
    LogprobRequestError,
    chat_logprobs,
    chat_request,
    completions_logprobs,
    completions_request,
    native_meta,
    native_request,
)
from autotune.sim.text import (
    CHOSEN_LOGPROB_RANGE,
    MARGIN_RANGE,
    NEAR_TIE_MARGIN,
    NEAR_TIE_POSITIONS,
    VOCAB,
    Answer,
    divergence_point,
    near_tie_choice,
    near_tie_position,
    near_tie_runner_up,
    token_choice,
    token_stream,
)
from autotune.space import SimulateSpec

from .helpers import KIMI, StandInBackend, make_space, spec

PROMPTS = [t for _, t in FIELD_REPORT_PROMPTS]
SPECULATIVE = (spec("custom-10k", 3, 4, 16), spec("aq-medai", 4, 1, 5, True), spec("custom-10k", 6, 1, 7))
KIMI_ARGS = ["--scenario", KIMI, "--model-path", "kimi-k25"]


def runner(max_tokens: int = 256, near_ties: float | None = None) -> tuple[ModelRunner, VirtualClock]:
    clock = VirtualClock()
    space = make_space(drafters=("custom-10k", "aq-medai", "divergent"), max_tokens=max_tokens, near_ties=near_ties)
    return ModelRunner(space, StandInBackend(), clock), clock


def references(r: ModelRunner, config, top_n: int = 5) -> list[ReferenceOutput]:
    s = r.launch(config)
    out = [s.reference(i, top_n) for i in range(len(PROMPTS))]
    s.close()
    return out


def texts(r: ModelRunner, config) -> list[str]:
    s = r.launch(config)
    out = [s.run_prompt(i).text for i in range(len(PROMPTS))]
    s.close()
    return out


def first_difference(a: list[str], b: list[str]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def words(ref: ReferenceOutput) -> list[str]:
    return [t.text for t in ref.tokens]


# -- the distribution at each position ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["", "near-tie", "diverged", "sample-3"])
def test_each_position_has_a_coherent_distribution(stream: str) -> None:
    prompt = PROMPTS[0]
    for i, tok in enumerate(token_stream(prompt, 300, stream)):
        c = token_choice(prompt, stream, i, tok, 20)
        names = [t for t, _ in c.top]
        lps = [lp for _, lp in c.top]
        assert names[0] == tok and c.logprob == lps[0]
        assert len(names) == 20 and len(set(names)) == 20 and set(names) <= set(VOCAB)
        assert lps == sorted(lps, reverse=True)
        assert CHOSEN_LOGPROB_RANGE[0] <= c.logprob <= CHOSEN_LOGPROB_RANGE[1]
        assert c.margin is not None and MARGIN_RANGE[0] <= c.margin <= MARGIN_RANGE[1]
        assert sum(math.exp(lp) for lp in lps) <= 1.0
        assert token_choice(prompt, stream, i, tok, 20) == c  # deterministic
        assert token_choice(prompt, stream, i, tok, 3).top == c.top[:3]  # prefix-stable in top_n
    assert token_choice(prompt, "", 5, " the", 0).top == () and token_choice(prompt, "", 5, " the", 1).margin is None


def test_top_n_is_capped_at_the_vocabulary() -> None:
    c = Answer(PROMPTS[1], 4).choices(10_000)
    assert all(len(t.top) == len(VOCAB) and len({a for a, _ in t.top}) == len(VOCAB) for t in c)


def test_near_tie_positions_are_stable_and_nested() -> None:
    for p in PROMPTS:
        assert near_tie_position(p, 0.0) is None
        at = near_tie_position(p, 1.0)
        assert at is not None and NEAR_TIE_POSITIONS[0] <= at <= NEAR_TIE_POSITIONS[1]
        for q in (0.2, 0.5, 0.8):
            assert near_tie_position(p, q) in (None, at)  # a prompt a smaller probability picks, a larger one keeps
    many = [f"prompt number {i}" for i in range(2000)]
    share = sum(near_tie_position(p, 0.3) is not None for p in many) / len(many)
    assert share == pytest.approx(0.3, abs=0.04)
    assert max(NEAR_TIE_POSITIONS) < min(divergence_point(p, "divergent") for p in many)


def test_near_tie_tokens_part_inside_the_tie() -> None:
    """Neither tied token is a prefix of the other and no listed alternative extends one: a character-level
    comparison of the two texts finds the tie at its token, and the runner-up as the longest match there."""
    for i in range(3000):
        prompt = f"prompt number {i}"
        at = near_tie_position(prompt, 1.0)
        best = token_stream(prompt, at + 1)[at]
        runner_up = near_tie_runner_up(prompt, at)
        assert not runner_up.startswith(best) and not best.startswith(runner_up)
        c = near_tie_choice(prompt, at, best, runner_up, 20)
        assert c.top[:2] == ((best, c.logprob), (runner_up, c.logprob - NEAR_TIE_MARGIN))
        assert not any(t.startswith((best, runner_up)) for t, _ in c.top[2:])
        assert len({t for t, _ in c.top}) == 20 and sum(math.exp(lp) for _, lp in c.top) <= 1.0


# -- near_ties 0: today's behaviour exactly ---------------------------------------------------------------------


def test_near_ties_zero_leaves_outputs_unchanged() -> None:
    default, _ = runner()
    zero, _ = runner(near_ties=0.0)
    assert "--near-ties" not in default.space.server.launcher
    assert zero.space.server.launcher[-2:] == ("--near-ties", "0.0")
    truth = ["".join(token_stream(p, 256)) for p in PROMPTS]
    for config in (spec(None), spec(None, cuda_graph=True), *SPECULATIVE):
        assert texts(default, config) == texts(zero, config) == truth
    for ref in references(default, spec(None)):
        assert ref.text == truth[ref.index]
        assert all(t.margin is not None and t.margin >= MARGIN_RANGE[0] for t in ref.tokens)


# -- near_ties 1: baseline keeps the best token, speculative servers take the runner-up -----------------------------


def test_near_tie_splits_baseline_and_speculative_at_the_tie() -> None:
    r, _ = runner(near_ties=1.0)
    plain, _ = runner()
    base_refs = references(r, spec(None), top_n=5)
    assert texts(r, spec(None)) == texts(plain, spec(None)) == [ref.text for ref in base_refs]  # baseline unmoved
    spec_refs = {c.key(): references(r, c, top_n=5) for c in SPECULATIVE}
    spec_texts = [texts(r, c) for c in SPECULATIVE]
    assert spec_texts[0] == spec_texts[1] == spec_texts[2]  # deterministic, the same for every speculative config
    for i, prompt in enumerate(PROMPTS):
        at = near_tie_position(prompt, 1.0)
        base = base_refs[i]
        for refs in spec_refs.values():
            s = refs[i]
            assert s.text == spec_texts[0][i] != base.text
            assert first_difference(words(base), words(s)) == at
            tie = base.tokens[at]
            assert tie.top[0][0] == tie.text == words(base)[at]  # the token the baseline chose
            assert tie.top[1][0] == words(s)[at]  # ... and the one the speculative server chose
            assert tie.margin == pytest.approx(NEAR_TIE_MARGIN, abs=1e-9)
            assert s.tokens[at].top[:2] == ((tie.top[1][0], tie.top[0][1]), (tie.top[0][0], tie.top[1][1]))
            # the only near tie: everywhere else the baseline is confident
            assert all(t.margin >= MARGIN_RANGE[0] for j, t in enumerate(base.tokens) if j != at)
            assert len(s.tokens) == len(base.tokens) == 256


def test_near_tie_from_the_launch_flag_and_its_rules() -> None:
    assert parse_launch_args(KIMI_ARGS).near_ties == 0.0
    a = parse_launch_args([*KIMI_ARGS, "--near-ties", "0.25"])
    assert a.near_ties == 0.25 and any("near ties on" in line for line in a.log)
    for bad in ("-0.1", "1.5", "nan", "often"):
        with pytest.raises(SimLaunchError) as e:
            parse_launch_args([*KIMI_ARGS, "--near-ties", bad])
        assert e.value.returncode == 2 and "--near-ties must be a probability between 0 and 1" in str(e.value)
    base = (sys.executable, "-m", "autotune.sim", "--scenario", KIMI, "--time-scale", "50.0", "--seed", "0")
    assert sim_launcher(SimulateSpec()) == base
    assert sim_launcher(SimulateSpec(near_ties=1.0)) == (*base, "--near-ties", "1.0")


def test_near_ties_from_the_scenario_file(tmp_path, monkeypatch) -> None:
    src = scenario.SCENARIO_DIR
    os.symlink(os.path.join(src, KIMI), tmp_path / KIMI)
    text = Path(src, f"{KIMI}.yaml").read_text(encoding="utf-8")
    (tmp_path / "ties.yaml").write_text(text.replace(f"name: {KIMI}", "name: ties") + "near_ties: 0.5\n")
    (tmp_path / "bad-ties.yaml").write_text(text + "near_ties: 2\n")
    shutil.copy(os.path.join(src, f"{KIMI}.yaml"), tmp_path / f"{KIMI}.yaml")
    monkeypatch.setattr(scenario, "SCENARIO_DIR", str(tmp_path))
    scenario.load_scenario.cache_clear()
    try:
        assert scenario.load_scenario("ties").near_ties == 0.5
        assert parse_launch_args(["--scenario", "ties", "--model-path", "kimi-k25"]).near_ties == 0.5
        flag = ["--scenario", "ties", "--model-path", "kimi-k25", "--near-ties", "0"]
        assert parse_launch_args(flag).near_ties == 0.0  # the flag overrides the scenario
        with pytest.raises(scenario.ScenarioError, match="near_ties: expected a probability between 0 and 1, got 2"):
            scenario.load_scenario("bad-ties")
    finally:
        scenario.load_scenario.cache_clear()


# -- the broken drafter stays clearly lossy ----------------------------------------------------------------------


@pytest.mark.parametrize("near_ties", [None, 1.0])
def test_divergent_drafter_departs_where_the_baseline_is_confident(near_ties: float | None) -> None:
    r, _ = runner(max_tokens=400, near_ties=near_ties)
    base_refs = references(r, spec(None), top_n=5)
    broken = references(r, spec("divergent", 3, 1, 4), top_n=5)
    for base, bad, prompt in zip(base_refs, broken, PROMPTS, strict=True):
        at = first_difference(words(base), words(bad))
        assert at is not None and at >= divergence_point(prompt, "divergent") >= 20
        where = base.tokens[at]
        assert where.margin is not None and where.margin >= 1.0  # the baseline was confident there
        assert words(bad)[at] != where.top[1][0]  # and the broken token is not its runner-up


# -- the in-process reference --------------------------------------------------------------------------------------


def test_reference_is_a_timed_request_on_its_own_ledger() -> None:
    r, clock = runner(max_tokens=128)
    s = r.launch(spec("custom-10k", 3, 1, 4))
    res = s.run_prompt(2)
    before = (s.engine.requests, s.engine.generation_tokens, s.engine.verify_ct)
    ref = s.reference(2, 3)
    assert ref.index == 2 and ref.text == res.text and len(ref.tokens) == 128
    assert all(len(t.top) == 3 and t.top[0] == (t.text, t.logprob) for t in ref.tokens)
    assert 0 < clock.charged["reference"] == pytest.approx(res.seconds, rel=0.05)  # temperature 0: the same plan
    assert clock.now() == pytest.approx(sum(clock.charged.values()))  # every ledger is device time
    assert s.engine.requests == before[0] + 1 and s.engine.generation_tokens == before[1] + 128
    assert s.engine.verify_ct > before[2]  # counted into the acceptance metrics like any request
    with pytest.raises(IndexError):
        s.reference(len(PROMPTS), 3)


def test_reference_formats_carry_the_same_numbers() -> None:
    r, _ = runner(max_tokens=40, near_ties=1.0)
    ref = references(r, spec(None), top_n=4)[0]
    meta = native_meta(ref.tokens, 4, with_text=True)
    assert [[lp, VOCAB[i], t] for lp, i, t in meta["output_token_logprobs"]] == [
        [t.logprob, t.text, t.text] for t in ref.tokens
    ]
    assert [[(t, lp) for lp, _, t in row] for row in meta["output_top_logprobs"]] == [list(t.top) for t in ref.tokens]
    assert "output_top_logprobs" not in native_meta(ref.tokens, 0, with_text=False)
    comp = completions_logprobs(ref.tokens, 4)
    assert "".join(comp["tokens"]) == ref.text
    pieces = zip(comp["text_offset"], comp["tokens"], strict=True)
    assert [ref.text[o : o + len(t)] for o, t in pieces] == comp["tokens"]
    assert [list(d.items()) for d in comp["top_logprobs"]] == [list(t.top) for t in ref.tokens]
    chat = chat_logprobs(ref.tokens, 4)["content"]
    assert [bytes(c["bytes"]).decode() for c in chat] == [t.text for t in ref.tokens]
    assert [[(e["token"], e["logprob"]) for e in c["top_logprobs"]] for c in chat] == [list(t.top) for t in ref.tokens]


@pytest.mark.parametrize(
    ("parse", "body", "expected"),
    [
        (native_request, {}, None),
        (native_request, {"return_logprob": True}, 0),
        (native_request, {"return_logprob": True, "top_logprobs_num": 5}, 5),
        (native_request, {"return_logprob": True, "top_logprobs_num": -1}, "non-negative integer"),
        (completions_request, {"logprobs": None}, None),
        (completions_request, {"logprobs": 0}, 0),
        (completions_request, {"logprobs": 3}, 3),
        (completions_request, {"logprobs": "3"}, "non-negative integer"),
        (chat_request, {"logprobs": False}, None),
        (chat_request, {"logprobs": True}, 0),
        (chat_request, {"logprobs": True, "top_logprobs": 2}, 2),
        (chat_request, {"top_logprobs": 2}, "needs 'logprobs': true"),
        (chat_request, {"logprobs": 1}, "true or false"),
    ],
)
def test_logprob_request_fields(parse, body, expected) -> None:
    if isinstance(expected, str):
        with pytest.raises(LogprobRequestError, match=expected):
            parse(body)
    else:
        assert parse(body) == expected


def test_the_lossless_check_reads_near_ties_as_numerics_and_the_broken_drafter_as_lossy() -> None:
    """Through autotune.lossless.classify (character-level, as the study uses it), over many prompts."""
    lossless = pytest.importorskip("autotune.lossless")
    flags = [*KIMI_ARGS, "--near-ties", "1.0", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    flags += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--speculative-draft-model-path"]
    base_engine = SimEngine(parse_launch_args([*KIMI_ARGS, "--near-ties", "1.0"]), 0)
    fast_engine = SimEngine(parse_launch_args([*flags, "custom-10k"]), 0)
    broken_engine = SimEngine(parse_launch_args([*flags, "divergent"]), 0)
    for tolerance in (lossless.default_tolerance("bfloat16"), max(lossless.TIE_TOLERANCE.values())):
        bases, brokens, refs = [], [], []
        for k in range(60):
            prompt = f"Question {k}: how does item {k * 7} work?"
            gen = base_engine.generate(prompt, 260, temperature=0)
            base = ReferenceOutput(index=0, text=gen.text, tokens=gen.choices(lossless.REFERENCE_TOP_N))
            fast = fast_engine.generate(prompt, 260, temperature=0).text
            broken = broken_engine.generate(prompt, 260, temperature=0).text
            tie = lossless.classify(base.text, fast, base, tolerance)
            assert (tie.kind, tie.token) == ("numerics", near_tie_position(prompt, 1.0)), tie
            assert tie.margin == pytest.approx(NEAR_TIE_MARGIN, abs=1e-9)
            bad = lossless.classify(base.text, broken, base, tolerance)
            # at the widest (4-bit) tolerance a departure of 1.5-1.75 nats is borderline on its own prompt ...
            assert bad.kind in ("lossy", "borderline") and bad.token is not None and bad.token >= 20, bad
            assert bad.kind == "lossy" or tolerance == max(lossless.TIE_TOLERANCE.values())
            bases.append(base.text)
            brokens.append(broken)
            refs.append(base)
        # ... and the trial is lossy on every prompt: borderline flips on two or more prompts are proof of loss
        rec = lossless.check_outputs(brokens, bases, refs, tolerance=tolerance, min_prefix=0.9)
        assert not rec["ok"] and rec["lossy"] == list(range(60))

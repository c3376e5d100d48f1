"""The lossless check, pure: a divergence is judged at its first token against the baseline's log-probabilities."""

from __future__ import annotations

import struct

import pytest

from autotune import lossless
from autotune.config import ReferenceOutput, TokenChoice


def ref(*tokens: tuple[str, list[tuple[str, float]]]) -> ReferenceOutput:
    """A reference answer from (chosen token, top list) pairs; the chosen token's logprob is the top's first."""
    toks = tuple(TokenChoice(t, top[0][1] if top else None, tuple(top)) for t, top in tokens)
    return ReferenceOutput(index=0, text="".join(t for t, _ in tokens), tokens=toks)


# the baseline answered "The cat sat." with a near tie at " cat" (vs " dog") and confident elsewhere
BASE = ref(
    ("The", [("The", -0.1), ("A", -3.0)]),
    (" cat", [(" cat", -0.700), (" dog", -0.704), (" cow", -4.0)]),
    (" sat", [(" sat", -0.2), (" ran", -2.5)]),
    (".", [(".", -0.05), ("!", -4.0)]),
)


def test_identical_answers() -> None:
    d = lossless.classify(BASE.text, BASE.text, BASE, 0.05)
    assert d.kind == "identical" and d.prefix_fraction == 1.0 and d.char is None


def test_a_flip_to_the_runner_up_of_a_near_tie_is_numerics() -> None:
    d = lossless.classify(BASE.text, "The dog ran away.", BASE, 0.05, prompt=3)
    assert d.kind == "numerics"
    assert (d.prompt, d.char, d.token, d.baseline_token, d.other_token) == (3, 4, 1, " cat", " dog")
    assert d.margin == pytest.approx(0.004)
    assert "near-tie" in d.describe()


def test_a_divergence_where_the_baseline_was_confident_is_lossy() -> None:
    d = lossless.classify(BASE.text, "The cat ran.", BASE, 0.05)
    assert d.kind == "lossy" and d.token == 2 and d.other_token == " ran" and d.margin == pytest.approx(2.3)


def test_a_token_outside_the_top_choices_is_lossy_even_at_a_near_tie() -> None:
    d = lossless.classify(BASE.text, "The zebra", BASE, 10.0)
    assert d.kind == "lossy" and d.other_token is None and d.token == 1


def test_a_far_runner_up_is_lossy_and_a_large_tolerance_accepts_it() -> None:
    assert lossless.classify(BASE.text, "The cow sat.", BASE, 0.05).kind == "lossy"
    assert lossless.classify(BASE.text, "The cow sat.", BASE, 5.0).kind == "numerics"


def test_a_divergence_inside_a_token_is_judged_at_that_token() -> None:
    # the other server took " ca" + "r"...: neither is a baseline alternative at token 1
    d = lossless.classify(BASE.text, "The car", BASE, 0.05)
    assert d.kind == "lossy" and d.char == 6 and d.token == 1


def test_without_log_probabilities_the_divergence_is_unclassified() -> None:
    d = lossless.classify(BASE.text, "The dog", None, 0.05)
    assert d.kind == "unclassified" and d.char == 4 and d.prefix_fraction == pytest.approx(4 / len(BASE.text))


def test_a_reference_that_disagrees_with_the_measured_text_before_the_divergence_is_not_used() -> None:
    d = lossless.classify("Thx cat sat.", "Thx dog", BASE, 0.05)
    assert d.kind == "unclassified"


def test_the_other_going_on_where_the_baseline_stopped_is_unclassified() -> None:
    d = lossless.classify(BASE.text, BASE.text + " And then", BASE, 0.05)
    assert d.kind == "unclassified" and d.char == len(BASE.text) and d.token == 4


def test_one_near_tie_prompt_no_longer_vetoes_a_config() -> None:
    """The H200 case: one prompt diverged at a near tie in every speculative config; the others were identical."""
    texts = ["The dog ran away.", "same", "same"]
    rec = lossless.check_outputs(texts, [BASE.text, "same", "same"], [BASE, None, None], tolerance=0.05, min_prefix=0.9)
    assert rec["ok"] and rec["numerics"] == [0] and rec["lossy"] == []
    assert rec["min_prefix_fraction"] < 0.9  # the old rule (minimum prefix over prompts) would have vetoed it
    assert [d["kind"] for d in rec["divergences"]] == ["numerics"]


def test_a_confident_divergence_on_any_prompt_fails_the_check() -> None:
    rec = lossless.check_outputs(
        ["same", "The cat ran."], ["same", BASE.text], [None, BASE], tolerance=0.05, min_prefix=0.9
    )
    assert not rec["ok"] and rec["lossy"] == [1]
    assert "lossy on prompts [1]" in lossless.summary_line(rec)


def test_without_log_probabilities_the_prefix_rule_applies() -> None:
    long = "x" * 100
    ok = lossless.check_outputs([long[:95] + "y" * 5], [long], [None], tolerance=0.05, min_prefix=0.9)
    bad = lossless.check_outputs([long[:50] + "y" * 50], [long], [None], tolerance=0.05, min_prefix=0.9)
    assert ok["ok"] and ok["unclassified"] == [0]
    assert not bad["ok"] and bad["lossy"] == [0]


def test_floor_is_the_largest_margin_baselines_diverged_at() -> None:
    assert lossless.floor([]) == 0.0
    margins = (0.01, 0.2, None)
    assert lossless.floor([lossless.Divergence(0, "numerics", 1.0, margin=m) for m in margins]) == 0.2


@pytest.mark.parametrize(
    ("dtype", "tolerance"),
    [("float32", 0.02), ("float16", 0.1), ("bfloat16", 0.5), ("4bit", 1.5), (None, lossless.UNKNOWN_TOLERANCE)],
)
def test_default_tolerance_by_data_type(dtype: str | None, tolerance: float) -> None:
    assert lossless.default_tolerance(dtype) == tolerance


def test_model_dtype_from_a_checkpoint_config(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    assert lossless.model_dtype(str(tmp_path)) == "bfloat16"
    assert lossless.model_dtype(str(tmp_path), ["--dtype", "float16"]) == "float16"
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}')
    assert lossless.model_dtype(str(tmp_path)) == "8bit"
    assert lossless.model_dtype(str(tmp_path / "missing")) is None


def _gguf(path, tensors: list[tuple[str, list[int], int]]) -> None:
    """A minimal GGUF v3 header: two KVs (a string and a string array) and tensor infos."""

    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 2)
    out += s("general.architecture") + struct.pack("<I", 8) + s("llama")
    out += s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + s("a") + s("b")
    for name, dims, ttype in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", ttype, 0)
    path.write_bytes(out)


def test_gguf_weight_type_is_the_type_holding_most_elements(tmp_path) -> None:
    f = tmp_path / "m.gguf"
    _gguf(f, [("tok_embd", [64, 100], 1), ("norm", [64], 0), ("blk.0.attn_q", [64, 64], 1), ("out", [64, 10], 0)])
    assert lossless.gguf_dtype(f) == "float16"
    assert lossless.model_dtype(str(f)) == "float16"
    _gguf(f, [("a", [64, 64], 8), ("b", [8, 8], 1)])
    assert lossless.gguf_dtype(f) == "8bit"
    f.write_bytes(b"not a gguf")
    assert lossless.model_dtype(str(f)) is None


def test_gguf_written_by_the_test_model_writer_is_f16(tmp_path) -> None:
    pytest.importorskip("gguf")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from llamacpp_models import ModelSpec, write_models

    spec = ModelSpec(width=64, layers=2, draft_layers=1, heads=2, kv_heads=1, ffn=128, dtype="f16")
    paths = write_models(tmp_path, spec)
    assert lossless.gguf_dtype(paths["target"]) == "float16"


# the H200 llama.cpp load study of issue #22: draft_n_max 16 (a 17-token verify batch, F16 target, tolerance 0.1)
# flipped once at 0.124 nats, every other flip of that study was 0.012-0.06
WIDE = ref(
    ("The", [("The", -0.1), ("A", -3.0)]),
    (" cat", [(" cat", -0.600), (" dog", -0.724), (" cow", -4.0)]),
    (" sat", [(" sat", -0.2), (" ran", -2.5)]),
)


def test_one_flip_just_past_the_tolerance_is_borderline_not_proof_of_loss() -> None:
    d = lossless.classify(WIDE.text, "The dog sat", WIDE, 0.1)
    assert d.kind == "borderline" and d.margin == pytest.approx(0.124)
    assert "borderline" in d.describe()
    rec = lossless.check_outputs(
        ["The dog sat", "same"], [WIDE.text, "same"], [WIDE, None], tolerance=0.1, min_prefix=0.9
    )
    assert rec["ok"] and rec["lossy"] == [] and rec["borderline"] == [0]
    assert "borderline" in lossless.summary_line(rec)


def test_borderline_flips_on_two_prompts_are_lossy() -> None:
    rec = lossless.check_outputs(
        ["The dog sat", "The dog sat"], [WIDE.text, WIDE.text], [WIDE, WIDE], tolerance=0.1, min_prefix=0.9
    )
    assert not rec["ok"] and rec["lossy"] == [0, 1] and rec["borderline"] == [0, 1]


def test_the_borderline_band_is_capped_in_nats() -> None:
    """A coarse type's wide tolerance does not stretch the band: bfloat16 (0.5) reaches 0.75, not 1.5, so a
    departure of a whole nat (a broken drafter; the simulator's divergent stand-in departs by 1-6) stays lossy."""
    assert lossless.borderline_limit(0.1) == pytest.approx(0.3)
    assert lossless.borderline_limit(0.5) == pytest.approx(0.75)
    whole_nat = ref(("A", [("A", -0.2), ("B", -1.2)]))
    assert lossless.classify("A", "B", whole_nat, 0.5).kind == "lossy"
    assert lossless.classify("A", "B", whole_nat, 0.8).kind == "borderline"


def test_records_without_a_borderline_flip_keep_their_shape() -> None:
    rec = lossless.check_outputs(["The dog ran away."], [BASE.text], [BASE], tolerance=0.05, min_prefix=0.9)
    assert "borderline" not in rec


def test_a_borderline_flip_beside_a_lossy_prompt_is_lossy_too() -> None:
    rec = lossless.check_outputs(
        ["The dog sat", "The cat ran."], [WIDE.text, BASE.text], [WIDE, BASE], tolerance=0.1, min_prefix=0.9
    )
    assert not rec["ok"] and rec["lossy"] == [0, 1] and rec["borderline"] == [0]


def test_a_divergence_keeps_what_each_answer_says_from_there_on() -> None:
    """Recorded H200 case (docs/gpu-runs/2026-12-02-h200-sharing-0.3.23): a lossy divergence three tokens before
    the end with no alternative matched; the record now says whether the other answer took another token there or
    ended (the report then tells the two apart)."""
    other = lossless.classify(BASE.text, "The zebra sat.", BASE, 0.05)
    assert (other.baseline_next, other.other_next) == ("cat sat.", "zebra sat.")
    assert other.to_dict()["other_next"] == "zebra sat."
    cut = lossless.classify(BASE.text, "The cat", BASE, 0.05)  # the other answer ends before " sat."
    assert cut.kind == "lossy" and cut.token == 2 and cut.other_token is None
    assert (cut.baseline_next, cut.other_next) == (" sat.", "")
    assert "its answer ends there" in cut.describe()
    assert "outside its top choices" in other.describe()
    long = "x" * 100
    far = lossless.classify(long, long[:10] + "y" * 90, None, 0.05)
    assert far.kind == "unclassified" and len(far.baseline_next) == lossless.NEXT_CHARS == len(far.other_next)
    assert lossless.classify(BASE.text, BASE.text, BASE, 0.05).other_next is None  # identical: nothing to show


def test_an_answer_cut_short_is_lossy_and_named_so() -> None:
    rec = lossless.check_outputs(
        ["The cat", BASE.text], [BASE.text, BASE.text], [BASE, BASE], tolerance=0.05, min_prefix=0.9
    )
    assert not rec["ok"] and rec["lossy"] == [0] and rec["cut"] == [0]
    assert "cut short on [0]" in lossless.summary_line(rec)
    other = lossless.check_outputs(["The zebra"], [BASE.text], [BASE], tolerance=0.05, min_prefix=0.9)
    assert other["lossy"] == [0] and "cut" not in other  # another token, not an early end

"""The tiny GGUF writer: shapes, shared vocabulary, draft = target's first layers, idempotence."""

from __future__ import annotations

import functools

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from llamacpp_models import (  # noqa: E402
    DRAFT_BAD,
    DRAFT_GOOD,
    TARGET,
    ModelSpec,
    main,
    models_present,
    vocabulary,
    write_models,
)

SMALL = ModelSpec(width=64, layers=3, draft_layers=1, heads=4, kv_heads=2, ffn=96, eps=0.1, seed=3)


@functools.lru_cache(maxsize=8)
def _reader(path: str, mtime_ns: int):
    return gguf.GGUFReader(path)


def reader(path):
    return _reader(str(path), path.stat().st_mtime_ns)


def tensors(path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in reader(path).tensors}


def field(path, key):
    return reader(path).fields[key].contents()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"), SMALL)


def test_three_models_share_the_vocabulary(written):
    paths = written
    assert {p.name for p in paths.values()} == {TARGET, DRAFT_GOOD, DRAFT_BAD}
    pieces, _, _ = vocabulary()
    for p in paths.values():
        assert field(p, "general.architecture") == "llama"
        assert field(p, "tokenizer.ggml.model") == "llama"
        assert field(p, "tokenizer.ggml.tokens") == pieces
    assert field(paths["target"], "llama.block_count") == 3
    assert field(paths["draft-good"], "llama.block_count") == 1
    assert field(paths["draft-bad"], "llama.block_count") == 1


def test_good_draft_is_the_targets_first_layer_and_bad_draft_has_a_noisy_head(written):
    paths = written
    t, g, b = (tensors(paths[k]) for k in ("target", "draft-good", "draft-bad"))
    assert set(g) == {k for k in t if not k.startswith(("blk.1.", "blk.2."))}
    for name, arr in g.items():
        assert np.array_equal(arr, t[name]), name
    # the bad draft: same layer (same cost), noisy output head (poor agreement), same constant-channel bias
    assert set(b) == set(g)
    assert np.array_equal(b["blk.0.attn_q.weight"], t["blk.0.attn_q.weight"])
    tout, bout = t["output.weight"].astype(np.float32), b["output.weight"].astype(np.float32)
    assert np.array_equal(bout[:, 0], tout[:, 0])
    _, _, types = vocabulary()
    specials = np.array([ty != int(gguf.TokenType.NORMAL) for ty in types])
    assert np.all(bout[specials] == 0)
    noise = (bout - tout)[~specials, 1:]
    assert noise.std() == pytest.approx(SMALL.bad_noise * SMALL.logit_scale / np.sqrt(SMALL.width), rel=0.1)


def test_extra_layers_output_projections_scaled_by_eps(written):
    paths = written
    t = tensors(paths["target"])
    first = np.abs(t["blk.0.ffn_down.weight"].astype(np.float32)).mean()
    later = np.abs(t["blk.2.ffn_down.weight"].astype(np.float32)).mean()
    assert later == pytest.approx(first * SMALL.eps, rel=0.3)


def test_byte_and_special_tokens_can_never_win(written):
    paths = written
    out = tensors(paths["target"])["output.weight"].astype(np.float32)
    _, _, types = vocabulary()
    ordinary = np.array([ty == int(gguf.TokenType.NORMAL) for ty in types])
    assert np.all(out[~ordinary] == 0)
    assert np.all(out[ordinary, 0] > 10)  # the bias on the constant channel
    for name in ("blk.0.attn_output.weight", "blk.0.ffn_down.weight"):
        assert np.all(tensors(paths["target"])[name][0] == 0)  # nothing writes the constant channel


def test_rewritten_only_when_parameters_change(tmp_path):
    paths = write_models(tmp_path, SMALL)
    assert models_present(tmp_path, SMALL)
    stamp = paths["target"].stat().st_mtime_ns
    write_models(tmp_path, SMALL)
    assert paths["target"].stat().st_mtime_ns == stamp
    other = ModelSpec(**{**SMALL.__dict__, "eps": 0.2})
    assert not models_present(tmp_path, other)
    write_models(tmp_path, other)
    assert paths["target"].stat().st_mtime_ns != stamp
    assert models_present(tmp_path, other) and not models_present(tmp_path, SMALL)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"draft_layers": 0}, "draft_layers"),
        ({"draft_layers": 3}, "draft_layers"),
        ({"width": 66}, "multiple of heads"),
        ({"kv_heads": 3}, "kv_heads"),
        ({"eps": -1.0}, "eps"),
        ({"bad_noise": -1.0}, "bad_noise"),
        ({"logit_scale": 0.0}, "logit_scale"),
        ({"dtype": "q4"}, "dtype"),
    ],
)
def test_spec_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec(**{**SMALL.__dict__, **changes}).validate()


def test_cli(tmp_path, capsys):
    args = [str(tmp_path), "--width", "64", "--layers", "2", "--heads", "4", "--kv-heads", "4", "--ffn", "64"]
    assert main(args) == 0
    assert "target" in capsys.readouterr().err
    assert main(args) == 0
    assert "up to date" in capsys.readouterr().err
    assert main([str(tmp_path), "--layers", "1"]) == 2

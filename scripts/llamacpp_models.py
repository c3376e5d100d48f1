"""Tiny llama-architecture GGUF models for testing speculative decoding with llama.cpp (no downloads).

``write_models(out_dir, ModelSpec(...))`` writes three files that share one SentencePiece-style vocabulary:

- ``target.gguf``: ``layers`` random transformer layers of width ``width`` (F16 by default);
- ``draft-good.gguf``: the target's first ``draft_layers`` layers (same embeddings, same output head). The
  target's other layers have their output projections (``attn_output``, ``ffn_down``) scaled by ``eps``, so
  they only nudge the residual stream: ``eps = 0`` makes the draft predict exactly what the target predicts
  (acceptance ~100%), a larger ``eps`` lowers the agreement;
- ``draft-bad.gguf``: the good draft with independent noise added to its output head (``bad_noise`` times
  the head's own scale), so its greedy choices often differ from the target's: it is engaged (some drafts
  accepted, acceptance length above ~1.2) but too poor to pay for itself, and speculation with it loses.
  ``bad_noise`` large (e.g. 100) gives a draft that agrees only by chance.

Draft confidence: the output head's random part is scaled by ``logit_scale`` so that the softmax is peaked
like a trained model's (median top probability ~0.6 at the default 6; at 1 it would be ~0.01 and any
``--spec-draft-p-min`` above that would stop every draft). Scaling keeps every greedy choice unchanged.

Output hygiene: embedding dimension 0 is a constant channel that no layer writes to (the rows of
``attn_output`` and ``ffn_down`` for it are zero), so after the final RMS norm it is a positive constant;
the output head gives every ordinary token a large weight on it and the byte/special tokens zero (their
rows are otherwise zero too). Greedy decoding therefore never picks a byte piece or ``</s>``: streamed
text is valid UTF-8 and generation runs to ``max_tokens``.

Files are rewritten only when missing or written with other parameters (``models.json`` records them).
Run as ``python scripts/llamacpp_models.py DIR [--width ...]``; needs ``gguf`` and numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune._io import atomic_path, atomic_write

#: bump when the writer changes what it writes for the same parameters
FORMAT_VERSION = 2

TARGET = "target.gguf"
DRAFT_GOOD = "draft-good.gguf"
DRAFT_BAD = "draft-bad.gguf"
MANIFEST = "models.json"

_SPACE = "\u2581"  # SentencePiece's word-boundary marker

# A few hundred common English words: the vocabulary's whole-word pieces (all their prefixes are pieces
# too, so that the SentencePiece merge can reach them).
_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but have an they
you were her she there been one all we their has would when if will more no out so said what up its about
into than them can only other new some could time these two may then do first any my now such like our over
man me even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great old year off
come since against go came right used take three states himself few house use during without again place
around however home small found thought went say part once general high upon school every does got united
left number course war until always away something fact though water less public put think almost hand
enough far took head yet government system better set told nothing night end why called didn find look
asked later knew point next program city business give group toward young days let room president side
social given present several order national possible rather second face per among form important often
things looked early white case john become large big need four within felt along children saw best church
ever least power development light thing seemed family interest want members mind country area others done
turned although open god service certain kind problem began different thus help means door matter human
line men sense whole field free data model token speed draft server tune fast slow quick answer question
river mountain forest ocean garden music story number letter window table paper market simple result value
""".split()

_ASCII = [chr(c) for c in range(33, 127)]


@dataclass(frozen=True)
class ModelSpec:
    """Shape and randomness of the tiny models. Defaults: a 353 MB F32 target (width 768, 12 layers), 42 MB
    one-layer drafts.

    F32 rather than F16: llama.cpp's batched verification and its one-token decode round F16 activations
    differently, which flips the greedy choice between near-tied tokens of a random model every few hundred
    tokens, so speculative output would not match the baseline's; in F32 they match.
    """

    width: int = 768
    layers: int = 12
    draft_layers: int = 1
    heads: int = 12
    kv_heads: int = 12
    ffn: int = 2048
    eps: float = 0.03
    bad_noise: float = 0.5
    logit_scale: float = 6.0
    seed: int = 0
    dtype: str = "f32"  # f16 | f32
    context: int = 4096

    def validate(self) -> None:
        if self.width < 8 or self.width % self.heads:
            raise ValueError(f"width must be at least 8 and a multiple of heads ({self.heads}) but got {self.width}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads but got {self.kv_heads}")
        if not 1 <= self.draft_layers < self.layers:
            raise ValueError(
                f"draft_layers must be at least 1 and below layers ({self.layers}) but got {self.draft_layers}"
            )
        if self.eps < 0:
            raise ValueError(f"eps must be at least 0 but got {self.eps}")
        if self.logit_scale <= 0:
            raise ValueError(f"logit_scale must be positive but got {self.logit_scale}")
        if self.bad_noise < 0:
            raise ValueError(f"bad_noise must be at least 0 but got {self.bad_noise}")
        if self.dtype not in ("f16", "f32"):
            raise ValueError(f"dtype must be 'f16' or 'f32' but got {self.dtype!r}")


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """(pieces, scores, token types): <unk>, <s>, </s>, 256 byte pieces, then ordinary pieces."""
    import gguf

    tt = gguf.TokenType
    pieces: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [int(tt.UNKNOWN), int(tt.CONTROL), int(tt.CONTROL)]
    pieces += [f"<0x{b:02X}>" for b in range(256)]
    types += [int(tt.BYTE)] * 256
    seen = set(pieces)
    ordinary: list[str] = [_SPACE, *_ASCII, *(_SPACE + c for c in _ASCII)]
    for word in _WORDS:
        full = _SPACE + word
        ordinary += [full[:i] for i in range(2, len(full) + 1)]
        ordinary += [word[:i] for i in range(2, len(word) + 1)]
    for p in ordinary:
        if p not in seen:
            seen.add(p)
            pieces.append(p)
            types.append(int(tt.NORMAL))
    # SentencePiece merges the adjacent pair whose union has the highest score: prefer longer pieces
    scores = [0.0] * 259 + [float(len(p)) - i * 1e-6 for i, p in enumerate(pieces[259:])]
    return pieces, scores, types


def _params(spec: ModelSpec, seed: int, n_vocab: int, n_ordinary_from: int) -> dict[str, Any]:
    """All tensors of a ``spec.layers``-layer model drawn from ``seed`` (float32, numpy row-major (out, in))."""
    import numpy as np

    rng = np.random.default_rng(seed)
    d, f = spec.width, spec.ffn
    head_dim = d // spec.heads
    kv = spec.kv_heads * head_dim

    def lin(out_dim: int, in_dim: int) -> Any:
        return (rng.standard_normal((out_dim, in_dim), dtype=np.float32) / np.sqrt(in_dim)).astype(np.float32)

    embd = rng.standard_normal((n_vocab, d), dtype=np.float32)
    embd[:, 0] = 1.0  # the constant channel
    out = lin(n_vocab, d) * np.float32(spec.logit_scale)
    out[:, 0] = 0.0
    out[n_ordinary_from:, 0] = 40.0  # a bias every ordinary token gets and byte/special tokens don't
    out[:n_ordinary_from, :] = 0.0
    tensors: dict[str, Any] = {
        "token_embd.weight": embd,
        "output_norm.weight": np.ones(d, np.float32),
        "output.weight": out,
    }
    for i in range(spec.layers):
        wo = lin(d, d)
        down = lin(d, f)
        wo[0, :] = 0.0  # never write the constant channel
        down[0, :] = 0.0
        tensors.update(
            {
                f"blk.{i}.attn_norm.weight": np.ones(d, np.float32),
                f"blk.{i}.attn_q.weight": lin(d, d),
                f"blk.{i}.attn_k.weight": lin(kv, d),
                f"blk.{i}.attn_v.weight": lin(kv, d),
                f"blk.{i}.attn_output.weight": wo,
                f"blk.{i}.ffn_norm.weight": np.ones(d, np.float32),
                f"blk.{i}.ffn_gate.weight": lin(f, d),
                f"blk.{i}.ffn_up.weight": lin(f, d),
                f"blk.{i}.ffn_down.weight": down,
            }
        )
    return tensors


def _noisy_head(out: Any, spec: ModelSpec, first_ordinary: int) -> Any:
    """The output head plus independent Gaussian noise (``bad_noise`` x its scale) on the ordinary tokens'
    rows, leaving the constant-channel bias (column 0) and the zeroed byte/special rows alone."""
    import numpy as np

    rng = np.random.default_rng(spec.seed + 1_000_003)
    noisy = out.copy()
    rows = noisy[first_ordinary:, 1:]
    rows += (spec.bad_noise * spec.logit_scale / np.sqrt(spec.width)) * rng.standard_normal(
        rows.shape, dtype=np.float32
    )
    return noisy


def _write(path: Path, spec: ModelSpec, n_layers: int, tensors: dict[str, Any], name: str) -> None:
    with atomic_path(path) as tmp:  # a name of our own: setups may run side by side
        _write_gguf(tmp, spec, n_layers, tensors, name)


def _write_gguf(tmp: Path, spec: ModelSpec, n_layers: int, tensors: dict[str, Any], name: str) -> None:
    import gguf
    import numpy as np

    pieces, scores, types = vocabulary()
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(name)
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.width)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(spec.ffn)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(spec.width // spec.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(pieces))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    big = np.float16 if spec.dtype == "f16" else np.float32
    for tname, arr in tensors.items():
        if tname.startswith("blk.") and int(tname.split(".")[1]) >= n_layers:
            continue
        w.add_tensor(tname, arr if arr.ndim == 1 else arr.astype(big))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _manifest(spec: ModelSpec) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, **asdict(spec)}


def models_present(out_dir: str | os.PathLike[str], spec: ModelSpec) -> bool:
    """True when ``out_dir`` already holds the three files written with ``spec``."""
    out = Path(out_dir)
    try:
        recorded = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return recorded == _manifest(spec) and all((out / n).is_file() for n in (TARGET, DRAFT_GOOD, DRAFT_BAD))


def write_models(
    out_dir: str | os.PathLike[str], spec: ModelSpec | None = None, *, force: bool = False
) -> dict[str, Path]:
    """Write target/draft-good/draft-bad GGUF files into ``out_dir`` (skipped when present with ``spec``).

    Returns {"target": path, "draft-good": path, "draft-bad": path}.
    """
    spec = spec or ModelSpec()
    spec.validate()
    out = Path(out_dir)
    paths = {"target": out / TARGET, "draft-good": out / DRAFT_GOOD, "draft-bad": out / DRAFT_BAD}
    if not force and models_present(out, spec):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    pieces, _, types = vocabulary()
    first_ordinary = 259
    target = _params(spec, spec.seed, len(pieces), first_ordinary)
    for i in range(spec.draft_layers, spec.layers):
        target[f"blk.{i}.attn_output.weight"] *= spec.eps
        target[f"blk.{i}.ffn_down.weight"] *= spec.eps
    _write(paths["target"], spec, spec.layers, target, "autotune-tiny-target")
    _write(paths["draft-good"], spec, spec.draft_layers, target, "autotune-tiny-draft-good")
    target["output.weight"] = _noisy_head(target["output.weight"], spec, first_ordinary)
    _write(paths["draft-bad"], spec, spec.draft_layers, target, "autotune-tiny-draft-bad")
    del target
    atomic_write(out / MANIFEST, json.dumps(_manifest(spec), indent=2, sort_keys=True) + "\n")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    d = ModelSpec()
    p = argparse.ArgumentParser(prog="python scripts/llamacpp_models.py", description=__doc__.split("\n")[0])
    p.add_argument("out_dir", nargs="?", default="studies/llamacpp-models")
    p.add_argument("--width", type=int, default=d.width)
    p.add_argument("--layers", type=int, default=d.layers)
    p.add_argument("--draft-layers", type=int, default=d.draft_layers)
    p.add_argument("--heads", type=int, default=d.heads)
    p.add_argument("--kv-heads", type=int, default=d.kv_heads)
    p.add_argument("--ffn", type=int, default=d.ffn)
    p.add_argument("--eps", type=float, default=d.eps)
    p.add_argument("--bad-noise", type=float, default=d.bad_noise)
    p.add_argument("--logit-scale", type=float, default=d.logit_scale)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", choices=("f16", "f32"), default=d.dtype)
    p.add_argument("--force", action="store_true", help="rewrite even when present with the same parameters")
    a = p.parse_args(argv)
    spec = ModelSpec(
        width=a.width,
        layers=a.layers,
        draft_layers=a.draft_layers,
        heads=a.heads,
        kv_heads=a.kv_heads,
        ffn=a.ffn,
        eps=a.eps,
        bad_noise=a.bad_noise,
        logit_scale=a.logit_scale,
        seed=a.seed,
        dtype=a.dtype,
    )
    try:
        spec.validate()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not a.force and models_present(a.out_dir, spec):
        print(f"models in {a.out_dir} are up to date", file=sys.stderr)
        return 0
    paths = write_models(a.out_dir, spec, force=True)
    for key, path in paths.items():
        print(f"{key}: {path} ({path.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

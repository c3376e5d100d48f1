"""Is a speculative answer the baseline's answer? Pure classification of temperature-0 divergences.

Speculative decoding is lossless in exact arithmetic: at temperature 0 the target's greedy choice decides every
token. On real hardware the target's logits also depend on the batch shape (a verify pass of k+1 tokens is not
k+1 single-token passes), so where the baseline's two best tokens are nearly tied, a speculative server can
pick the runner-up: seen on an H200 with an F16 model, every speculative config (even a draft of one token)
diverged at the same token, where the baseline's two best tokens differed by 0.004 in log-probability. From
there on the texts follow different paths and cannot be compared any more.

So a divergence is judged at its first token, against the baseline's own log-probabilities there (a
``ReferenceOutput``: the baseline's answer with the top tokens at every position):

- ``identical``: same text;
- ``numerics``: the speculative server chose a token the baseline ranked within ``tolerance`` nats of its best
  one (a near-tie flipped by rounding): recorded, not a failure;
- ``borderline``: just past the tolerance (at most ``BORDERLINE_FACTOR`` times it, and at most
  ``BORDERLINE_NATS`` past it): rounding grows with the verify batch's width (an H200 F16 run flipped at 0.124
  nats in a 17-token verify batch while every other flip of that study was 0.012-0.06), so one such flip is not
  proof of loss; with a second prompt of the trial departing too (borderline or worse) it is (``check_outputs``);
- ``lossy``: the baseline was confident (the other token is further below its best, or not among its top tokens
  at all): a broken drafter, kernel or config;
- ``unclassified``: the server gave no log-probabilities for that position; callers fall back to the share of
  the text that matched (``verdict.lossless_min_prefix``).

The tolerance defaults from the target's data type (``default_tolerance``) and can be set in the space
(``verdict.tie_tolerance``). Baselines compared with each other (another CUDA-graph setting, a fresh start) give
the floor: a baseline that diverges from itself at a margin shows that margin is numerics on this server.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

from autotune.config import ReferenceOutput

#: characters of each answer kept from a divergence on (``Divergence.baseline_next`` / ``other_next``)
NEXT_CHARS = 32

#: a flip past the tolerance by at most this factor of it (and ``BORDERLINE_NATS``) is borderline, not lossy,
#: unless a second prompt of the trial departs too. Calibrated on the recorded H200 answers: 118 speculative and
#: baseline flips at 0.001-0.045 nats (docs/gpu-runs), one at 0.124 (17-token verify batch, F16, tolerance 0.1);
#: a broken drafter departs by whole nats (the simulator's divergent stand-in: 1-6).
BORDERLINE_FACTOR = 3.0
#: ... and by at most this many nats past the tolerance (so a coarse type's wide tolerance does not stretch it)
BORDERLINE_NATS = 0.25
#: prompts of one trial that depart (borderline or worse) that make its borderline flips lossy
BORDERLINE_PROMPTS_LOSSY = 2

#: top tokens asked for per position in reference answers
REFERENCE_TOP_N = 5

#: default near-tie tolerance (nats) by the target's weight type. Measured on an H200 (docs/benchmarks.md, "Real GPU
#: runs": 2026-12-01-h200): an F16 target's 30 speculative flips all fell within 0.04 nats of the baseline's best token
#: (0.001-0.039, the widest at 16 draft tokens, the largest verify batch); float16 gets 2.5x that. Coarser types scale
#: with their rounding (bfloat16 has 8x float16's unit in the last place); a broken drafter or kernel departs where the
#: baseline is confident, typically by whole nats.
TIE_TOLERANCE = {
    "float32": 0.02,
    "float16": 0.1,
    "bfloat16": 0.5,
    "8bit": 0.75,
    "6bit": 1.0,
    "5bit": 1.0,
    "4bit": 1.5,
    "quantized": 1.5,
}
#: when the data type is unknown
UNKNOWN_TOLERANCE = TIE_TOLERANCE["bfloat16"]


class LosslessRecord(TypedDict, total=False):
    """A trial's lossless record as stored (its user attr ``lossless``) and reported: ``check_outputs``, with the
    tolerance's source; ``borderline`` and ``cut`` only where there are some."""

    ok: bool
    tolerance: float
    lossy: list[int]
    numerics: list[int]
    unclassified: list[int]
    divergences: list[dict[str, Any]]  # ``Divergence.to_dict`` of each prompt that is not identical
    prefix_fraction: list[float]
    min_prefix_fraction: float | None
    borderline: list[int]
    cut: list[int]
    tolerance_source: str


@dataclass(frozen=True)
class Divergence:
    """How one prompt's answer compares with the baseline's."""

    prompt: int
    kind: str
    prefix_fraction: float
    char: int | None = None  # first differing character of the baseline's text
    token: int | None = None  # index of the baseline token there
    margin: float | None = None  # nats between the baseline's best token and the one the other answer took
    baseline_token: str | None = None
    other_token: str | None = None  # the baseline alternative the other answer matches, if any
    #: up to ``NEXT_CHARS`` characters of each answer from the divergence on ("" where that answer ends there): what
    #: a reader needs to tell a different token from an answer cut short
    baseline_next: str | None = None
    other_next: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Divergence:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "kind": self.kind,
            "prefix_fraction": self.prefix_fraction,
            "char": self.char,
            "token": self.token,
            "margin": self.margin,
            "baseline_token": self.baseline_token,
            "other_token": self.other_token,
            "baseline_next": self.baseline_next,
            "other_next": self.other_next,
        }

    def describe(self) -> str:
        if self.kind == "identical":
            return f"prompt {self.prompt}: identical"
        where = f"prompt {self.prompt}: diverges at character {self.char}"
        if self.token is not None:
            where += f" (token {self.token})"
        if self.kind == "unclassified":
            return f"{where}, matching prefix {self.prefix_fraction:.0%}; no log-probabilities to classify it"
        took = f"{self.other_token!r}" if self.other_token is not None else "a token outside its top choices"
        if self.other_token is None and self.other_next == "":
            took = "nothing: its answer ends there"
        gap = f"{self.margin:.3g} nats below" if self.margin is not None else "far below"
        what = {
            "numerics": "a near-tie (numerics)",
            "borderline": "just past the near-tie tolerance (borderline: lossy only if another prompt departs too)",
        }.get(self.kind, "the baseline was confident (lossy)")
        return f"{where}: the baseline chose {self.baseline_token!r}, the other took {took}, {gap} it: {what}"


def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ (the shorter length when one is a prefix of the
    other); None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def prefix_fraction(reference: str, other: str) -> float:
    """Fraction of ``reference`` that ``other`` reproduces before the first difference (1.0 when equal)."""
    if not reference:
        return 1.0 if not other else 0.0
    d = first_difference(reference, other)
    return 1.0 if d is None else d / len(reference)


def classify(
    baseline_text: str,
    other_text: str,
    reference: ReferenceOutput | None,
    tolerance: float,
    *,
    prompt: int = 0,
) -> Divergence:
    """Classify ``other_text`` against the baseline's ``baseline_text``, using the baseline's log-probabilities in
    ``reference`` at the first differing token (see the module docstring)."""
    d = first_difference(baseline_text, other_text)
    if d is None:
        return Divergence(prompt, "identical", 1.0)
    frac = prefix_fraction(baseline_text, other_text)
    div = Divergence(prompt, "unclassified", frac, char=d)
    if reference is not None and reference.tokens and reference.text[:d] == baseline_text[:d]:
        start = 0
        for j, tok in enumerate(reference.tokens):
            if start + len(tok.text) > d:
                div = _at_token(prompt, frac, d, j, start, tok, other_text, tolerance)
                break
            start += len(tok.text)
        else:  # the baseline's reference ends at the difference (it stopped): nothing ranks what follows
            div = replace(div, token=len(reference.tokens))
    return replace(div, baseline_next=baseline_text[d : d + NEXT_CHARS], other_next=other_text[d : d + NEXT_CHARS])


def _at_token(
    prompt: int, frac: float, d: int, j: int, start: int, tok: Any, other_text: str, tolerance: float
) -> Divergence:
    if not tok.top:
        return Divergence(prompt, "unclassified", frac, char=d, token=j, baseline_token=tok.text)
    best = max([lp for _, lp in tok.top] + ([tok.logprob] if tok.logprob is not None else []))
    rest = other_text[start:]
    matches = [
        (alt, lp)
        for alt, lp in tok.top
        if alt != tok.text and ((alt and rest.startswith(alt)) or (not alt and not rest))
    ]
    if not matches:
        return Divergence(prompt, "lossy", frac, char=d, token=j, baseline_token=tok.text)
    alt, lp = max(matches, key=lambda m: (len(m[0]), m[1]))  # the longest match: the token the other server took
    gap = best - lp
    kind = "numerics" if gap <= tolerance else "borderline" if gap <= borderline_limit(tolerance) else "lossy"
    return Divergence(prompt, kind, frac, char=d, token=j, margin=gap, baseline_token=tok.text, other_token=alt)


def borderline_limit(tolerance: float) -> float:
    """The largest margin (nats) a ``borderline`` flip may have under ``tolerance``."""
    return min(BORDERLINE_FACTOR * tolerance, tolerance + BORDERLINE_NATS)


def check_outputs(
    texts: Sequence[str],
    baseline_texts: Sequence[str],
    references: Sequence[ReferenceOutput | None],
    *,
    tolerance: float,
    min_prefix: float,
) -> dict[str, Any]:
    """One trial's lossless record: every prompt's divergence, and ``ok`` = no prompt is lossy (an unclassified
    divergence counts as lossy when its matching prefix is below ``min_prefix``: the rule without
    log-probabilities; borderline flips count as lossy once ``BORDERLINE_PROMPTS_LOSSY`` prompts depart)."""
    divs = []
    for i, (t, b) in enumerate(zip(texts, baseline_texts, strict=False)):
        ref = references[i] if i < len(references) else None
        divs.append(classify(b, t, ref, tolerance, prompt=i))
    borderline = [d.prompt for d in divs if d.kind == "borderline"]
    departed = [
        d.prompt for d in divs if d.kind == "lossy" or (d.kind == "unclassified" and d.prefix_fraction < min_prefix)
    ]
    # a borderline flip is proof of loss once another prompt of the trial departs too (borderline or worse)
    proof = len(borderline) + len(departed) >= BORDERLINE_PROMPTS_LOSSY
    lossy = sorted(departed + (borderline if proof else []))
    record = {
        "ok": not lossy,
        "tolerance": tolerance,
        "lossy": lossy,
        "numerics": [d.prompt for d in divs if d.kind == "numerics"],
        "unclassified": [d.prompt for d in divs if d.kind == "unclassified"],
        "divergences": [d.to_dict() for d in divs if d.kind != "identical"],
        "prefix_fraction": [d.prefix_fraction for d in divs],
        "min_prefix_fraction": min((d.prefix_fraction for d in divs), default=None),
    }
    if borderline:  # only then, so records without one keep their shape
        record["borderline"] = borderline
    cut = [d.prompt for d in divs if d.prompt in lossy and d.other_next == ""]
    if cut:  # only then, as borderline
        record["cut"] = cut
    return record


def summary_line(record: Mapping[str, Any]) -> str:
    """``lossy on prompts [2]; numerics on [0, 3]`` for reports."""
    parts = []
    if record.get("lossy"):
        parts.append(f"lossy on prompts {list(record['lossy'])}")
    if record.get("cut"):
        parts.append(
            f"cut short on {list(record['cut'])} (the answer is the baseline's with its end missing: the server "
            "returned less text, e.g. llama.cpp 0.3.23 drafting at the token limit)"
        )
    if record.get("numerics"):
        parts.append(f"near-tie flips (numerics) on {list(record['numerics'])}")
    if record.get("borderline") and not record.get("lossy"):
        parts.append(f"a flip just past the tolerance (borderline, not proof of loss) on {list(record['borderline'])}")
    if record.get("unclassified"):
        parts.append(f"unclassified on {list(record['unclassified'])}")
    return "; ".join(parts) or "identical"


def floor(divergences: Iterable[Divergence]) -> float:
    """The largest margin at which baselines diverged from each other (0 when they never did)."""
    return max((d.margin for d in divergences if d.margin is not None), default=0.0)


# ---------------------------------------------------------------------------------------- the target's type


def default_tolerance(dtype: str | None) -> float:
    return TIE_TOLERANCE.get(dtype or "", UNKNOWN_TOLERANCE)


_HF_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def model_dtype(model_path: str, extra_args: Sequence[str] = ()) -> str | None:
    """The target's data type: ``--dtype`` in the server's extra args, else a checkpoint folder's
    ``config.json`` (quantization config, ``torch_dtype``/``dtype``), else a GGUF file's tensor types. None when
    unknown (a missing or unreadable file is not an error here)."""
    args = [str(a) for a in extra_args]
    for i, a in enumerate(args):
        if a == "--dtype" and i + 1 < len(args):
            return _HF_DTYPES.get(args[i + 1].lower())
        if a.startswith("--dtype="):
            return _HF_DTYPES.get(a.split("=", 1)[1].lower())
    p = Path(model_path)
    try:
        if p.is_dir():
            return _hf_dtype(p / "config.json")
        if p.is_file() and p.suffix == ".gguf":
            return gguf_dtype(p)
    except (OSError, ValueError, struct.error):
        return None
    return None


def _hf_dtype(config: Path) -> str | None:
    if not config.is_file():
        return None
    cfg = json.loads(config.read_text())
    q = cfg.get("quantization_config")
    if isinstance(q, Mapping):
        bits = q.get("bits") or q.get("w_bit")
        method = str(q.get("quant_method", "")).lower()
        if bits in (4, "4") or "awq" in method or ("gptq" in method and bits is None):
            return "4bit"
        if "fp8" in method or bits in (8, "8"):
            return "8bit"
        return "quantized"
    return _HF_DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "").lower())


#: ggml tensor types -> our classes (ggml.h: 0 F32, 1 F16, 2/3 Q4, 6/7 Q5, 8/9 Q8, 10-15 K-quants, 30 BF16)
_GGML_TYPES = {
    0: "float32",
    1: "float16",
    2: "4bit",
    3: "4bit",
    6: "5bit",
    7: "5bit",
    8: "8bit",
    9: "8bit",
    10: "quantized",
    11: "quantized",
    12: "4bit",
    13: "5bit",
    14: "6bit",
    15: "8bit",
    30: "bfloat16",
}
_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_dtype(path: str | os.PathLike[str]) -> str | None:
    """The weight type of a GGUF file: the type holding most elements among its 2-D tensors."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            return None
        (version,) = struct.unpack("<I", f.read(4))
        n_fmt = "<Q" if version >= 2 else "<I"
        n_size = struct.calcsize(n_fmt)
        (n_tensors,) = struct.unpack(n_fmt, f.read(n_size))
        (n_kv,) = struct.unpack(n_fmt, f.read(n_size))
        for _ in range(n_kv):
            _gguf_string(f, n_fmt)
            (vtype,) = struct.unpack("<I", f.read(4))
            _gguf_skip(f, vtype, n_fmt)
        elements: dict[str, int] = {}
        for _ in range(n_tensors):
            _gguf_string(f, n_fmt)
            (n_dims,) = struct.unpack("<I", f.read(4))
            dims = struct.unpack("<" + n_fmt[1] * n_dims, f.read(n_size * n_dims))
            (ttype,) = struct.unpack("<I", f.read(4))
            f.read(8)  # offset
            if n_dims >= 2:
                kind = _GGML_TYPES.get(ttype, "quantized")
                count = 1
                for x in dims:
                    count *= int(x)
                elements[kind] = elements.get(kind, 0) + count
        return max(elements, key=lambda k: elements[k]) if elements else None


def _gguf_string(f: BinaryIO, n_fmt: str) -> bytes:
    (n,) = struct.unpack(n_fmt, f.read(struct.calcsize(n_fmt)))
    return f.read(n)


def _gguf_skip(f: BinaryIO, vtype: int, n_fmt: str) -> None:
    if vtype in _GGUF_SCALAR:
        f.seek(_GGUF_SCALAR[vtype], 1)
    elif vtype == 8:
        _gguf_string(f, n_fmt)
    elif vtype == 9:
        (itype,) = struct.unpack("<I", f.read(4))
        (count,) = struct.unpack(n_fmt, f.read(struct.calcsize(n_fmt)))
        if itype in _GGUF_SCALAR:
            f.seek(_GGUF_SCALAR[itype] * count, 1)
        else:
            for _ in range(count):
                _gguf_skip(f, itype, n_fmt)
    else:
        raise ValueError(f"unknown GGUF value type {vtype}")

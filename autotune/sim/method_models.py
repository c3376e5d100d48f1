"""The methods beyond EAGLE in the performance model: their draft costs (MTP, a standalone draft model) and the
n-gram (prompt lookup) drafter, whose acceptance follows how much an answer repeats its prompt.

Pure functions, seeded, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from autotune.sim.acceptance import (
    TEMPERATURE_OFFSET,
    DrafterProfile,
    SpecShape,
    _logit,
    _sigmoid,
    infer_category,
    rng_for,
)
from autotune.sim.timing import Hardware

#: how much an answer repeats its prompt and itself, per prompt category (0: nothing to copy, 1: an edited copy)
REPETITION: dict[str, float] = {
    "code-edit": 0.92,
    "retrieval": 0.72,
    "summarization": 0.55,
    "code": 0.32,
    "math": 0.28,
    "chat": 0.12,
    "creative": 0.04,
}

_EDIT_WORDS = tuple(
    "rewrite,edit,fix,change,rename,refactor,modify,update,replace,add a,add an,convert,translate,reformat".split(",")
)
_QUOTE_WORDS = ("summarize", "summarise", "summary", "quote", "extract", "according to", "based on the", "document")


def quoted_share(text: str) -> tuple[float, int]:
    """(share of the prompt's words inside code fences, indented code or quoted lines, number of those words)."""
    words = 0
    quoted = 0
    fenced = False
    for line in text.splitlines():
        n = len(line.split())
        words += n
        s = line.strip()
        if s.startswith("```") or s.startswith('"""'):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.startswith("\t") or s.startswith(">"):
            quoted += n
    return (quoted / words if words else 0.0), quoted


def prompt_repetition(text: str, category: str | None = None) -> float:
    """How much this prompt's answer repeats the prompt and itself, in [0, 1].

    The category's figure (``REPETITION``; an unknown or missing category counts as its keyword-inferred one) and,
    from the text, ``min(1, share / 0.6) x min(1, quoted words / 60) x (0.95 for an edit or summary instruction,
    else 0.6)`` where ``share`` is the share of the prompt's words in code blocks or quotes: the larger of the two."""
    cat = (category or "").strip().lower().replace("summarisation", "summarization")
    if cat not in REPETITION:
        cat = infer_category(text)
    share, quoted = quoted_share(text)
    low = " " + re.sub(r"\s+", " ", text.lower()) + " "
    instruct = 0.95 if any(w in low for w in (*_EDIT_WORDS, *_QUOTE_WORDS)) else 0.6
    from_text = min(1.0, share / 0.6) * min(1.0, quoted / 60.0) * instruct
    return max(REPETITION.get(cat, REPETITION["chat"]), from_text)


@dataclass(frozen=True)
class NgramProfile:
    """The n-gram (prompt lookup) drafter: per prompt repetition r in [0, 1] sets its rank-1 acceptance
    ``a_lo + (a_hi - a_lo) r`` (a Beta spread of concentration ``kappa`` around it) and its per-depth decay
    ``lam_lo + (lam_hi - lam_lo) r`` (steep for prompts with nothing to copy). ``c``, ``th``: the other trie
    continuations, as for a model drafter. Costs (ms): ``t_lookup`` per round (the CPU trie lookup and the
    draft's copy to the GPU), ``t_lookup_seq`` per extra sequence of a batch, ``t_ovh`` the round's bookkeeping
    (no draft model to extend or sample)."""

    a_lo: float = 0.10
    a_hi: float = 0.91
    lam_lo: float = 0.45
    lam_hi: float = 0.99
    c: float = 0.2
    th: float = 0.4
    kappa: float = 40.0
    t_lookup: float = 0.3
    t_lookup_seq: float = 0.02
    t_ovh: float = 1.2

    def __post_init__(self) -> None:
        for name in ("a_lo", "a_hi", "lam_lo", "lam_hi", "c", "th"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"ngram profile {name} must be in [0, 1] but got {v}")
        if self.kappa <= 0:
            raise ValueError(f"ngram profile kappa must be positive but got {self.kappa}")

    def hardware(self, hw: Hardware) -> Hardware:
        """The round's costs: no draft model (``t_ds`` 0), the lookup in ``t_ext``, extra sequences' in ``t_seq``."""
        return replace(
            hw, t_ds=0.0, t_ext=self.t_lookup, t_ovh=self.t_ovh, t_dtok=0.0, t_seq=hw.t_seq + self.t_lookup_seq
        )

    def prompt_profile(
        self, prompt: str, *, seed: int, category: str | None = None, temperature: float = 0.0
    ) -> tuple[float, DrafterProfile]:
        """(a_p, this prompt's profile): the repetition-driven acceptance, fixed per (prompt, seed, temperature)."""
        r = prompt_repetition(prompt, category)
        t = min(max(float(temperature), 0.0), 1.0)
        mu = _sigmoid(_logit(self.a_lo + (self.a_hi - self.a_lo) * r) + TEMPERATURE_OFFSET * t)
        rng = rng_for("ngram_a_p", prompt, seed, round(t, 3))
        a_p = float(rng.beta(mu * self.kappa, (1.0 - mu) * self.kappa))
        lam = self.lam_lo + (self.lam_hi - self.lam_lo) * r
        return a_p, DrafterProfile(a=min(max(a_p, 0.0), 1.0), c=self.c, th=self.th, lam=lam, kappa=self.kappa)


def ngram_shape(num_draft_tokens: int, breadth: int, max_trie_depth: int) -> SpecShape:
    """The tree an n-gram lookup can fill: ``num_draft_tokens - 1`` nodes, up to ``max_trie_depth`` deep, each
    level at most ``breadth`` wide (SGLang's --speculative-ngram-max-bfs-breadth, its resolved topk)."""
    n = max(int(num_draft_tokens), 2)
    depth = max(1, min(n - 1, int(max_trie_depth)))
    return SpecShape(depth, max(int(breadth), 1), n)

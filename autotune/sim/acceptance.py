"""Acceptance in the performance model: stable hashing and noise, drafter profiles and prompts, the draft tree.

Pure functions, seeded, no I/O. The performance model (spec: ``docs/simulator.md``) lives here and in ``timing``
(the hardware, a round, a request), ``method_models`` (n-gram, MTP and standalone costs) and ``adaptive`` (SGLang's
adaptive controller); times are milliseconds of the simulated hardware, callers convert to seconds.

- Acceptance: a drafter profile (a, c, th, lam, kappa); per prompt a_p ~ Beta(mu*kappa, (1-mu)*kappa) with
  mu = sigmoid(logit(a) + delta_category), fixed per (prompt text, drafter, seed) through a stable hash.
- Tree: depth 1 has k children; at each later depth the k best nodes by path probability get k children;
  the N-1 best nodes are kept. tau = 1 + sum of kept path probabilities.
- Time per round: T_cyc = S*t_ds + t_ext + T_ver(N) + t_ovh (+ t_tree if k > 1), with an MoE expert term in T_ver.
- A request: prefill (first token), then rounds; each round accepts L tokens drawn from the distribution of a walk
  down the kept tree. Draws are stratified so a prompt's realised accept length sits close to its expectation.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def stable_hash(*parts: object) -> int:
    """A 63-bit hash of ``parts`` that is stable across processes and Python versions (unlike ``hash()``)."""
    h = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


def rng_for(*parts: object) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(stable_hash(*parts)))


#: sd of the log of the per-server-start time factor
START_NOISE_SD = 0.025
#: sd of the log of the per-request time factor
REQUEST_NOISE_SD = 0.005


def start_factor(seed: int, launch_index: int, sd: float = START_NOISE_SD) -> float:
    """Multiplier of all of a server start's times (sd ~2.5% unless the scenario says otherwise)."""
    return math.exp(sd * float(rng_for("start", seed, launch_index).standard_normal()))


def request_factor(seed: int, launch_index: int, request_index: int, sd: float = REQUEST_NOISE_SD) -> float:
    """Multiplier of one request's times (sd ~0.5% unless the scenario says otherwise)."""
    return math.exp(sd * float(rng_for("request", seed, launch_index, request_index).standard_normal()))


@dataclass(frozen=True)
class DrafterProfile:
    """Acceptance profile: a = rank-1 acceptance at depth 1, c = chance the target's token is among the lower-ranked
    candidates when it is not rank 1, th = geometric decay over ranks >= 2, lam = decay of a per depth, kappa =
    Beta concentration of the per-prompt spread."""

    a: float
    c: float = 0.35
    th: float = 0.3
    lam: float = 1.0
    kappa: float = 120.0

    def __post_init__(self) -> None:
        for name in ("a", "c", "th", "lam"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"drafter profile {name} must be in [0, 1] but got {v}")
        if self.kappa <= 0:
            raise ValueError(f"drafter profile kappa must be positive but got {self.kappa}")


#: logit offsets of the mean acceptance per prompt category
CATEGORY_OFFSETS: dict[str, float] = {
    "code": 0.4,
    "math": 0.4,
    "chat": 0.0,
    "summarization": -0.45,
    "creative": -0.55,
    # only when a prompt's category says so (no keyword infers these): an edited copy of code in the prompt (an
    # EAGLE-3 head's 32k draft vocabulary misses the code's own identifiers, so no code bonus), an answer quoting
    # a document given in the prompt
    "code-edit": 0.0,
    "retrieval": -0.2,
}
#: logit offset at temperature 1 (scaled linearly below 1)
TEMPERATURE_OFFSET = -0.45

_CATEGORY_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "code",
        (
            "code",
            "python",
            "function",
            "implement",
            "javascript",
            "typescript",
            "c++",
            "rust ",
            "sql",
            "merge sort",
            "quicksort",
            "algorithm",
            "program that",
            "write a script",
            "class ",
            "def ",
            "bug",
            "compile",
            "regex",
        ),
    ),
    ("math", ("prove", "equation", "integral", "derivative", "solve", "calculate", "theorem", "math", "compute the")),
    ("summarization", ("summarize", "summarise", "summary", "tl;dr", "condense")),
    ("creative", ("poem", "story", "haiku", "song", "fiction", "limerick", "creative")),
)


def infer_category(text: str, category: str | None = None) -> str:
    """The prompt's category: ``category`` when given, else by keywords (code words -> code, ...), default chat."""
    if category:
        c = category.strip().lower()
        if c == "summarisation":
            c = "summarization"
        return c if c in CATEGORY_OFFSETS else "chat"
    low = " " + re.sub(r"\s+", " ", text.lower()) + " "
    for cat, words in _CATEGORY_WORDS:
        if any(w in low for w in words):
            return cat
    return "chat"


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def prompt_acceptance(
    profile: DrafterProfile,
    prompt: str,
    *,
    drafter: str,
    seed: int,
    category: str | None = None,
    temperature: float = 0.0,
    offsets: dict[str, float] | None = None,
) -> float:
    """a_p for this prompt: a Beta draw around sigmoid(logit(a) + category offset (+ temperature offset)), fixed per
    (prompt text, drafter, seed, temperature)."""
    if profile.a <= 0.0:
        return 0.0
    offs = CATEGORY_OFFSETS if offsets is None else offsets
    cat = infer_category(prompt, category)
    t = min(max(float(temperature), 0.0), 1.0)
    mu = _sigmoid(_logit(profile.a) + offs.get(cat, 0.0) + TEMPERATURE_OFFSET * t)
    rng = rng_for("a_p", prompt, drafter, seed, round(t, 3))
    return float(rng.beta(mu * profile.kappa, (1.0 - mu) * profile.kappa))


@dataclass(frozen=True)
class SpecShape:
    """SGLang's three knobs: steps S (depth), topk k (branching), num_draft_tokens N (verified nodes incl. root)."""

    steps: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.steps < 1 or self.topk < 1 or self.num_draft_tokens < 2:
            raise ValueError(f"invalid speculative shape {self}")


def rank_prob(depth: int, rank: int, a: float, c: float, th: float, lam: float) -> float:
    """P(the target's next token is the drafter's rank-``rank`` candidate at ``depth``)."""
    q1 = a * lam ** (depth - 1)
    if rank == 1:
        return q1
    return (1.0 - q1) * c * (1.0 - th) * th ** (rank - 2)


@lru_cache(maxsize=65536)
def accept_length_distribution(
    a: float, c: float, th: float, lam: float, steps: int, topk: int, num_draft_tokens: int
) -> tuple[float, ...]:
    """P(L = 1), P(L = 2), ..., P(L = steps + 1) for one round: L-1 is the depth a walk down the kept tree reaches.

    P(L >= 1 + d) = sum of the kept nodes' path probabilities at depth d.
    """
    # candidates as (path probability, depth, order); depth 1 first
    nodes: list[tuple[float, int, int]] = []
    order = 0
    frontier = [1.0]  # path probabilities of the nodes to expand at the current depth
    for d in range(1, steps + 1):
        level = []
        for p in frontier:
            for r in range(1, topk + 1):
                level.append(p * rank_prob(d, r, a, c, th, lam))
        for p in level:
            nodes.append((p, d, order))
            order += 1
        frontier = sorted(level, reverse=True)[:topk]
    # keep the N-1 best; ties go to shallower nodes, so a kept node's parent is always kept
    nodes.sort(key=lambda n: (-n[0], n[1], n[2]))
    kept = nodes[: num_draft_tokens - 1]
    reach = [0.0] * (steps + 2)
    reach[0] = 1.0
    for p, d, _ in kept:
        reach[d] += p
    reach[steps + 1] = 0.0
    probs = [max(reach[d] - reach[d + 1], 0.0) for d in range(steps + 1)]
    s = sum(probs)
    return tuple(p / s for p in probs)

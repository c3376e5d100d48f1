"""The performance model of speculative decoding: pure functions, seeded, no I/O.

Spec: ``docs/simulator.md`` (from /work/shared/reference/speculative-model.md). Times are in milliseconds of
the simulated hardware inside this module; callers convert to seconds.

- Acceptance: a drafter profile (a, c, th, lam, kappa); per prompt a_p ~ Beta(mu*kappa, (1-mu)*kappa) with
  mu = sigmoid(logit(a) + delta_category), fixed per (prompt text, drafter, seed) through a stable hash.
- Tree: depth 1 has k children; at each later depth the k best nodes by path probability get k children;
  the N-1 best nodes are kept. tau = 1 + sum of kept path probabilities.
- Time per round: T_cyc = S*t_ds + t_ext + T_ver(N) + t_ovh (+ t_tree if k > 1), with an MoE expert term in T_ver.
- A request: prefill (first token), then rounds; each round accepts L tokens drawn from the distribution of a walk
  down the kept tree. Draws are stratified so a prompt's realised accept length sits close to its expectation.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

# ---------------------------------------------------------------------------------------------------------------
# hashing and noise


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


# ---------------------------------------------------------------------------------------------------------------
# drafters and prompts


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


# ---------------------------------------------------------------------------------------------------------------
# the draft tree


@dataclass(frozen=True)
class SpecShape:
    """SGLang's three knobs: steps S (depth), topk k (branching), num_draft_tokens N (verified nodes incl. root)."""

    steps: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.steps < 1 or self.topk < 1 or self.num_draft_tokens < 2:
            raise ValueError(f"invalid speculative shape {self}")

    @property
    def max_candidates(self) -> int:
        return self.topk + (self.steps - 1) * self.topk**2


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


def kept_tree(a: float, c: float, th: float, lam: float, shape: SpecShape) -> list[tuple[int, int, float]]:
    """The kept nodes as (parent index or -1 for the root, rank, path probability), for explicit walks (tests, docs)."""
    cand: list[tuple[float, int, int, int, int]] = []  # (p, depth, order, parent_order, rank)
    order = 0
    frontier: list[tuple[float, int]] = [(1.0, -1)]
    for d in range(1, shape.steps + 1):
        level = []
        for p, parent in frontier:
            for r in range(1, shape.topk + 1):
                level.append((p * rank_prob(d, r, a, c, th, lam), d, order, parent, r))
                order += 1
        cand.extend(level)
        frontier = [(n[0], n[2]) for n in sorted(level, key=lambda n: (-n[0], n[2]))[: shape.topk]]
    cand.sort(key=lambda n: (-n[0], n[1], n[2]))
    kept = cand[: shape.num_draft_tokens - 1]
    index = {n[2]: i for i, n in enumerate(kept)}
    return [(index.get(n[3], -1) if n[3] >= 0 else -1, n[4], n[0]) for n in kept]


def walk_tree(
    tree: list[tuple[int, int, float]], a: float, c: float, th: float, lam: float, rng: np.random.Generator
) -> int:
    """One verification round by an explicit walk: the accepted length L (bonus token included)."""
    children: dict[int, dict[int, int]] = {}
    for i, (parent, rank, _) in enumerate(tree):
        children.setdefault(parent, {})[rank] = i
    node, depth = -1, 0
    while True:
        depth += 1
        u = rng.random()
        acc, rank = 0.0, 0
        r = 1
        while r <= 64:
            acc += rank_prob(depth, r, a, c, th, lam)
            if u < acc:
                rank = r
                break
            r += 1
        nxt = children.get(node, {}).get(rank) if rank else None
        if nxt is None:
            return depth
        node = nxt


def expected_accept_length(a: float, profile: DrafterProfile, shape: SpecShape) -> float:
    dist = accept_length_distribution(
        a, profile.c, profile.th, profile.lam, shape.steps, shape.topk, shape.num_draft_tokens
    )
    return sum((i + 1) * p for i, p in enumerate(dist))


def chain_accept_length(a: float, gamma: int) -> float:
    """Leviathan et al.: E[tokens per round] with a chain of ``gamma`` drafts and acceptance ``a``."""
    if a >= 1.0:
        return gamma + 1.0
    return (1.0 - a ** (gamma + 1)) / (1.0 - a)


# ---------------------------------------------------------------------------------------------------------------
# time per round


@dataclass(frozen=True)
class Hardware:
    """Times in milliseconds for one hardware/model set (CUDA graphs on or off)."""

    t_fix: float
    t_w: float
    t_tok: float
    t_ds: float
    t_ext: float
    t_ovh: float
    t_tree: float
    f_exp: float = 0.0  # share of T_w that reads experts (0 for dense targets)
    xi: float = 0.5  # routing correlation of the verified tokens
    experts: int = 0
    active: int = 0
    t_prefill_tok: float = 0.05  # prefill cost per prompt token
    # batching (zero at one sequence, so single-stream figures do not depend on them; see ``t_cycle_batch``)
    t_flop: float = 0.0  # compute roof: ms per verified token when the step is compute-bound
    t_kv: float = 0.0  # KV-cache read per context token of every sequence beyond the first
    t_dtok: float = 0.0  # draft model: ms per extra sequence x topk per draft step
    t_seq: float = 0.0  # speculative bookkeeping (sampling, tree masks, accept) per extra sequence
    xi_batch: float | None = None  # how much another sequence's token adds to the experts read (None: xi)

    @property
    def t_target(self) -> float:
        """One target step without speculation."""
        return self.t_fix + self.t_w


def t_verify(hw: Hardware, n: int) -> float:
    """T_ver(N): one target forward over N tokens; MoE experts read grow with N."""
    moe = 1.0
    if hw.f_exp > 0 and hw.experts > 0 and hw.active > 0:
        frac = hw.active / hw.experts
        n_eff = 1.0 + hw.xi * (n - 1)
        moe = (1.0 - (1.0 - frac) ** n_eff) / frac
    return hw.t_fix + hw.t_w * ((1.0 - hw.f_exp) + hw.f_exp * moe) + hw.t_tok * n


def t_cycle(hw: Hardware, shape: SpecShape | None) -> float:
    """Milliseconds per decode round (one target step when ``shape`` is None)."""
    if shape is None:
        return hw.t_target
    t = shape.steps * hw.t_ds + hw.t_ext + t_verify(hw, shape.num_draft_tokens) + hw.t_ovh
    if shape.topk > 1:
        t += hw.t_tree
    return t


def t_verify_batch(hw: Hardware, batch: int, n: int, context: float) -> float:
    """One target forward over ``batch`` sequences of ``n`` tokens each (``n`` = 1 without speculation), with
    ``context`` tokens of KV cache per sequence on average. Experts are read as by ``(1 + xi_batch (batch - 1)) *
    (1 + xi (n - 1))`` independent tokens. Memory-bound (weights, experts, KV reads) until
    the compute of ``batch * n`` tokens (``t_flop`` each) exceeds it; ``t_tok`` per token on top. At ``batch`` 1
    it is ``t_verify(hw, n)`` (``t_target`` for ``n`` = 1)."""
    tokens = batch * n
    moe = 1.0
    if hw.f_exp > 0 and hw.experts > 0 and hw.active > 0:
        frac = hw.active / hw.experts
        # a sequence's verified tokens route alike (xi); other sequences' tokens add xi_batch of one each
        xi_b = hw.xi if hw.xi_batch is None else hw.xi_batch
        n_eff = (1.0 + xi_b * (batch - 1)) * (1.0 + hw.xi * (n - 1))
        moe = (1.0 - (1.0 - frac) ** n_eff) / frac
    memory = hw.t_w * ((1.0 - hw.f_exp) + hw.f_exp * moe) + hw.t_kv * (batch - 1) * context
    compute = hw.t_flop * tokens
    extra = tokens if n > 1 else tokens - 1  # a plain step's one token is part of t_target
    return hw.t_fix + max(memory, compute) + hw.t_tok * extra


def t_cycle_batch(hw: Hardware, shape: SpecShape | None, batch: int, context: float = 0.0) -> float:
    """Milliseconds per decode step of ``batch`` running sequences (each emits one round's tokens). The draft
    runs ``steps`` passes over ``batch x topk`` tokens, the verify pass checks ``batch x num_draft_tokens``.
    Equal to ``t_cycle(hw, shape)`` at ``batch`` 1."""
    b = max(int(batch), 1)
    if shape is None:
        return t_verify_batch(hw, b, 1, context)
    extra = b - 1
    t = shape.steps * (hw.t_ds + hw.t_dtok * extra * shape.topk) + hw.t_ext + hw.t_dtok * extra
    t += t_verify_batch(hw, b, shape.num_draft_tokens, context) + hw.t_ovh + hw.t_seq * extra
    if shape.topk > 1:
        t += hw.t_tree
    return t


def t_prefill(hw: Hardware, prompt_tokens: int, speculative: bool) -> float:
    """Milliseconds to the first token: one target step over the prompt (plus the drafter's extend)."""
    t = hw.t_target + hw.t_prefill_tok * prompt_tokens
    if speculative:
        t += hw.t_ext
    return t


# ---------------------------------------------------------------------------------------------------------------
# one request


@dataclass(frozen=True)
class Phase:
    """Rounds with one accept-length distribution, producing tokens up to ``until`` (exclusive of the first token)."""

    dist: tuple[float, ...]  # P(L = 1..)
    until: int


@dataclass
class RequestPlan:
    """A generation: the first token at ``ttft_ms``, then round ``i`` emits ``tokens[i]`` tokens at ``times_ms[i]``
    (cumulative since the request arrived). Times include the noise factors."""

    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float
    tokens: np.ndarray  # int tokens per decode round
    times_ms: np.ndarray  # cumulative emission time of each round

    @property
    def verify_ct(self) -> int:
        """Verification rounds, counting the prefill's first token as SGLang does (completion / verify = accept len)."""
        return int(self.tokens.size) + 1

    @property
    def e2e_ms(self) -> float:
        return float(self.times_ms[-1]) if self.times_ms.size else self.ttft_ms

    @property
    def accept_length(self) -> float:
        return self.completion_tokens / self.verify_ct


def count_prompt_tokens(text: str) -> int:
    """A cheap tokenizer stand-in: ~1.3 tokens per word plus a chat-template overhead."""
    words = len(text.split())
    return max(1, int(round(words * 1.3)) + 8)


def _sample_lengths(dist: tuple[float, ...], n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of L, stratified over the CDF (random order), so their mean is close to the expectation."""
    cdf = np.cumsum(np.asarray(dist, dtype=float))
    cdf[-1] = 1.0
    u = (rng.permutation(n) + rng.random(n)) / n
    return np.searchsorted(cdf, u, side="right") + 1


def plan_request(
    phases: list[Phase],
    *,
    max_new: int,
    prompt_tokens: int,
    prefill_ms: float,
    cycle_ms: float,
    rng: np.random.Generator,
    factor: float = 1.0,
) -> RequestPlan:
    """Draw one request's rounds. ``max_new`` tokens exactly (the first from prefill), the last round clipped."""
    ttft = prefill_ms * factor
    if max_new <= 1:
        return RequestPlan(prompt_tokens, max(max_new, 0), ttft, np.zeros(0, dtype=np.int64), np.zeros(0))
    parts: list[np.ndarray] = []
    produced = 1
    for phase in phases:
        target = min(phase.until, max_new)
        if produced >= target:
            continue
        mean = sum((i + 1) * p for i, p in enumerate(phase.dist))
        while produced < target:
            need = target - produced
            n = max(4, int(math.ceil(need / mean * 1.02)) + 2)
            draws = _sample_lengths(phase.dist, n, rng)
            cum = np.cumsum(draws)
            stop = int(np.searchsorted(cum, need, side="left"))
            if stop < n:
                draws = draws[: stop + 1].copy()
                draws[-1] -= int(cum[stop] - need)
                parts.append(draws)
                produced = target
            else:
                parts.append(draws)
                produced += int(cum[-1])
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    times = ttft + cycle_ms * factor * np.arange(1, tokens.size + 1, dtype=float)
    return RequestPlan(prompt_tokens, max_new, ttft, tokens.astype(np.int64), times)


def expected_request_ms(phases: list[Phase], *, max_new: int, prefill_ms: float, cycle_ms: float) -> float:
    """Noise-free expected duration: prefill + E[rounds] * T_cyc, E[rounds] by Wald with the lattice overshoot."""
    if max_new <= 1:
        return prefill_ms
    rounds = 0.0
    produced = 1
    for phase in phases:
        target = min(phase.until, max_new)
        if produced >= target:
            continue
        need = target - produced
        mean = sum((i + 1) * p for i, p in enumerate(phase.dist))
        second = sum((i + 1) * i * p for i, p in enumerate(phase.dist))  # E[L(L-1)]
        overshoot = second / (2.0 * mean)
        rounds += (need + overshoot) / mean
        produced = target
    return prefill_ms + rounds * cycle_ms


# ---------------------------------------------------------------------------------------------------------------
# methods beyond EAGLE: n-gram lookup, MTP, a standalone draft model (their costs), SGLang's adaptive controller


def method_hardware(hw: Hardware, overrides: dict[str, float] | None) -> Hardware:
    """``hw`` with a method's own draft costs (``t_ds``, ``t_ext``, ``t_ovh``, ``t_dtok``, ``t_seq`` ...) in place."""
    if not overrides:
        return hw
    return replace(hw, **overrides)


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

_EDIT_WORDS = (
    "rewrite",
    "edit",
    "fix",
    "change",
    "rename",
    "refactor",
    "modify",
    "update",
    "replace",
    "add a",
    "add an",
    "convert",
    "translate",
    "reformat",
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


#: SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG (speculative/adaptive_spec_params.py)
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}


class AdaptiveSlot:
    """SGLang's ``AdaptiveStepSlot``: an EMA of the accepted draft tokens per verify (batch mean) picks num_steps
    among the slot's candidates, every ``update_interval`` verifies after ``warmup_batches``."""

    def __init__(self, initial_steps: int, cfg: dict) -> None:
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0
        self.switches = 0

    def update(self, accepted_drafts: list[float]) -> bool:
        if not accepted_drafts:
            return False
        if self.current_steps > 0:
            avg = sum(accepted_drafts) / len(accepted_drafts)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                if self.ema_accept_len > self.candidate_steps[idx] - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target != old:
            self.current_steps = target
            self.switches += 1
            return True
        return False


class AdaptiveController:
    """SGLang's ``AdaptiveSpeculativeParams``: one ``AdaptiveSlot`` per batch-size key of the config; a batch is
    padded up to a captured CUDA-graph batch size, then routed to the largest key not above it (the smallest key
    below every key)."""

    def __init__(self, initial_steps: int, config: dict, cuda_graph_bs: list[int] | None = None) -> None:
        entries = {int(k): v for k, v in config.items() if k.isdigit()}
        self.bs_keys = sorted(entries)
        self.slots = {bs: AdaptiveSlot(initial_steps, {**config, **entries[bs]}) for bs in self.bs_keys}
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({s for slot in self.slots.values() for s in slot.candidate_steps})

    def slot(self, batch: int) -> AdaptiveSlot:
        b = batch
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch)
            b = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch
        i = bisect.bisect_right(self.bs_keys, b) - 1
        return self.slots[self.bs_keys[max(0, i)]]

    def steps(self, batch: int) -> int:
        return self.slot(batch).current_steps

    def on_verify(self, accepted_drafts: list[float], batch: int) -> None:
        self.slot(batch).update(accepted_drafts)

    @property
    def switches(self) -> int:
        return sum(s.switches for s in self.slots.values())


def adaptive_shape(steps: int) -> SpecShape | None:
    """The chain SGLang's adaptive worker runs at ``steps`` (None: steps 0, no drafting)."""
    return SpecShape(steps, 1, steps + 1) if steps > 0 else None


def t_cycle_adaptive(hw: Hardware, steps: int, batch: int = 1, context: float = 0.0) -> float:
    """A decode step of the adaptive worker at ``steps``; at 0 a plain target step plus the speculative bookkeeping
    (the worker still runs its verify path without drafts)."""
    shape = adaptive_shape(steps)
    if shape is None:
        return t_cycle_batch(hw, None, batch, context) + hw.t_ovh + hw.t_seq * (max(int(batch), 1) - 1)
    return t_cycle_batch(hw, shape, batch, context)


def expected_adaptive_request_ms(
    controller: AdaptiveController,
    dist_for: Callable[[int], tuple[float, ...]],
    *,
    max_new: int,
    prefill_ms: float,
    cycle_for: Callable[[int], float],
) -> float:
    """Noise-free expected duration of one request under the adaptive controller (one stream): the controller fed
    each round's expected accepted drafts (a mean-field run of its EMA), the request's rounds charged at the steps
    in force; ``controller`` carries its state on to the next request, as the server's does."""
    if max_new <= 1:
        return prefill_ms
    produced = 1.0
    ms = prefill_ms
    while produced < max_new:
        s = controller.steps(1)
        dist = dist_for(s)
        mean = sum((i + 1) * p for i, p in enumerate(dist))
        step = min(mean, max_new - produced)
        ms += cycle_for(s) * step / mean
        produced += mean
        controller.on_verify([mean - 1.0], 1)
    return ms

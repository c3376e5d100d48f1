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

import hashlib
import math
import re
from dataclasses import dataclass
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

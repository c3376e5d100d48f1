"""Time in the performance model: the hardware's costs, one round and one prefill, one request's rounds.

Milliseconds of the simulated hardware; pure functions, seeded, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.sim.acceptance import SpecShape


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


def _weights(hw: Hardware, n_eff: float) -> float:
    """Weight reads of a forward whose tokens route like ``n_eff`` independent ones (MoE experts: more are read)."""
    moe = 1.0
    if hw.f_exp > 0 and hw.experts > 0 and hw.active > 0:
        frac = hw.active / hw.experts
        moe = (1.0 - (1.0 - frac) ** n_eff) / frac
    return hw.t_w * ((1.0 - hw.f_exp) + hw.f_exp * moe)


def t_verify(hw: Hardware, n: int) -> float:
    """T_ver(N): one target forward over N tokens; MoE experts read grow with N."""
    return hw.t_fix + _weights(hw, 1.0 + hw.xi * (n - 1)) + hw.t_tok * n


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
    # a sequence's verified tokens route alike (xi); other sequences' tokens add xi_batch of one each
    xi_b = hw.xi if hw.xi_batch is None else hw.xi_batch
    memory = _weights(hw, (1.0 + xi_b * (batch - 1)) * (1.0 + hw.xi * (n - 1))) + hw.t_kv * (batch - 1) * context
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

    @property
    def correct_drafts_histogram(self) -> list[int]:
        """SGLang's ``spec_correct_drafts_histogram`` of this request: entry j counts the decode rounds that accepted j
        draft tokens (the bonus token not counted); empty without decode rounds."""
        if not self.tokens.size:
            return []
        correct = np.maximum(self.tokens - 1, 0)
        return [int(c) for c in np.bincount(correct)]


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

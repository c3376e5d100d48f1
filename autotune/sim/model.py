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

The model lives in ``acceptance`` (hashing and noise, drafters and prompts, the tree), ``timing`` (the hardware,
a round, a request), ``method_models`` (n-gram, MTP and standalone costs) and ``adaptive`` (SGLang's adaptive
controller); this module re-exports every name.
"""

from __future__ import annotations

from autotune.sim.acceptance import (
    _CATEGORY_WORDS,
    CATEGORY_OFFSETS,
    REQUEST_NOISE_SD,
    START_NOISE_SD,
    TEMPERATURE_OFFSET,
    DrafterProfile,
    SpecShape,
    _logit,
    _sigmoid,
    accept_length_distribution,
    chain_accept_length,
    expected_accept_length,
    infer_category,
    kept_tree,
    prompt_acceptance,
    rank_prob,
    request_factor,
    rng_for,
    stable_hash,
    start_factor,
    walk_tree,
)
from autotune.sim.adaptive import (
    DEFAULT_ADAPTIVE_CONFIG,
    AdaptiveController,
    AdaptiveSlot,
    adaptive_shape,
    expected_adaptive_request_ms,
    t_cycle_adaptive,
)
from autotune.sim.method_models import (
    _EDIT_WORDS,
    _QUOTE_WORDS,
    REPETITION,
    NgramProfile,
    method_hardware,
    ngram_shape,
    prompt_repetition,
    quoted_share,
)
from autotune.sim.timing import (
    Hardware,
    Phase,
    RequestPlan,
    _sample_lengths,
    count_prompt_tokens,
    expected_request_ms,
    plan_request,
    t_cycle,
    t_cycle_batch,
    t_prefill,
    t_verify,
    t_verify_batch,
)

__all__ = [
    "AdaptiveController",
    "AdaptiveSlot",
    "CATEGORY_OFFSETS",
    "DEFAULT_ADAPTIVE_CONFIG",
    "DrafterProfile",
    "Hardware",
    "NgramProfile",
    "Phase",
    "REPETITION",
    "REQUEST_NOISE_SD",
    "RequestPlan",
    "START_NOISE_SD",
    "SpecShape",
    "TEMPERATURE_OFFSET",
    "_CATEGORY_WORDS",
    "_EDIT_WORDS",
    "_QUOTE_WORDS",
    "_logit",
    "_sample_lengths",
    "_sigmoid",
    "accept_length_distribution",
    "adaptive_shape",
    "chain_accept_length",
    "count_prompt_tokens",
    "expected_accept_length",
    "expected_adaptive_request_ms",
    "expected_request_ms",
    "infer_category",
    "kept_tree",
    "method_hardware",
    "ngram_shape",
    "plan_request",
    "prompt_acceptance",
    "prompt_repetition",
    "quoted_share",
    "rank_prob",
    "request_factor",
    "rng_for",
    "stable_hash",
    "start_factor",
    "t_cycle",
    "t_cycle_adaptive",
    "t_cycle_batch",
    "t_prefill",
    "t_verify",
    "t_verify_batch",
    "walk_tree",
]

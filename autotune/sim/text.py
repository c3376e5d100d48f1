"""Output text: deterministic per prompt at temperature 0, identical whatever the speculative config (lossless).

A token is one word-piece (" the", "ing", ","); text is drawn from a fixed word list with a generator seeded by the
prompt, so the first n tokens do not depend on max_tokens.
"""

from __future__ import annotations

import random
from functools import lru_cache

from autotune.sim.model import stable_hash

_WORDS = (
    "the of and to in is that for it as with was on be by this are from or an at which not but have can "
    "has its one all more also their they been when there so these other such would into some than only "
    "time first new two may then most could each over used many like data system model process energy light "
    "water space mass gravity field theory change climate carbon plant cell leaf sun heat earth force speed "
    "function list array merge sort left right value return result index loop code program learning rule "
    "example pattern input output train test error layer network simple way because however therefore "
    "while where what how why between through during without under within about against"
).split()
_PIECES = tuple(" " + w for w in _WORDS) + ("ing", "ed", "s", "ly", ",", ".", ":", "\n", "\n\n", " (", ")")


@lru_cache(maxsize=4096)
def token_stream(prompt: str, n: int, salt: str = "") -> tuple[str, ...]:
    """The first ``n`` tokens a temperature-0 server answers to ``prompt`` (``salt`` makes a different stream)."""
    rng = random.Random(stable_hash("text", prompt, salt))
    return tuple(rng.choice(_PIECES) for _ in range(n))


def divergence_point(prompt: str, drafter: str) -> int:
    """Where a broken drafter's output departs from the true text (20..219 tokens in)."""
    return 20 + stable_hash("diverge", prompt, drafter) % 200


def output_tokens(prompt: str, n: int, *, diverge_at: int | None = None, sample_seed: int | None = None) -> list[str]:
    """The ``n`` tokens of an answer. ``diverge_at``: a broken server's text changes from there on.
    ``sample_seed``: temperature > 0, a different stream per request."""
    if sample_seed is not None:
        return list(token_stream(prompt, n, f"sample-{sample_seed}"))
    base = token_stream(prompt, n)
    if diverge_at is None or diverge_at >= n:
        return list(base)
    return list(base[:diverge_at]) + list(token_stream(prompt, n, "diverged")[diverge_at:])

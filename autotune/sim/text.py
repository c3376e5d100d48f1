"""Output text and its log-probabilities: deterministic per prompt at temperature 0, identical whatever the
speculative config (lossless), except at a prompt's near tie.

A token is one word-piece (" the", "ing", ","); text is drawn from a fixed word list with a generator seeded by the
prompt, so the first n tokens do not depend on max_tokens. Every position also has a deterministic distribution
(seeded by prompt, stream and position): the chosen token first, the runner-up a confident margin below it, further
alternatives lower still, all distinct tokens of the vocabulary.

Near ties (``near_ties`` > 0): a prompt drawn by a stable hash has, at one early position, two best tokens
``NEAR_TIE_MARGIN`` nats apart. A server without a drafter keeps the best one; a server with a drafter loaded (a
different verify batch shape, so different numerics on a real GPU) takes the runner-up there and continues along
another deterministic stream, the same for every speculative config.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from autotune.config import TokenChoice
from autotune.sim.acceptance import stable_hash

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
#: the simulator's vocabulary; a token's id is its index here
VOCAB: tuple[str, ...] = _PIECES
_TOKEN_ID = {p: i for i, p in enumerate(VOCAB)}

#: nats between the baseline's two best tokens at a near tie
NEAR_TIE_MARGIN = 0.004
#: positions (inclusive) a near tie can fall at: before any broken drafter's divergence point (20..219)
NEAR_TIE_POSITIONS = (3, 19)
#: nats between the best and the second-best token everywhere else: far above any numerics tolerance
MARGIN_RANGE = (1.0, 6.0)
#: log-probability of the chosen token (capped so that the listed probabilities sum to at most 1)
CHOSEN_LOGPROB_RANGE = (-1.2, -0.01)
#: nats between consecutive alternatives after the runner-up
TAIL_GAP_RANGE = (0.7, 2.5)

_SALT_NEAR_TIE = "near-tie"
_SALT_DIVERGED = "diverged"


def token_id(piece: str) -> int:
    """The id of a vocabulary token (its index in ``VOCAB``)."""
    return _TOKEN_ID[piece]


@lru_cache(maxsize=4096)
def token_stream(prompt: str, n: int, salt: str = "") -> tuple[str, ...]:
    """The first ``n`` tokens a temperature-0 server answers to ``prompt`` (``salt`` makes a different stream)."""
    rng = random.Random(stable_hash("text", prompt, salt))
    return tuple(rng.choice(_PIECES) for _ in range(n))


def divergence_point(prompt: str, drafter: str) -> int:
    """Where a broken drafter's output departs from the true text (20..219 tokens in)."""
    return 20 + stable_hash("diverge", prompt, drafter) % 200


def near_tie_position(prompt: str, near_ties: float) -> int | None:
    """The position of ``prompt``'s near tie (3..19), or None: a prompt has one with probability ``near_ties``,
    drawn by a stable hash of its text (so a larger ``near_ties`` keeps the prompts a smaller one chose)."""
    if near_ties <= 0:
        return None
    u = stable_hash("near-tie", prompt) % 1_000_000 / 1_000_000
    if u >= near_ties:
        return None
    lo, hi = NEAR_TIE_POSITIONS
    return lo + stable_hash("near-tie-at", prompt) % (hi - lo + 1)


def near_tie_runner_up(prompt: str, position: int) -> str:
    """The baseline's second-best token at the near tie of ``prompt`` at ``position``: never its best one, and
    neither is a prefix of the other, so the two texts part inside that token (a character-level comparison finds
    the tie where it is)."""
    best = token_stream(prompt, position + 1)[position]
    pool = [p for p in VOCAB if not p.startswith(best) and not best.startswith(p)]
    return pool[stable_hash("near-tie-token", prompt, position) % len(pool)]


def _alternatives(
    rng: random.Random, exclude: tuple[str, ...], lp: float, count: int, *, not_after: tuple[str, ...] = ()
) -> list[tuple[str, float]]:
    """``count`` distinct vocabulary tokens not in ``exclude`` and not starting with any of ``not_after``, the first
    at ``lp``, each further one lower. Each draw depends only on the ones before it, so a shorter list is a prefix of
    a longer one."""
    # the vocabulary's tokens are distinct: removing one is filtering it out (a filter of the whole vocabulary per
    # token was ~0.07 CPU-s of a study's reference answers)
    pool = list(VOCAB)
    for p in exclude:
        if p in pool:
            pool.remove(p)
    if not_after:
        pool = [p for p in pool if not p.startswith(not_after)]
    out = []
    for _ in range(min(count, len(pool))):
        j = rng.randrange(len(pool))
        pool[j], pool[-1] = pool[-1], pool[j]
        out.append((pool.pop(), lp))
        lp -= rng.uniform(*TAIL_GAP_RANGE)
    return out


def _chosen_cap(margin: float) -> float:
    """The largest chosen-token log-probability with which the listed tokens' probabilities sum to at most 1
    (runner-up ``margin`` below it, each further one at most exp(-0.7) of the previous)."""
    return -math.log1p(2.0 * math.exp(-margin))


def token_choice(prompt: str, stream: str, position: int, chosen: str, top_n: int) -> TokenChoice:
    """``chosen`` at ``position`` of ``prompt``'s ``stream``, with the ``top_n`` most likely tokens there: ``chosen``
    first, the runner-up 1..6 nats below, further alternatives lower; deterministic, prefix-stable in ``top_n``."""
    rng = random.Random(stable_hash("logprob", prompt, stream, position))
    margin = rng.uniform(*MARGIN_RANGE)
    lo, hi = CHOSEN_LOGPROB_RANGE
    lp = rng.uniform(lo, min(hi, _chosen_cap(margin)))
    top = [(chosen, lp)]
    if top_n > 1:
        top += _alternatives(rng, (chosen,), lp - margin, top_n - 1)
    return TokenChoice(chosen, lp, tuple(top[: max(top_n, 0)]))


def near_tie_choice(prompt: str, position: int, first: str, second: str, top_n: int) -> TokenChoice:
    """A near tie: ``first`` (the chosen token) and ``second`` ``NEAR_TIE_MARGIN`` nats apart, then lower ones, none
    of which extends ``first`` or ``second`` (so the longest listed token a diverging text starts with is the tie's)."""
    rng = random.Random(stable_hash("near-tie-logprob", prompt, position))
    cap = _chosen_cap(NEAR_TIE_MARGIN)
    lp = rng.uniform(cap - 0.1, cap)
    second_lp = lp - NEAR_TIE_MARGIN
    top = [(first, lp), (second, second_lp)]
    if top_n > 2:
        tail_lp = second_lp - rng.uniform(*TAIL_GAP_RANGE)
        top += _alternatives(rng, (first, second), tail_lp, top_n - 2, not_after=(first, second))
    return TokenChoice(first, lp, tuple(top[: max(top_n, 0)]))


@dataclass(frozen=True)
class Answer:
    """How the ``n`` tokens of one answer come about, and so their log-probabilities.

    The true stream, except: ``sample_seed`` (temperature > 0) draws another stream per request; ``tie_at`` is the
    prompt's near tie (None: none), where a ``flipped`` server (a drafter is loaded) takes the runner-up and goes on
    along the "near-tie" stream; from ``diverge_at`` a broken server goes on along the "diverged" stream."""

    prompt: str
    n: int
    diverge_at: int | None = None
    sample_seed: int | None = None
    tie_at: int | None = None
    flipped: bool = False

    def _tie(self, i: int) -> bool:
        return self.tie_at == i and self.sample_seed is None and (self.diverge_at is None or i < self.diverge_at)

    def stream_at(self, i: int) -> str:
        """The salt of the stream position ``i`` is drawn from (its tie position excepted)."""
        if self.sample_seed is not None:
            return f"sample-{self.sample_seed}"
        if self.diverge_at is not None and i >= self.diverge_at:
            return _SALT_DIVERGED
        if self.flipped and self.tie_at is not None and i > self.tie_at:
            return _SALT_NEAR_TIE
        return ""

    def tokens(self) -> tuple[str, ...]:
        return _answer_tokens(self)

    def choices(self, top_n: int) -> tuple[TokenChoice, ...]:
        """Each token with the ``top_n`` most likely tokens at its position (most likely first)."""
        return _answer_choices(self, max(min(int(top_n), len(VOCAB)), 0))


@lru_cache(maxsize=1024)
def _answer_tokens(a: Answer) -> tuple[str, ...]:
    if a.sample_seed is not None:
        return token_stream(a.prompt, a.n, a.stream_at(0))
    out = list(token_stream(a.prompt, a.n))
    t = a.tie_at
    if a.flipped and t is not None and t < a.n and a._tie(t):
        out[t] = near_tie_runner_up(a.prompt, t)
        out[t + 1 :] = token_stream(a.prompt, a.n, _SALT_NEAR_TIE)[t + 1 :]
    if a.diverge_at is not None and a.diverge_at < a.n:
        out[a.diverge_at :] = token_stream(a.prompt, a.n, _SALT_DIVERGED)[a.diverge_at :]
    return tuple(out)


@lru_cache(maxsize=256)
def _answer_choices(a: Answer, top_n: int) -> tuple[TokenChoice, ...]:
    out = []
    for i, tok in enumerate(a.tokens()):
        if a._tie(i):
            best, runner_up = token_stream(a.prompt, a.n)[i], near_tie_runner_up(a.prompt, i)
            first, second = (runner_up, best) if a.flipped else (best, runner_up)
            out.append(near_tie_choice(a.prompt, i, first, second, top_n))
        else:
            out.append(token_choice(a.prompt, a.stream_at(i), i, tok, top_n))
    return tuple(out)

"""Per-position acceptance: how many drafts had their first i tokens accepted, and what that predicts.

A server that counts acceptance per draft position (vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos``
counter with a ``position`` label; SGLang's per-request ``spec_correct_drafts_histogram``) says, for each position
i = 1..K of a draft of K tokens, in how many drafts the first i draft tokens were all accepted (vLLM's
``SpecDecodingStats.observe_draft`` adds one to positions 0..n-1 of a draft with n accepted tokens: a prefix count).
``AcceptPositions`` holds those counts with the number of drafts; ``rates`` are P(first i accepted).

``acceptance_profile(rates)`` turns them into the expected number of accepted draft tokens at every depth
k <= K: E[accepted | depth k] = sum_{i<=k} P(first i accepted) (the accepted length is sum_i 1[first i accepted]).
It is exact for chain drafting (a chain's first k draft tokens are the same whatever K is: the drafter proposes
position i from the tokens before it); for a draft tree (top-k > 1) the counts are the accepted depth, and a
smaller tree is not the same tree cut. The acceptance length with the bonus token is 1 + the profile.

These figures explain a method's measured throughput; they never rank anything (the ranking is measured
throughput against the baseline).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AcceptPositions", "acceptance_profile", "from_histogram", "pool", "summary"]

#: tolerance of the rates' checks (pooled float counters)
_EPS = 1e-9


@dataclass(frozen=True)
class AcceptPositions:
    """``accepted[i]``: drafts whose first i+1 draft tokens were accepted; ``drafts``: drafts made."""

    drafts: int
    accepted: tuple[int, ...]

    @property
    def rates(self) -> tuple[float, ...]:
        """P(first i accepted) for i = 1..K (empty without drafts)."""
        if self.drafts <= 0:
            return ()
        return tuple(a / self.drafts for a in self.accepted)

    @property
    def profile(self) -> tuple[float, ...] | None:
        """The expected accepted draft tokens at each depth k = 1..K (``acceptance_profile``); None for counts that
        are not prefix counts (a malformed server answer) or none."""
        try:
            return acceptance_profile(self.rates) or None
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "accepted": list(self.accepted)}

    @staticmethod
    def from_dict(d: Mapping[str, Any] | None) -> AcceptPositions | None:
        """As ``to_dict`` wrote it; None for anything else (an older record has none)."""
        if not isinstance(d, Mapping):
            return None
        drafts, accepted = d.get("drafts"), d.get("accepted")
        if not isinstance(drafts, int) or not isinstance(accepted, list):
            return None
        if not all(isinstance(a, int) for a in accepted):
            return None
        return AcceptPositions(drafts, tuple(accepted))


def from_histogram(histogram: Sequence[int]) -> AcceptPositions | None:
    """SGLang's ``spec_correct_drafts_histogram`` (``histogram[j]``: verify steps that accepted j draft tokens, the
    bonus token not counted) as positions: drafts = the histogram's sum, accepted at position i = the steps that
    accepted at least i. None when empty or malformed."""
    if not histogram or not all(isinstance(h, int) and h >= 0 for h in histogram):
        return None
    drafts = sum(histogram)
    if drafts <= 0:
        return None
    accepted = tuple(sum(histogram[j:]) for j in range(1, len(histogram)))
    return AcceptPositions(drafts, accepted)


def pool(items: Iterable[AcceptPositions | None]) -> AcceptPositions | None:
    """Several requests' counts as one (drafts and each position summed; a shorter list counts 0 beyond its end);
    None when none has a draft."""
    given = [p for p in items if p is not None and p.drafts > 0]
    if not given:
        return None
    depth = max(len(p.accepted) for p in given)
    accepted = [0] * depth
    for p in given:
        for i, a in enumerate(p.accepted):
            accepted[i] += a
    return AcceptPositions(sum(p.drafts for p in given), tuple(accepted))


def acceptance_profile(per_pos_rates: Sequence[float]) -> tuple[float, ...]:
    """The expected number of accepted draft tokens at every depth k = 1..K (index k-1) from the per-position
    rates ``per_pos_rates[i-1]`` = P(first i draft tokens accepted): sum_{i<=k} P(first i accepted).

    Raises ValueError for a rate outside [0, 1] or one larger than the rate before it (P(first i accepted) cannot
    grow with i: counts of a prefix)."""
    out: list[float] = []
    total = 0.0
    prev = 1.0
    for i, r in enumerate(per_pos_rates, start=1):
        r = float(r)
        if not (-_EPS <= r <= 1.0 + _EPS):
            raise ValueError(f"per-position acceptance rate at position {i} is {r}; expected a value in [0, 1]")
        if r > prev + _EPS:
            raise ValueError(
                f"per-position acceptance rate at position {i} ({r:.6g}) exceeds the one at position {i - 1} "
                f"({prev:.6g}); expected non-increasing rates (P(first i accepted))"
            )
        total += r
        prev = r
        out.append(total)
    return tuple(out)


def summary(positions: AcceptPositions | None) -> dict[str, object] | None:
    """A report's JSON form: ``drafts``, ``rates`` (P(first i accepted), i = 1..K) and ``profile``; None without
    counts."""
    if positions is None or positions.drafts <= 0:
        return None
    profile = positions.profile
    return {"drafts": positions.drafts, "rates": list(positions.rates), "profile": list(profile) if profile else None}

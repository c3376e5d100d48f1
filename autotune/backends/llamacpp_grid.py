"""A flat llama.cpp space's values (no ``search.methods``): its ``draft_p_min`` values and its grid, every feasible
config (``Backend.grid``: the design, the surrogate's picks, the settled stop and confirmation thinning use it).
The other knobs' values are the backend's own rules (``LlamaCppBackend._type_values`` and friends), so the grid is
what ``suggest`` can draw."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from autotune.backends import encode
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.space import FloatRange

if TYPE_CHECKING:
    from autotune.backends.llamacpp import LlamaCppBackend
    from autotune.space import Space

#: the server's default draft_p_min (common/common.h of the targeted release)
DEFAULT_P_MIN = 0.0


def p_min_values(space: Space) -> list[float] | None:
    """The space's draft_p_min values in [0, 1] (the server default when not searched); None for a float range."""
    spec = space.search.knobs.get("draft_p_min")
    if spec is None:
        return [DEFAULT_P_MIN]
    if isinstance(spec, FloatRange):
        return None
    return [float(v) for v in encode.spec_values(spec) or [] if 0.0 <= float(v) <= 1.0]


def nearest_p_min(space: Space) -> float | None:
    """The space's draft_p_min nearest the server's default (None: no value of the space lies in [0, 1])."""
    spec = space.search.knobs.get("draft_p_min")
    if isinstance(spec, FloatRange):
        return min(max(DEFAULT_P_MIN, spec.low, 0.0), spec.high, 1.0)
    values = p_min_values(space) or []
    return min(values, key=lambda v: (abs(v - DEFAULT_P_MIN), v)) if values else None


def flat_grid(backend: LlamaCppBackend, space: Space) -> list[TrialConfig] | None:
    """drafter x CUDA graphs x spec_type x draft_n_max x draft_n_min (<= n_max) x draft_p_min, in that nested order,
    each resolved as ``suggest`` would draw it (duplicates once). None when ``draft_p_min`` is a float range (not a
    finite grid: left to the sampler)."""
    p_values = p_min_values(space)
    if p_values is None:
        return None
    points = (
        (drafter, bool(cg), spec_type, n_max, n_min, p_min)
        for drafter in space.searched_drafters()
        for cg in space.search.cuda_graph
        for spec_type in backend._type_values(space, drafter)
        for n_max in backend._n_max_values(space)
        for n_min in backend._n_min_values(space, n_max)
        for p_min in p_values
    )
    out: dict[str, TrialConfig] = {}
    for drafter, cg, spec_type, n_max, n_min, p_min in points:
        cfg = TrialConfig.make(
            drafter, cg, spec_type=spec_type, draft_n_max=n_max, draft_n_min=n_min, draft_p_min=p_min
        )
        with contextlib.suppress(InfeasibleConfig):
            eff = backend.resolve(cfg, space)
            out.setdefault(eff.key(), eff)
    return list(out.values())


__all__ = ["DEFAULT_P_MIN", "flat_grid", "nearest_p_min", "p_min_values"]

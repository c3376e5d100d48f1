"""llama-server's per-request draft knobs (``LlamaCppBackend.per_request``): ``draft_n_max``, ``draft_n_min`` and
``draft_p_min`` sent as ``speculative.n_max`` / ``speculative.n_min`` / ``speculative.p_min`` in the completion
body, and the check of each answer's draft counters.

What the sources say:

- Builds that take them (e.g. llama-cpp-python 0.3.16's llama.cpp, ``tools/server/server.cpp``
  ``params_from_json_cmpl``) read the three keys per request (defaults: the launch flags), clamp
  ``n_min <= n_max``, size the slot's speculative batch from the request's ``n_max`` when the task starts
  (``launch_slot_with_task``: ``batch_spec = llama_batch_init(slot.params.speculative.n_max + 1)``), cap each draft
  at it (``n_draft_max = slot.params.speculative.n_max``), pass ``p_min`` to the drafter and drop drafts shorter
  than ``n_min``; ``/props`` reports the launch values.
- llama-cpp-python 0.3.22 and 0.3.23 read them too (``tools/server/server-task.cpp``: ``params.speculative.draft``,
  the slot's draft capped by ``common_speculative_n_max(spec, task->params.speculative)``); 0.3.23 is the newest
  such release (``LLAMA_CPP_PYTHON_HONOURING_VERSION``, built by ``scripts/llamacpp_setup.sh --honouring``; the live
  shared-start test runs on it). From 0.3.24 on the block sits in ``#if 0``.
- llama-cpp-python 0.3.36's llama.cpp (the build ``scripts/llamacpp_setup.sh`` makes) has the same three fields in
  ``tools/server/server-schema.cpp`` inside ``#if 0`` ("to keep things simple, we disable speculative parameter
  adjustments for now"): the keys are accepted and silently ignored, every draft is capped by the launch's
  ``--spec-draft-n-max`` (``common/speculative.cpp``), its speculative batch sized from it.

So a shared start is launched with the space's largest ``draft_n_max`` (every request's value is then within what
any build sized for), ``draft_n_min`` 0 and ``draft_p_min`` 0.0 (drafts run to ``n_max``: an ignored value shows).

The check. An answer's final chunk carries ``timings.predicted_n`` (P, tokens generated), ``draft_n`` (D, draft
tokens proposed; absent when 0) and ``draft_n_accepted`` (A), not the number of verification steps. Every target
decode step yields one token of its own plus the drafts it accepted, so the decode steps number at most ``P - A``,
and a server that honours ``n_max`` drafted ``D <= n_max * (P - A)``. A larger D is proof that it ran another
``n_max`` (the launch's): ``ignored``. A server that ignores the request drafts the launch's ``n_max`` at almost
every step (p_min 0 at launch), so with a requested ``n_max`` below the launch's the bound separates the two:
``honoured``; at the launch's own ``n_max`` the counters cannot tell them apart: ``consistent``. ``n_min`` and
``p_min`` leave no bound in these counters: they are trusted because the server reads the three keys together
(one block of its request schema), which the ``n_max`` bound shows, and a shared start is verified once by a
request at ``n_max`` 1 before its first per-request trial (``probe_body``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.backends.base import _int_or_none
from autotune.backends.llamacpp_grid import p_min_values
from autotune.backends.per_request import Check, Honoured, PerRequest
from autotune.config import EffectiveConfig
from autotune.space import FloatRange

if TYPE_CHECKING:
    from autotune.space import Space

#: our knob -> the completion body key llama-server reads
BODY_KEYS = {
    "draft_n_max": "speculative.n_max",
    "draft_n_min": "speculative.n_min",
    "draft_p_min": "speculative.p_min",
}
#: the shared launch's values of the knobs that are not sized from the space
LAUNCH_N_MIN = 0
LAUNCH_P_MIN = 0.0


class LlamaPerRequest(PerRequest):
    """The draft knobs of draft-model spec types, for a space whose largest ``draft_n_max`` is ``launch_n_max``."""

    knobs = tuple(BODY_KEYS)

    def __init__(
        self,
        launch_n_max: int,
        draft_model_types: Sequence[str],
        *,
        n_max_values: Sequence[int] = (),
        n_min_values: Sequence[int] = (0,),
        p_min_values: Sequence[float] = (0.0,),
    ) -> None:
        """``*_values``: the space's values of each knob (a float range as a few points), for ``siblings``."""
        if launch_n_max < 1:
            raise ValueError(f"launch_n_max must be at least 1 but got {launch_n_max}")
        self.launch_n_max = int(launch_n_max)
        self.types = tuple(draft_model_types)
        self.n_max_values = tuple(int(v) for v in n_max_values) or (self.launch_n_max,)
        self.n_min_values = tuple(int(v) for v in n_min_values)
        self.p_min_values = tuple(float(v) for v in p_min_values)

    def siblings(self, config: EffectiveConfig) -> list[EffectiveConfig]:
        """Every (n_max, n_min <= n_max, p_min) of the space on ``config``'s drafter, type and CUDA graphs."""
        out: list[EffectiveConfig] = []
        for n_max in self.n_max_values:
            for n_min in (v for v in self.n_min_values if v <= n_max):
                for p_min in self.p_min_values:
                    knobs = dict(config.knob_dict)
                    knobs.update(draft_n_max=n_max, draft_n_min=n_min, draft_p_min=p_min)
                    out.append(EffectiveConfig.make(config.drafter, config.cuda_graph, **knobs))
        return out

    def applies(self, config: EffectiveConfig) -> bool:
        """Draft-model types only: the request keys set the draft model's parameters (n-gram types have their own)."""
        return not config.is_baseline and str(config.knob("spec_type")) in self.types

    def launch_config(self, config: EffectiveConfig) -> EffectiveConfig:
        knobs = dict(config.knob_dict)
        knobs.update(draft_n_max=self.launch_n_max, draft_n_min=LAUNCH_N_MIN, draft_p_min=LAUNCH_P_MIN)
        return EffectiveConfig.make(config.drafter, config.cuda_graph, **knobs)

    def body(self, config: EffectiveConfig) -> dict[str, Any]:
        return {
            "speculative.n_max": int(config.knob("draft_n_max")),
            "speculative.n_min": int(config.knob("draft_n_min")),
            "speculative.p_min": float(config.knob("draft_p_min")),
        }

    def probe_body(self, launch: EffectiveConfig) -> dict[str, Any] | None:
        """``n_max`` 1 (below any shared launch's ``n_max`` of 2 or more); None for a launch at ``n_max`` 1."""
        if int(launch.knob("draft_n_max")) < 2:
            return None
        return {"speculative.n_max": 1, "speculative.n_min": 0, "speculative.p_min": 0.0}

    def telemetry(self, chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        """``predicted_n``, ``draft_n`` (0 when absent) and ``draft_n_accepted`` of the last chunk with ``timings``."""
        for obj in reversed(chunks):
            timings = obj.get("timings")
            if not isinstance(timings, Mapping):
                continue
            predicted = _int_or_none(timings.get("predicted_n"))
            if predicted is None:
                return None
            return {
                "predicted_n": predicted,
                "draft_n": _int_or_none(timings.get("draft_n")) or 0,
                "draft_n_accepted": _int_or_none(timings.get("draft_n_accepted")) or 0,
            }
        return None

    def check(self, sent: Mapping[str, Any], launch: EffectiveConfig, telemetry: Mapping[str, Any] | None) -> Check:
        n_max = _int_or_none(sent.get("speculative.n_max"))
        launch_n_max = int(launch.knob("draft_n_max"))
        figures: dict[str, Any] = {"n_max": n_max, "launch_n_max": launch_n_max, **dict(telemetry or {})}
        if n_max is None:
            return Check(Honoured.UNKNOWN, "no speculative.n_max was sent", figures)
        if telemetry is None:
            return Check(Honoured.UNKNOWN, "the answer carries no draft counters (timings)", figures)
        predicted = int(telemetry["predicted_n"])
        drafted = int(telemetry["draft_n"])
        accepted = int(telemetry["draft_n_accepted"])
        steps = predicted - accepted
        figures["steps_at_most"] = steps
        if drafted <= 0 or steps <= 0:
            return Check(Honoured.UNKNOWN, f"nothing drafted ({drafted} draft tokens, {predicted} generated)", figures)
        per_step = drafted / steps
        figures["drafted_per_step_at_least"] = round(per_step, 3)
        if drafted > n_max * steps:
            return Check(
                Honoured.NO,
                f"drafted {drafted} tokens in at most {steps} decode steps ({per_step:.2f} a step): more than the "
                f"requested n_max {n_max}; the server ran another n_max (launched with {launch_n_max})",
                figures,
            )
        if n_max < launch_n_max:
            return Check(
                Honoured.YES,
                f"drafted {drafted} tokens in at most {steps} decode steps ({per_step:.2f} a step): within the "
                f"requested n_max {n_max}, below the launch's {launch_n_max}",
                figures,
            )
        return Check(
            Honoured.CONSISTENT,
            f"drafted {drafted} tokens in at most {steps} decode steps: within n_max {n_max}, the launch's own value",
            figures,
        )


#: points of a ``draft_p_min`` range a shared start's siblings are drawn from (``LlamaPerRequest.siblings``)
P_MIN_POINTS = 5


def for_space(
    space: Space,
    n_max_values: Sequence[int],
    n_min_values: Callable[[Space, int], Sequence[int]],
    draft_model_types: Sequence[str],
) -> LlamaPerRequest:
    """The per-request knobs of ``space`` (its ``draft_n_max`` / ``draft_n_min`` values as the backend allows them;
    ``draft_p_min``: its listed values, ``P_MIN_POINTS`` points of its range, or the server default 0.0)."""
    spec = space.search.knobs.get("draft_p_min")
    if isinstance(spec, FloatRange):
        low, high = max(0.0, float(spec.low)), min(1.0, float(spec.high))
        p_values = sorted({round(low + (high - low) * i / (P_MIN_POINTS - 1), 4) for i in range(P_MIN_POINTS)})
    else:  # the listed values in [0, 1], or the server default (the launch's) when not searched
        p_values = p_min_values(space) or []
    return LlamaPerRequest(
        launch_n_max(n_max_values),
        draft_model_types,
        n_max_values=n_max_values,
        n_min_values=n_min_values(space, launch_n_max(n_max_values)),
        p_min_values=p_values,
    )


def launch_n_max(values: Sequence[int]) -> int:
    """The shared launch's ``draft_n_max``: the largest the space allows (every request's value lies within it)."""
    return max(int(v) for v in values)


__all__ = [
    "BODY_KEYS",
    "LAUNCH_N_MIN",
    "LAUNCH_P_MIN",
    "P_MIN_POINTS",
    "LlamaPerRequest",
    "for_space",
    "launch_n_max",
]

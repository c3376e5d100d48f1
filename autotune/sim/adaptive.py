"""SGLang's adaptive speculative controller in the performance model: its default config, its per-batch-size
slots, the chain it runs at each step count and a request's expected time under it.

Pure functions, no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.sim.acceptance import SpecShape
from autotune.sim.timing import Hardware, t_cycle_batch


class AdaptiveSlot:
    """SGLang's ``AdaptiveStepSlot``: an EMA of the accepted draft tokens per verify (batch mean) picks num_steps
    among the slot's candidates, every ``update_interval`` verifies after ``warmup_batches``."""

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidate_steps: list[int] = sorted(set(cfg["candidate_steps"]))
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

    def update(self, accepted_drafts: Sequence[float]) -> None:
        if not accepted_drafts:
            return
        if self.current_steps > 0:
            avg = sum(accepted_drafts) / len(accepted_drafts)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self._batch_count += 1
        after_warmup = self._batch_count - self.warmup_batches
        if after_warmup > 0 and after_warmup % self.update_interval == 0:
            self.current_steps = self._target()

    def _target(self) -> int:
        """The step count SGLang's rule moves to from the current one."""
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return target
        steps, ema = self.candidate_steps, self.ema_accept_len
        while idx > 0 and ema <= (0.5 if steps[idx - 1] == 0 else steps[idx - 1] - 0.5) + self.down_hysteresis:
            idx -= 1
        if idx >= old_idx:
            while idx < len(steps) - 1 and ema > steps[idx] - 0.5 + self.up_hysteresis:
                idx += 1
        target = steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return target


class AdaptiveController:
    """SGLang's ``AdaptiveSpeculativeParams``: one ``AdaptiveSlot`` per batch-size key of the config; a batch is
    padded up to a captured CUDA-graph batch size, then routed to the largest key not above it (the smallest key
    below every key)."""

    def __init__(self, initial_steps: int, config: Mapping[str, Any], cuda_graph_bs: list[int] | None = None) -> None:
        entries = {int(k): v for k, v in config.items() if k.isdigit()}
        self.bs_keys = sorted(entries)
        self.slots = {bs: AdaptiveSlot(initial_steps, {**config, **entries[bs]}) for bs in self.bs_keys}
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def slot(self, batch: int) -> AdaptiveSlot:
        b = batch
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch)
            b = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch
        i = bisect.bisect_right(self.bs_keys, b) - 1
        return self.slots[self.bs_keys[max(0, i)]]

    def steps(self, batch: int) -> int:
        return self.slot(batch).current_steps

    def on_verify(self, accepted_drafts: Sequence[float], batch: int) -> None:
        self.slot(batch).update(accepted_drafts)


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

"""Continuous batching: the simulated server's scheduler, pure (hardware milliseconds, no clock, no threads).

Requests join and leave between steps, as in SGLang's scheduler: a step is either a prefill of the requests
waiting (up to ``max_running`` running at once; each gets its first token) or a decode step of every running
request (each emits one round's tokens, drawn beforehand by ``plan_request``). A decode step's cost is
``t_cycle_batch`` of the batch size and the mean context; CUDA graphs cover batches up to ``graph_max_bs``,
larger ones run eagerly (the scenario's graphs-off hardware). A step's noise factor is the mean of its
requests' (start x request) factors, so one request alone takes exactly its single-stream plan's times.

Both front ends drive it: the HTTP server (``server.py``) from a scheduler thread against the monotonic clock,
``ModelRunner`` (``run_level``) on virtual time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from autotune.sim.acceptance import SpecShape
from autotune.sim.adaptive import AdaptiveController, t_cycle_adaptive
from autotune.sim.timing import Hardware, t_cycle_batch, t_prefill

#: CUDA-graph batch sizes captured when the launch does not say (SGLang picks by GPU memory and tp size)
DEFAULT_GRAPH_MAX_BS = 160
#: concurrent requests a server runs when the launch does not say: SGLang caps speculative servers at 48
SPECULATIVE_MAX_RUNNING = 48
BASELINE_MAX_RUNNING = 1024


@dataclass(eq=False)
class Seq:
    """One request in the scheduler. ``tokens[i]``: tokens its decode round ``i`` emits (after the first)."""

    key: object
    prompt_tokens: int
    completion_tokens: int
    tokens: np.ndarray
    factor: float = 1.0
    rounds_done: int = 0
    emitted: int = 0
    prefilled: bool = False
    #: an adaptive server's request: ``sampler(steps, emitted)`` draws its round at the batch's steps (``tokens``
    #: is then only the nominal plan)
    sampler: Callable[[int, int], int] | None = None

    @property
    def finished(self) -> bool:
        if self.sampler is not None:
            return self.prefilled and self.emitted >= self.completion_tokens
        return self.prefilled and self.rounds_done >= int(self.tokens.size)


@dataclass(frozen=True)
class Emission:
    seq: Seq
    tokens: int  # tokens this step gave the request (its first token in a prefill)
    round: int  # 0: the first token (prefill), i >= 1: decode round i
    finished: bool


@dataclass
class Step:
    ms: float
    batch: int
    prefill: bool
    emissions: list[Emission] = field(default_factory=list)


class Batcher:
    """The scheduler of one server start."""

    def __init__(
        self,
        hardware: Callable[[bool], Hardware],
        *,
        cuda_graph: bool,
        shape: SpecShape | None,
        graph_max_bs: int,
        max_running: int | None = None,
        adaptive: AdaptiveController | None = None,
    ) -> None:
        self.hardware = hardware
        self.adaptive = adaptive  # SGLang's adaptive controller: the steps of each decode step, fed its verifies
        self.cuda_graph = bool(cuda_graph)
        self.shape = shape
        self.graph_max_bs = graph_max_bs
        default_running = SPECULATIVE_MAX_RUNNING if shape is not None else BASELINE_MAX_RUNNING
        self.max_running = default_running if max_running is None else max(int(max_running), 1)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def cancel(self, seq: Seq) -> None:
        """Drop a request (its client went away)."""
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq in self.running:
            self.running.remove(seq)

    def _hw(self, batch: int) -> Hardware:
        return self.hardware(self.cuda_graph and batch <= self.graph_max_bs)

    def step(self) -> Step | None:
        """The next step (None when idle): a prefill when requests wait and there is room, else a decode."""
        room = self.max_running - len(self.running)
        if self.waiting and room > 0:
            new = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
            hw = self._hw(len(new))
            ms = t_prefill(hw, sum(s.prompt_tokens for s in new), self.shape is not None)
            ms *= sum(s.factor for s in new) / len(new)
            step = Step(ms, len(new), True)
            for s in new:
                s.prefilled = True
                first = min(1, s.completion_tokens)
                s.emitted += first
                step.emissions.append(Emission(s, first, 0, s.finished))
                if not s.finished:
                    self.running.append(s)
            return step
        if not self.running:
            return None
        batch = self.running
        b = len(batch)
        context = sum(s.prompt_tokens + s.emitted for s in batch) / b
        factor = sum(s.factor for s in batch) / b
        adaptive = self.adaptive
        if adaptive is None:
            ms = t_cycle_batch(self._hw(b), self.shape, b, context) * factor
        else:  # every request runs the steps the controller has for this batch size (switching costs nothing)
            steps = adaptive.steps(b)
            ms = t_cycle_adaptive(self._hw(b), steps, b, context) * factor
        step = Step(ms, b, False)
        accepted = []
        for s in list(batch):
            if s.sampler is None:
                k = int(s.tokens[s.rounds_done])
            else:
                length = s.sampler(steps, s.emitted)
                accepted.append(length - 1)
                k = min(length, s.completion_tokens - s.emitted)
            s.rounds_done += 1
            s.emitted += k
            step.emissions.append(Emission(s, k, s.rounds_done, s.finished))
            if s.finished:
                self.running.remove(s)
        if adaptive is not None:  # the controller sees each request's accepted drafts
            adaptive.on_verify(accepted, b)
        return step


@dataclass(frozen=True)
class Finished:
    """A request of a closed-loop run: when it was sent, got its first token and ended (hardware ms)."""

    seq: Seq
    sent_ms: float
    first_ms: float
    end_ms: float


def closed_loop(
    batcher: Batcher, submit: Callable[[int], Seq | None], n: int, streams: int
) -> tuple[list[Finished], float]:
    """``streams`` clients at once, each sending its next request the moment its last one ended, until ``n``
    were sent (``submit(i)`` makes request ``i``; None: it failed at once and the client sends the next).
    Returns the finished requests in the order they ended and the hardware ms from the first send to the end."""
    t = 0.0
    sent = 0
    started: dict[int, tuple[float, float | None]] = {}
    done: list[Finished] = []

    def send() -> None:
        nonlocal sent
        while sent < n:
            seq = submit(sent)
            sent += 1
            if seq is not None:
                started[id(seq)] = (t, None)
                batcher.add(seq)
                return

    for _ in range(min(max(int(streams), 1), n)):
        send()
    while (step := batcher.step()) is not None:
        t += step.ms
        for em in step.emissions:
            sent_ms, first = started[id(em.seq)]
            if em.round == 0:
                first = t
                started[id(em.seq)] = (sent_ms, first)
            if em.finished:
                done.append(Finished(em.seq, sent_ms, t if first is None else first, t))
                del started[id(em.seq)]
                send()
    return done, t

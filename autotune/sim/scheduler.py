"""The simulated server's scheduler thread: it runs the continuous batch (``sim.batch``) on the wall clock and
delivers each step's tokens to the requests' streams; and the decode log lines SGLang prints while it decodes."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

from autotune.sim.batch import Seq, Step
from autotune.sim.engine import SimEngine

#: rounds due within this many wall-clock seconds of each other are streamed as one chunk
COALESCE_S = 0.002
#: running requests up to which the coalescing window is COALESCE_S; above, it grows in proportion
COALESCE_BATCH = 8

log = logging.getLogger("autotune.sim")

DECODE_LOG_INTERVAL = 40


class DecodeLog:
    """SGLang's periodic ``Decode batch`` line: every 40 decode rounds, over the interval (hardware time)."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.rounds = 0
        self.tokens = 0
        self.hw_ms = 0.0
        self.last_throughput = 0.0
        self.running = 1

    def add(self, tokens: int, hw_ms: float, running: int = 1) -> None:
        with self.lock:
            self.running = running
            self.rounds += 1
            self.tokens += tokens
            self.hw_ms += hw_ms
            if self.rounds < DECODE_LOG_INTERVAL:
                return
            thr = self.tokens / (self.hw_ms / 1000.0) if self.hw_ms > 0 else 0.0
            self.last_throughput = thr
            shape = self.engine.shape
            acc_len = self.tokens / self.rounds
            if shape is not None:
                acc_rate = acc_len / shape.num_draft_tokens
                spec = f"accept len: {acc_len:.2f}, accept rate: {acc_rate:.2f}, "
            else:
                spec = ""
            log.info(
                "Decode batch, #running-req: %d, #token: %d, token usage: 0.01, %scuda graph: %s, "
                "gen throughput (token/s): %.2f, #queue-req: 0",
                self.running,
                self.tokens,
                spec,
                self.engine.args.cuda_graph,
                thr,
            )
            self.rounds, self.tokens, self.hw_ms = 0, 0, 0.0


class Scheduler:
    """The continuous-batching scheduler thread (``autotune.sim.batch.Batcher`` against the monotonic clock).

    Steps are chained deadline after deadline (a late wake-up does not shift the next step), starting at the
    arrival of the request that ends an idle spell; each step's requests get their tokens when it ends. Decode
    steps due within ``COALESCE_S`` wall of each other are delivered together at the last one's time (at high
    time scales per-chunk Python overhead would otherwise make streams fall behind; with more than
    ``COALESCE_BATCH`` requests running the window grows in proportion, as each step writes a chunk per request);
    a prefill step is always delivered on its own, and requests arriving meanwhile join at the next step."""

    def __init__(self, engine: SimEngine, decode_log: DecodeLog) -> None:
        self.batcher = engine.batcher()
        self.scale = engine.args.time_scale
        self.decode_log = decode_log
        self.cond = threading.Condition()
        self.queues: dict[int, queue.SimpleQueue[tuple[int, int, bool]]] = {}
        self.arrivals: dict[int, float] = {}
        self.last_end = 0.0
        self._pending: Step | None = None  # computed, delivered with the next group
        self.thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)
        self.thread.start()

    def submit(self, seq: Seq, arrived: float) -> queue.SimpleQueue[tuple[int, int, bool]]:
        q: queue.SimpleQueue[tuple[int, int, bool]] = queue.SimpleQueue()
        with self.cond:
            self.queues[id(seq)] = q
            self.arrivals[id(seq)] = arrived
            self.batcher.add(seq)
            self.cond.notify()
        return q

    def cancel(self, seq: Seq) -> None:
        with self.cond:
            self.batcher.cancel(seq)
            self.queues.pop(id(seq), None)
            self.arrivals.pop(id(seq), None)

    def _group(self, t: float) -> tuple[float, list[Step]]:
        """Steps from wall time ``t`` on, to be delivered together (called with the lock held): the first step,
        then the next ones while they end within ``COALESCE_S`` of the first (a step computed past that waits for
        the next group); a prefill step, or requests waiting, end the group."""
        group: list[Step] = []
        first_end = None
        # a wider window for big batches: every step writes one chunk per running request
        window = COALESCE_S * max(1.0, len(self.batcher.running) / COALESCE_BATCH)
        while True:
            step, self._pending = (self._pending, None) if self._pending is not None else (self.batcher.step(), None)
            if step is None:
                break
            end = t + step.ms / 1000.0 / self.scale
            if first_end is not None and (step.prefill or end - first_end > window):
                self._pending = step
                break
            t = end
            group.append(step)
            if first_end is None:
                first_end = end
            if step.prefill or self.batcher.waiting:
                break
        return t, group

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # a broken scheduler is a crashed server, never a silent hang
            log.error("Scheduler hit an exception: %s: %s", type(e).__name__, e)
            logging.shutdown()
            os._exit(1)

    def _loop(self) -> None:
        t: float | None = None
        while True:
            with self.cond:
                while self.batcher.idle and self._pending is None:
                    t = None
                    self.cond.wait()
                if t is None:
                    arrived = min((self.arrivals.get(id(s), 0.0) for s in self.batcher.waiting), default=0.0)
                    t = max(arrived, self.last_end)
                t, group = self._group(t)
            delay = t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.last_end = t
            with self.cond:
                out: dict[int, list[int | bool]] = {}
                for step in group:
                    for em in step.emissions:
                        cur = out.setdefault(id(em.seq), [0, 0, False])
                        cur[0], cur[1], cur[2] = em.round, int(cur[1]) + em.tokens, em.finished
                    if not step.prefill:
                        self.decode_log.add(sum(em.tokens for em in step.emissions), step.ms, step.batch)
                for key, (rnd, k, fin) in out.items():
                    q = self.queues.get(key)
                    if q is not None:
                        q.put((int(rnd), int(k), bool(fin)))
                    if fin:
                        self.queues.pop(key, None)
                        self.arrivals.pop(key, None)

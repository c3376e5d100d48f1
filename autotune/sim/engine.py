"""One simulated server start: its startup outcome and its requests, shared by the HTTP server and ModelRunner.

Both front ends ask the same ``SimEngine`` the same questions, so the in-process runner and the real process give
the same numbers with the same noise. Times here are hardware milliseconds/seconds; the HTTP server divides by its
time scale when it sleeps.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from autotune.config import TokenChoice
from autotune.sim.acceptance import (
    DrafterProfile,
    SpecShape,
    accept_length_distribution,
    prompt_acceptance,
    request_factor,
    rng_for,
    start_factor,
)
from autotune.sim.adaptive import AdaptiveController, expected_adaptive_request_ms, t_cycle_adaptive
from autotune.sim.batch import Batcher, Seq
from autotune.sim.launch import ResolvedArgs, SimLaunchError
from autotune.sim.method_models import ngram_shape
from autotune.sim.text import Answer, divergence_point, near_tie_position
from autotune.sim.timing import (
    Hardware,
    Phase,
    RequestPlan,
    count_prompt_tokens,
    expected_request_ms,
    plan_request,
    t_cycle,
    t_prefill,
)

#: the acceptance of an EAGLE-3 drafter run under --speculative-algorithm EAGLE (fusion layer skipped)
NOT_ENGAGED = DrafterProfile(a=0.01, c=0.02, th=0.3, lam=1.0, kappa=120.0)
#: past the drafter's max_position_embeddings
PAST_POSITIONS = DrafterProfile(a=0.03, c=0.05, th=0.3, lam=1.0, kappa=120.0)

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU 0 has a total capacity of "
    "94.97 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 93.70 GiB memory in use."
)


@dataclass
class DraftCounters:
    """vLLM's spec-decode counters of one server start (``SpecDecodingStats``): a draft per request per decode round,
    its proposed and accepted tokens, and per draft position the drafts whose tokens up to it were all accepted."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, histogram: list[int], draft_len: int) -> None:
        """One request's rounds (``RequestPlan.correct_drafts_histogram``) of ``draft_len`` proposed tokens each."""
        if len(self.accepted_per_pos) < draft_len:
            self.accepted_per_pos += [0] * (draft_len - len(self.accepted_per_pos))
        for accepted, rounds in enumerate(histogram):
            self.drafts += rounds
            self.draft_tokens += rounds * draft_len
            self.accepted += rounds * accepted
            for pos in range(min(accepted, draft_len)):
                self.accepted_per_pos[pos] += rounds


@dataclass(frozen=True)
class Startup:
    """How a start goes: healthy after ``seconds`` (hardware), or ``error`` after ``seconds``, or never healthy."""

    seconds: float
    log: tuple[str, ...]
    error: SimLaunchError | None = None
    never_healthy: bool = False


@dataclass
class Generation:
    plan: RequestPlan
    pieces: list[str]  # the completion's tokens
    finish_reason: str
    request_index: int
    answer: Answer  # how the tokens came about (their log-probabilities)
    factor: float = 1.0  # the noise factor of its times (start x request)
    sampler: Callable[[int, int], int] | None = None  # adaptive server: draws a round's length at the batch's steps

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def choices(self, top_n: int) -> tuple[TokenChoice, ...]:
        """Each token with the ``top_n`` most likely tokens at its position (``top_n`` capped at the vocabulary)."""
        return self.answer.choices(top_n)


class SimEngine:
    """The model of one running server."""

    def __init__(self, args: ResolvedArgs, launch_index: int) -> None:
        self.args = args
        self.scenario = args.scenario
        self.launch_index = launch_index
        self.hw = self.hardware(args.cuda_graph)
        self.shape: SpecShape | None = None
        self.accept_shape: SpecShape | None = None  # the tree acceptance is computed on (NGRAM: the trie's)
        if args.speculative:
            assert args.speculative_eagle_topk and args.speculative_num_draft_tokens
            self.shape = SpecShape(
                max(args.speculative_num_steps or 0, 1), args.speculative_eagle_topk, args.speculative_num_draft_tokens
            )
            self.accept_shape = self.shape
            if args.method == "NGRAM":
                self.accept_shape = ngram_shape(
                    args.speculative_num_draft_tokens,
                    args.speculative_eagle_topk,
                    args.speculative_ngram_max_trie_depth,
                )
        #: SGLang's adaptive controller of this server start (its state lives as long as the server)
        self.adaptive: AdaptiveController | None = None
        self._expected_adaptive: AdaptiveController | None = None
        if args.speculative_adaptive and self.shape is not None:
            self.adaptive = self._new_controller()
            self._expected_adaptive = self._new_controller()
        self.factor = start_factor(args.seed, launch_index, self.scenario.start_noise_sd) if args.noise else 1.0
        self.cycle_ms = t_cycle(self.hw, self.shape)
        self._batched = False  # a batch scheduler was made: requests' plans are nominal (see generate)
        self._lock = threading.Lock()
        self.requests = 0
        self.generation_tokens = 0
        self.verify_ct = 0
        self.drafts = DraftCounters()

    def hardware(self, cuda_graph: bool) -> Hardware:
        """The scenario's hardware set with this method's draft costs (n-gram lookup, a standalone model's
        forward, an MTP layer) in place; the scenario's own set for EAGLE heads and the baseline."""
        hw = self.scenario.hardware(cuda_graph)
        if self.args.method == "NGRAM":
            return self.scenario.ngram.hardware(hw)
        d = self.args.drafter
        return d.hardware(hw, cuda_graph) if d is not None else hw

    def _new_controller(self) -> AdaptiveController:
        """A fresh adaptive controller at the launch's initial steps, its batch sizes padded to the captured
        CUDA-graph sizes (1, 2, 4, 8, then multiples of 8 up to the graph limit; SGLang's default capture list)."""
        assert self.args.adaptive_config is not None and self.args.speculative_num_steps is not None
        bs = None
        if self.args.cuda_graph and self.args.engine == "sglang":  # vLLM's schedule is looked up by the batch itself
            top = self.args.effective_graph_max_bs
            bs = sorted({b for b in (1, 2, 4, 8, *range(16, top + 1, 8)) if b <= top})
        return AdaptiveController(self.args.speculative_num_steps, self.args.adaptive_config, bs)

    # -- startup ---------------------------------------------------------------------------------------------------
    def profile(self) -> DrafterProfile | None:
        d = self.args.drafter
        if d is None:
            return None
        if self.args.speculative_algorithm == "EAGLE" and d.is_eagle3:
            return NOT_ENGAGED  # no aux hidden states captured: the fusion layer is skipped, nothing is accepted
        return d.profile

    def startup(self) -> Startup:
        a = self.args
        total = a.startup_s()
        load = min(a.sim_load_time if a.sim_load_time is not None else self.scenario.load_s, total)
        log = [f"server_args={a.server_args()}", "Load weight begin."]

        def crash(line: str, seconds: float = load) -> Startup:
            return Startup(seconds, tuple(log), _crash(log, line))

        if a.fault("crash-startup"):
            nccl = "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970"
            return crash(f"RuntimeError: NCCL error in: {nccl}, unhandled cuda error", 0.4 * load)
        d = a.drafter
        arch = self.scenario.target_architecture
        if a.mtp_missing:
            log.append(f"Load weight end. type={arch}, drafter={a.model_path}")
            return crash(
                "AssertionError: Only 1 nextn layer is supported (the target's config.json has "
                f"num_nextn_predict_layers={self.scenario.mtp_layers})"
            )
        if d is not None and a.method == "STANDALONE" and d.kind != "standalone":
            log.append(f"Load weight end. type={arch}, drafter={a.speculative_draft_model_path}")
            if d.kind == "mtp":  # the whole target loaded a second time as the draft
                return Startup(load, tuple(log), _oom(log))
            name = (d.config.get("architectures") or ["?"])[0]
            return crash(f"ValueError: Model architectures ['{name}'] are not supported as a standalone draft model")
        if d is not None and a.method != "STANDALONE":
            log.append(f"Load weight end. type=DeepseekV3ForCausalLM, drafter={a.speculative_draft_model_path}")
            h, th = d.hidden_size, self.scenario.hidden_size
            if h is not None and h != th:
                return crash(
                    f"RuntimeError: Error(s) in loading state_dict for {d.config['architectures'][0]}: "
                    f"size mismatch for fc.weight: copying a param with shape torch.Size([{h}, {3 * h}]) "
                    f"from checkpoint, the shape in current model is torch.Size([{h}, {3 * th}])."
                )
            if a.speculative_algorithm == "EAGLE3" and not d.is_eagle3:
                return crash(f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x{3 * th} and {2 * th}x{th})")
        elif d is not None:
            log.append(f"Load weight end. drafter={a.speculative_draft_model_path} (standalone)")
        else:
            log.append("Load weight end.")
        oom = a.fault("oom-above")
        if oom is not None and self.shape is not None and self.shape.num_draft_tokens > (oom.n or 0):
            log.append("Capture cuda graph begin. This can take up to several minutes.")
            return Startup(load + 0.5 * (total - load), tuple(log), _oom(log))
        if a.cuda_graph:
            log.append("Capture cuda graph begin. This can take up to several minutes.")
            log.append("Capture cuda graph end.")
        log.append(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        if a.fault("never-healthy"):
            log.append("Warmup request stuck: /health will keep answering 503")
            return Startup(math.inf, tuple(log), never_healthy=True)
        log.append("The server is fired up and ready to roll!")
        return Startup(total, tuple(log))

    # -- requests --------------------------------------------------------------------------------------------------
    def next_request(self) -> int:
        """Count a generation request (1-based, warm-ups included)."""
        with self._lock:
            self.requests += 1
            return self.requests

    def request_fault(self, n: int) -> str | None:
        """What goes wrong with request ``n``: 'crash' (the process dies), 'http500', 'truncate', or None."""
        crash = self.args.fault("crash-after")
        if crash is not None and n > (crash.n or 0):
            return "crash"
        for kind in ("http500", "truncate"):
            if any(f.kind == kind and f.n == n for f in self.args.faults):
                return kind
        return None

    def prompt_profile(
        self, prompt: str, temperature: float = 0.0, category: str | None = None
    ) -> tuple[float, DrafterProfile] | None:
        """(a_p, the profile) of this prompt under this server's drafter (None without speculation)."""
        if self.args.method == "NGRAM":
            return self.scenario.ngram.prompt_profile(
                prompt, seed=self.args.seed, category=category, temperature=temperature
            )
        prof = self.profile()
        d = self.args.drafter
        if prof is None or d is None:
            return None
        a_p = prompt_acceptance(
            prof,
            prompt,
            drafter=d.name,
            seed=self.args.seed,
            category=category,
            temperature=temperature,
            offsets=self.scenario.category_offsets or None,
        )
        return a_p, prof

    def _phases(
        self, prompt: str, prompt_tokens: int, max_new: int, temperature: float, category: str | None
    ) -> list[Phase]:
        pp = self.prompt_profile(prompt, temperature, category)
        s = self.accept_shape
        if pp is None or s is None:
            return [Phase((1.0,), max_new)]
        a_p, prof = pp
        d = self.args.drafter
        dist = accept_length_distribution(round(a_p, 6), prof.c, prof.th, prof.lam, s.steps, s.topk, s.num_draft_tokens)
        phases = []
        limit = d.max_positions if d is not None else None
        if limit is not None and prompt_tokens + max_new > limit:
            until = max(limit - prompt_tokens, 1)
            phases.append(Phase(dist, until))
            bad = PAST_POSITIONS
            dist = accept_length_distribution(bad.a, bad.c, bad.th, bad.lam, s.steps, s.topk, s.num_draft_tokens)
        phases.append(Phase(dist, max_new))
        return phases

    def _completion_length(self, max_new: int) -> tuple[int, str]:
        eos = self.scenario.eos_after
        if eos is not None and eos < max_new:
            return max(int(eos), 1), "stop"
        return max_new, "length"

    def generate(
        self,
        prompt: str,
        max_new: int,
        *,
        temperature: float = 0.0,
        category: str | None = None,
        request_index: int | None = None,
        alone: bool | None = None,
    ) -> Generation:
        """Plan one request: its chunks, times (with noise) and text. ``alone``: the request runs by itself, its
        plan's times are its times (an adaptive server's controller moves with its rounds); False: it joins the
        batch scheduler, which drives the controller (the plan is then nominal); None: alone unless this engine
        made a batch scheduler."""
        n = self.next_request() if request_index is None else request_index
        prompt_tokens = count_prompt_tokens(prompt)
        new, finish = self._completion_length(int(max_new))
        s = self.shape
        if self.adaptive is not None:
            alone = not self._batched if alone is None else alone
            return self._generate_adaptive(prompt, prompt_tokens, new, finish, n, temperature, category, alone)
        phases = self._phases(prompt, prompt_tokens, new, temperature, category)
        key: tuple[object, ...] = (
            "rounds",
            prompt,
            self.args.speculative_algorithm,
            self.args.drafter.name if self.args.drafter else None,
            (s.steps, s.topk, s.num_draft_tokens) if s else None,
            self.args.seed,
            new,
        )
        if temperature > 0:
            key += (self.launch_index, n)
        factor = self._factor(n)
        plan = plan_request(
            phases,
            max_new=new,
            prompt_tokens=prompt_tokens,
            prefill_ms=t_prefill(self.hw, prompt_tokens, s is not None),
            cycle_ms=self.cycle_ms,
            rng=rng_for(*key),
            factor=factor,
        )
        d = self.args.drafter
        diverge = divergence_point(prompt, d.name) if d is not None and d.diverges else None
        answer = self._answer(prompt, new, temperature, n, diverge)
        return Generation(plan, list(answer.tokens()), finish, n, answer, factor)

    def _factor(self, n: int) -> float:
        """The time factor of request ``n``: the start's, times the request's own."""
        factor = self.factor
        if self.args.noise:
            factor *= request_factor(self.args.seed, self.launch_index, n, self.scenario.request_noise_sd)
        return factor

    # -- the adaptive controller ------------------------------------------------------------------------------------
    def _sampler(
        self, prompt: str, prompt_tokens: int, temperature: float, category: str | None, rng: np.random.Generator
    ) -> Callable[[int, int], int]:
        """``draw(steps, emitted)``: one round's accepted length L at ``steps`` (a chain, topk 1) with ``emitted``
        tokens already out (past the drafter's position limit its acceptance collapses)."""
        pp = self.prompt_profile(prompt, temperature, category)
        assert pp is not None
        a_p, prof = pp
        d = self.args.drafter
        limit = d.max_positions if d is not None else None

        def draw(steps: int, emitted: int) -> int:
            if steps <= 0:
                return 1
            p = prof
            a = round(a_p, 6)
            if limit is not None and prompt_tokens + emitted >= limit:
                p, a = PAST_POSITIONS, PAST_POSITIONS.a
            dist = accept_length_distribution(a, p.c, p.th, p.lam, steps, 1, steps + 1)
            return int(np.searchsorted(np.cumsum(dist), rng.random(), side="right")) + 1

        return draw

    def _generate_adaptive(
        self,
        prompt: str,
        prompt_tokens: int,
        new: int,
        finish: str,
        n: int,
        temperature: float,
        category: str | None,
        alone: bool,
    ) -> Generation:
        """One request on an adaptive server: round by round, each at the steps the controller has then, the
        controller fed each round's accepted drafts (SGLang's on_verify_complete). Alone, the live controller
        moves; otherwise a copy plans a nominal request and the batch scheduler drives the live one."""
        assert self.adaptive is not None
        controller = self.adaptive if alone else copy.deepcopy(self.adaptive)
        key = ("adaptive-rounds", prompt, self.args.method, self.args.seed, new, self.launch_index, n)
        factor = self._factor(n)
        draw = self._sampler(prompt, prompt_tokens, temperature, category, rng_for(*key))
        ttft = t_prefill(self.hw, prompt_tokens, True) * factor
        tokens: list[int] = []
        times: list[float] = []
        produced, t = min(1, new), ttft
        while produced < new:
            steps = controller.steps(1)
            length = draw(steps, produced)
            t += t_cycle_adaptive(self.hw, steps) * factor
            controller.on_verify([length - 1], 1)
            k = min(length, new - produced)
            produced += k
            tokens.append(k)
            times.append(t)
        plan = RequestPlan(prompt_tokens, new, ttft, np.asarray(tokens, dtype=np.int64), np.asarray(times, dtype=float))
        answer = self._answer(prompt, new, temperature, n)
        sampler = self._sampler(prompt, prompt_tokens, temperature, category, rng_for(*key, "batch"))
        return Generation(plan, list(answer.tokens()), finish, n, answer, factor, sampler)

    def batcher(self) -> Batcher:
        """A continuous-batching scheduler for this server start (its flags: max running, graph batch sizes; an
        adaptive server's controller)."""
        self._batched = True
        return Batcher(
            self.hardware,
            cuda_graph=self.args.cuda_graph,
            shape=self.shape,
            graph_max_bs=self.args.effective_graph_max_bs,
            max_running=self.args.effective_max_running,
            adaptive=self.adaptive,
        )

    @staticmethod
    def seq(gen: Generation, key: object = None) -> Seq:
        """``gen`` as a request of the scheduler (its rounds' tokens, or on an adaptive server its sampler of
        rounds at the batch's steps; its times come from the batch)."""
        p = gen.plan
        return Seq(key, p.prompt_tokens, p.completion_tokens, p.tokens, gen.factor, sampler=gen.sampler)

    def _answer(self, prompt: str, tokens: int, temperature: float, n: int, diverge_at: int | None = None) -> Answer:
        """The text model of request ``n``'s answer: at temperature > 0 a stream of its own. A near tie applies at
        temperature 0 to a server whose text is not broken: a drafter loaded (any speculative config) takes the
        runner-up, the baseline keeps the best token. A broken (diverging) drafter ignores near ties, so its first
        departure is always its lossy one."""
        sample_seed = None
        if temperature > 0:
            sample_seed = int(rng_for("sample", self.args.seed, self.launch_index, n).integers(1 << 30))
        tie = None
        if sample_seed is None and diverge_at is None:
            tie = near_tie_position(prompt, self.args.near_ties)
        flipped = tie is not None and self.args.drafter is not None
        return Answer(prompt, tokens, diverge_at=diverge_at, sample_seed=sample_seed, tie_at=tie, flipped=flipped)

    def record(self, plan: RequestPlan) -> None:
        """Count a finished request: its tokens and verify rounds (SGLang's counters), its drafts (vLLM's)."""
        with self._lock:
            self.generation_tokens += plan.completion_tokens
            self.verify_ct += plan.verify_ct
            if self.shape is not None:
                self.drafts.add(plan.correct_drafts_histogram, self.shape.num_draft_tokens - 1)

    @property
    def avg_accept_length(self) -> float:
        with self._lock:
            return self.generation_tokens / self.verify_ct if self.verify_ct else 0.0

    def expected_ms(self, prompt: str, max_new: int, *, temperature: float = 0.0, category: str | None = None) -> float:
        """Noise-free expected hardware milliseconds of one request (the 'true' figure). On an adaptive server the
        expected controller carries its state from one call to the next, as the server's does between requests."""
        prompt_tokens = count_prompt_tokens(prompt)
        new, _ = self._completion_length(int(max_new))
        if self._expected_adaptive is not None:
            pp = self.prompt_profile(prompt, temperature, category)
            assert pp is not None
            a_p, prof = pp

            def dist_for(steps: int) -> tuple[float, ...]:
                if steps <= 0:
                    return (1.0,)
                return accept_length_distribution(round(a_p, 6), prof.c, prof.th, prof.lam, steps, 1, steps + 1)

            return expected_adaptive_request_ms(
                self._expected_adaptive,
                dist_for,
                max_new=new,
                prefill_ms=t_prefill(self.hw, prompt_tokens, True),
                cycle_for=lambda steps: t_cycle_adaptive(self.hw, steps),
            )
        phases = self._phases(prompt, prompt_tokens, new, temperature, category)
        return expected_request_ms(
            phases,
            max_new=new,
            prefill_ms=t_prefill(self.hw, prompt_tokens, self.shape is not None),
            cycle_ms=self.cycle_ms,
        )

    def expected_tokens(self, max_new: int) -> int:
        return self._completion_length(int(max_new))[0]


def _tb(line: str) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2710, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        line,
    ]


def _oom(log: list[str]) -> SimLaunchError:
    return SimLaunchError(OOM_LINE, log="\n".join([*log, *_tb(OOM_LINE)]), returncode=1, oom=True)


def _crash(log: list[str], line: str) -> SimLaunchError:
    return SimLaunchError(
        line,
        log="\n".join([*log, *_tb(line), "Received sigquit from a child process. It usually means the child failed."]),
    )

"""One simulated server start: its startup outcome and its requests, shared by the HTTP server and ModelRunner.

Both front ends ask the same ``SimEngine`` the same questions, so the in-process runner and the real process give
the same numbers with the same noise. Times here are hardware milliseconds/seconds; the HTTP server divides by its
time scale when it sleeps.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from autotune.config import ReferenceOutput, TokenChoice
from autotune.sim.args import ResolvedArgs, SimLaunchError
from autotune.sim.batch import Batcher, Seq
from autotune.sim.model import (
    DrafterProfile,
    Phase,
    RequestPlan,
    SpecShape,
    accept_length_distribution,
    count_prompt_tokens,
    expected_request_ms,
    plan_request,
    prompt_acceptance,
    request_factor,
    rng_for,
    start_factor,
    t_cycle,
    t_prefill,
)
from autotune.sim.text import Answer, divergence_point, near_tie_position

#: the acceptance of an EAGLE-3 drafter run under --speculative-algorithm EAGLE (fusion layer skipped)
NOT_ENGAGED = DrafterProfile(a=0.01, c=0.02, th=0.3, lam=1.0, kappa=120.0)
#: past the drafter's max_position_embeddings
PAST_POSITIONS = DrafterProfile(a=0.03, c=0.05, th=0.3, lam=1.0, kappa=120.0)

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU 0 has a total capacity of "
    "94.97 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 93.70 GiB memory in use."
)


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
    answer: Answer | None = None  # how the tokens came about (their log-probabilities)
    factor: float = 1.0  # the noise factor of its times (start x request)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def choices(self, top_n: int) -> tuple[TokenChoice, ...]:
        """Each token with the ``top_n`` most likely tokens at its position (``top_n`` capped at the vocabulary)."""
        if self.answer is None:
            return tuple(TokenChoice(p) for p in self.pieces)
        return self.answer.choices(top_n)

    def reference(self, index: int, top_n: int) -> ReferenceOutput:
        """This answer as the lossless check's reference for prompt ``index``."""
        return ReferenceOutput(index=index, text=self.text, tokens=self.choices(top_n))


class SimEngine:
    """The model of one running server."""

    def __init__(self, args: ResolvedArgs, launch_index: int) -> None:
        self.args = args
        self.scenario = args.scenario
        self.launch_index = launch_index
        self.hw = self.scenario.hardware(args.cuda_graph)
        self.shape: SpecShape | None = None
        if args.speculative:
            assert args.speculative_num_steps and args.speculative_eagle_topk and args.speculative_num_draft_tokens
            self.shape = SpecShape(
                args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
            )
        self.factor = start_factor(args.seed, launch_index, self.scenario.start_noise_sd) if args.noise else 1.0
        self.cycle_ms = t_cycle(self.hw, self.shape)
        self._lock = threading.Lock()
        self.requests = 0
        self.generation_tokens = 0
        self.verify_ct = 0

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
        if a.fault("crash-startup"):
            t = 0.4 * load
            return Startup(
                t,
                tuple(log),
                _crash(
                    log,
                    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                    "ProcessGroupNCCL.cpp:1970, unhandled cuda error",
                ),
            )
        d = a.drafter
        if d is not None:
            log.append(f"Load weight end. type=DeepseekV3ForCausalLM, drafter={a.speculative_draft_model_path}")
            if d.hidden_size is not None and d.hidden_size != self.scenario.hidden_size:
                h, th = d.hidden_size, self.scenario.hidden_size
                return Startup(
                    load,
                    tuple(log),
                    _crash(
                        log,
                        (
                            f"RuntimeError: Error(s) in loading state_dict for {d.config['architectures'][0]}: "
                            f"size mismatch for fc.weight: copying a param with shape torch.Size([{h}, {3 * h}]) "
                            f"from checkpoint, the shape in current model is torch.Size([{h}, {3 * th}])."
                        ),
                    ),
                )
            if a.speculative_algorithm == "EAGLE3" and not d.is_eagle3:
                h = self.scenario.hidden_size
                return Startup(
                    load,
                    tuple(log),
                    _crash(
                        log, (f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x{3 * h} and {2 * h}x{h})")
                    ),
                )
        else:
            log.append("Load weight end.")
        oom = a.fault("oom-above")
        if oom is not None and self.shape is not None and self.shape.num_draft_tokens > (oom.n or 0):
            log.append("Capture cuda graph begin. This can take up to several minutes.")
            err = SimLaunchError(OOM_LINE, log="\n".join([*log, *_tb(OOM_LINE)]), returncode=1, oom=True)
            return Startup(load + 0.5 * (total - load), tuple(log), err)
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
            if any(f.n == n for f in self.args.faults_of(kind)):
                return kind
        return None

    def _phases(
        self, prompt: str, prompt_tokens: int, max_new: int, temperature: float, category: str | None
    ) -> list[Phase]:
        prof = self.profile()
        if prof is None or self.shape is None:
            return [Phase((1.0,), max_new)]
        d = self.args.drafter
        assert d is not None
        s = self.shape
        a_p = prompt_acceptance(
            prof,
            prompt,
            drafter=d.name,
            seed=self.args.seed,
            category=category,
            temperature=temperature,
            offsets=self.scenario.category_offsets or None,
        )
        dist = accept_length_distribution(round(a_p, 6), prof.c, prof.th, prof.lam, s.steps, s.topk, s.num_draft_tokens)
        phases = []
        limit = d.max_positions
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
    ) -> Generation:
        """Plan one request: its chunks, times (with noise) and text."""
        n = self.next_request() if request_index is None else request_index
        prompt_tokens = count_prompt_tokens(prompt)
        new, finish = self._completion_length(int(max_new))
        phases = self._phases(prompt, prompt_tokens, new, temperature, category)
        s = self.shape
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
        factor = self.factor
        if self.args.noise:
            factor *= request_factor(self.args.seed, self.launch_index, n, self.scenario.request_noise_sd)
        plan = plan_request(
            phases,
            max_new=new,
            prompt_tokens=prompt_tokens,
            prefill_ms=t_prefill(self.hw, prompt_tokens, s is not None),
            cycle_ms=self.cycle_ms,
            rng=rng_for(*key),
            factor=factor,
        )
        diverge = None
        d = self.args.drafter
        if d is not None and d.diverges:
            diverge = divergence_point(prompt, d.name)
        sample_seed = None
        if temperature > 0:
            sample_seed = int(rng_for("sample", self.args.seed, self.launch_index, n).integers(1 << 30))
        answer = self.answer(prompt, new, diverge_at=diverge, sample_seed=sample_seed)
        return Generation(plan, list(answer.tokens()), finish, n, answer, factor)

    def batcher(self) -> Batcher:
        """A continuous-batching scheduler for this server start (its flags: max running, graph batch sizes)."""
        return Batcher(
            self.scenario.hardware,
            cuda_graph=self.args.cuda_graph,
            shape=self.shape,
            graph_max_bs=self.args.effective_graph_max_bs,
            max_running=self.args.effective_max_running,
        )

    @staticmethod
    def seq(gen: Generation, key: object = None) -> Seq:
        """``gen`` as a request of the scheduler (its rounds' tokens; its times come from the batch)."""
        p = gen.plan
        return Seq(key, p.prompt_tokens, p.completion_tokens, p.tokens, gen.factor)

    def answer(self, prompt: str, n: int, *, diverge_at: int | None, sample_seed: int | None) -> Answer:
        """The text model of one answer. A near tie applies at temperature 0 to a server whose text is not broken:
        a drafter loaded (any speculative config) takes the runner-up, the baseline keeps the best token. A broken
        (diverging) drafter ignores near ties, so its first departure is always its lossy one."""
        tie = None
        if sample_seed is None and diverge_at is None:
            tie = near_tie_position(prompt, self.args.near_ties)
        flipped = tie is not None and self.args.drafter is not None
        return Answer(prompt, n, diverge_at=diverge_at, sample_seed=sample_seed, tie_at=tie, flipped=flipped)

    def record(self, tokens: int, rounds: int) -> None:
        with self._lock:
            self.generation_tokens += tokens
            self.verify_ct += rounds

    @property
    def avg_accept_length(self) -> float:
        with self._lock:
            return self.generation_tokens / self.verify_ct if self.verify_ct else 0.0

    def expected_ms(self, prompt: str, max_new: int, *, temperature: float = 0.0, category: str | None = None) -> float:
        """Noise-free expected hardware milliseconds of one request (the 'true' figure)."""
        prompt_tokens = count_prompt_tokens(prompt)
        new, _ = self._completion_length(int(max_new))
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


def _crash(log: list[str], line: str) -> SimLaunchError:
    return SimLaunchError(
        line,
        log="\n".join([*log, *_tb(line), "Received sigquit from a child process. It usually means the child failed."]),
    )

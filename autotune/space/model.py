"""The validated, typed form of a space file (``autotune.space.load_space`` builds it): frozen dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.servers import DEFAULT_BACKEND


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    step: int = 1
    log: bool = False

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class Choices:
    values: tuple[Any, ...]


ParamSpec = IntRange | FloatRange | Choices


@dataclass(frozen=True)
class ServerSpec:
    backend: str = DEFAULT_BACKEND  # a name of autotune.backends
    model_path: str = ""
    version: str | None = None  # server version targeted (flag spelling); None = probe or newest known
    launcher: tuple[str, ...] = ()  # argv prefix overriding the backend's default (e.g. a venv's python)
    host: str = "127.0.0.1"
    port: int = 30000
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 600.0
    port_busy: str = "fail"  # fail | wait | next
    port_wait_s: float = 60.0


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    path: str
    algorithm: str | None = None  # forced algorithm; None = derived from the checkpoint's config.json
    #: the acceptance length (tokens per verify round, the bonus token included) the drafter reaches elsewhere (its
    #: model card, another study); None: none given (``autotune.traffic.acceptance_guards``)
    reference_acceptance: float | None = None


@dataclass(frozen=True)
class MethodSpec:
    """One searched speculative method (``search.methods.NAME``): a name of the backend's catalogue
    (``Backend.methods``), the drafters it runs (empty for a model-free method or the target's own MTP layers) and
    its knobs (a knob not given stays at the server's own value)."""

    name: str
    drafters: tuple[str, ...] = ()
    knobs: Mapping[str, ParamSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchSpec:
    drafters: tuple[str, ...] = ()  # names from ``drafters``; default all
    cuda_graph: tuple[bool, ...] = (True,)
    knobs: Mapping[str, ParamSpec] = field(default_factory=dict)  # backend knob name -> range/choices
    #: method name -> its drafters and knobs (``search.methods``); empty: the drafters' own methods, as before
    methods: Mapping[str, MethodSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    category: str | None = None  # code, math, chat, summarization, creative (used by the simulator)
    #: a logged request's own settings (``benchmark.requests_file``); None: the benchmark's
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    #: a logged chat request's turns as (role, content), system and earlier turns included; None: ``text`` alone
    messages: tuple[tuple[str, str], ...] | None = None
    #: a logged chat request's ``chat_template_kwargs.enable_thinking``; None: the server's default
    thinking: bool | None = None


@dataclass(frozen=True)
class TrafficInfo:
    """Where a traffic space's prompts came from: the log, how many of its requests were picked and how
    (``autotune.traffic``), how the subset compares with the whole log, and the validity guards that fired."""

    path: str
    log_requests: int
    picked: int
    by: str
    representativeness: dict[str, Any]
    #: (name, text) of each guard that fired
    guards: tuple[tuple[str, str], ...] = ()
    #: requests drawn (seeded) from the rest of the log to check the subset against (``benchmark.holdout``; 0: off)
    holdout: int = 0


@dataclass(frozen=True)
class BenchmarkSpec:
    prompts: tuple[Prompt, ...] = ()
    max_tokens: int = 1024
    temperature: float = 0.0
    warmup_requests: int = 1
    #: untimed passes of the prompts after the warm-up requests: a number, or None: the server's default
    #: (``autotune.warmup``)
    warmup_passes: int | None = None
    api: str = "completions"  # completions | chat
    retries: int = 2  # per request, for HTTP errors and truncated streams
    prompts_file: str | None = None  # absolute path of the file the prompts came from, if any
    #: load levels (streams at once), lowest first
    concurrency: tuple[int, ...] = (1,)
    #: the request log the prompts were picked from (``benchmark.requests_file``), with the subset and its guards
    traffic: TrafficInfo | None = None
    #: requests of that log outside the subset, measured once on the first baseline's start to check that the subset
    #: stands for the rest (``benchmark.holdout``; ``autotune.traffic.holdout_check``); never part of the objective
    holdout: tuple[Prompt, ...] = ()

    def prompt_at(self, index: int) -> Prompt:
        """Request ``index`` a session sends: the prompts, then the holdout requests (index ``len(prompts) + j``)."""
        n = len(self.prompts)
        if not 0 <= index < n + len(self.holdout):
            raise IndexError(f"prompt index {index} outside 0..{n + len(self.holdout) - 1}")
        return self.prompts[index] if index < n else self.holdout[index - n]

    @property
    def loaded(self) -> bool:
        """Whether any level runs more than one stream at once."""
        return any(c > 1 for c in self.concurrency)

    def tokens_for(self, p: Prompt) -> int:
        """The answer limit a prompt is measured with: its own (a logged request's), else the benchmark's."""
        return self.max_tokens if p.max_tokens is None else p.max_tokens

    def temperature_for(self, p: Prompt) -> float:
        """The temperature a prompt is measured at: its own (a logged request's), else the benchmark's."""
        return self.temperature if p.temperature is None else p.temperature

    @property
    def greedy(self) -> bool:
        """Whether every prompt is measured at temperature 0 (where the lossless check can compare answers)."""
        return all(self.temperature_for(p) == 0 for p in self.prompts)

    @property
    def categories(self) -> tuple[str | None, ...]:
        """Each prompt's category, in prompt order (None: the prompt has none)."""
        return tuple(p.category for p in self.prompts)


@dataclass(frozen=True)
class PruningSpec:
    enabled: bool = True
    confidence: float = 0.95
    min_prompts: int = 2
    zero_accept_max: float = 1.1  # acceptance length at or below this after the first prompt: drafter not engaged
    # sd of the log speedup between one server start and another that a single start's prompts cannot show (each
    # start's whole speed moves by ~2.5%: sqrt(2) * 2.5% for a trial/baseline pair); widens the prune bound
    start_noise: float = 0.035
    # also stop a trial once it is clearly slower than the fastest config measured so far (not only the baseline)
    leader: bool = True
    # the leader rule prunes once the upper bound of the speedup over the leader is below 1 - leader_margin: a
    # config within a few percent of the leader may still be the optimum (the leader's figure is its luckiest)
    leader_margin: float = 0.05


@dataclass(frozen=True)
class BudgetSpec:
    n_trials: int = 30
    timeout_s: float | None = None
    #: the last trials of the budget picked by the surrogate (expected improvement over the best measured
    #: config's posterior mean) instead of the sampler; None = half of n_trials (SGLang spaces; backends
    #: that cannot enumerate their space leave every trial to the sampler)
    refine_trials: int | None = None
    #: space-filling design points measured after the server defaults (None = auto: enough for the surrogate)
    design_trials: int | None = None
    #: the search stops before ``n_trials`` once its answer is settled (``autotune.study.settle``); false: the
    #: budget is a quota
    stop_when_settled: bool = True


#: the most confirmation rounds when ``verdict.max_repeats`` is not given (and ``repeats`` is at most 4)
DEFAULT_MAX_ROUNDS = 8


@dataclass(frozen=True)
class VerdictSpec:
    min_gain: float = 0.02
    confirm_top: int = 3
    #: rounds of every candidate before the verdict's first look (3: a clear answer after 3 rounds, an open one
    #: gets more up to ``max_repeats``; scripts/bench_search.py and tests/verdict/test_sequential.py measured it)
    repeats: int = 3
    #: the most rounds: after ``repeats``, candidates not clearly slower than the leader race on, and an open
    #: verdict gets more rounds of its pick (``race.Race.next_round``) (None = twice ``repeats``, at least
    #: ``DEFAULT_MAX_ROUNDS``; equal to ``repeats``: neither)
    max_repeats: int | None = None
    #: one-sided confidence that a dropped candidate is slower than the leader of the race
    race_confidence: float = 0.8
    confidence: float = 0.95
    #: a divergence from the baseline's answer at a token where the baseline's best and the other's token are
    #: within this many nats is a near-tie flip (numerics), not a failure; None: from the target's data type
    #: (``autotune.lossless.TIE_TOLERANCE``)
    tie_tolerance: float | None = None
    #: without log-probabilities to classify a divergence: an answer matching the baseline's for less than this
    #: fraction is flagged
    lossless_min_prefix: float = 0.9

    @property
    def max_rounds(self) -> int:
        if self.max_repeats is None:
            return max(2 * self.repeats, DEFAULT_MAX_ROUNDS)
        return max(self.repeats, self.max_repeats)


@dataclass(frozen=True)
class SloSpec:
    """Latency limits per level (ms); None = no limit. A level that breaks one counts as lost for that config."""

    itl_p99_ms: float | None = None
    ttft_p99_ms: float | None = None


@dataclass(frozen=True)
class ObjectiveSpec:
    """The traffic mix: a weight per load level (int keys; None = equal weights over ``benchmark.concurrency``), or a
    weight per prompt category (str keys; ``benchmark.concurrency`` [1] only: ``category_weights``)."""

    weights: Mapping[int, float] | Mapping[str, float] | None = None
    slo: SloSpec = field(default_factory=SloSpec)

    @property
    def by_category(self) -> bool:
        """Whether the weights name prompt categories (not load levels)."""
        return bool(self.weights) and all(isinstance(k, str) for k in self.weights or ())

    def weights_for(self, levels: tuple[int, ...]) -> dict[int, float]:
        """Normalised weights over ``levels`` (a level without a weight gets 0; none given, or weights over
        categories: equal weights)."""
        if not self.weights or self.by_category:
            return {c: 1.0 / len(levels) for c in levels}
        per_level = {k: w for k, w in self.weights.items() if isinstance(k, int)}
        total = sum(float(per_level.get(c, 0.0)) for c in levels)
        return {c: float(per_level.get(c, 0.0)) / total for c in levels}

    def category_weights(self) -> dict[str, float] | None:
        """The weights over prompt categories, normalised to sum 1, in the order given (a category of the prompts
        not named has weight 0); None when the weights are per load level or absent."""
        if not self.weights or not self.by_category:
            return None
        total = sum(float(w) for w in self.weights.values())
        return {str(c): float(w) / total for c, w in self.weights.items()}


@dataclass(frozen=True)
class SimulateSpec:
    scenario: str = "kimi-k25-rtxpro6000"
    time_scale: float = 50.0
    seed: int = 0
    #: probability that a prompt has a near tie (None: the scenario's, normally 0); passed as --near-ties
    near_ties: float | None = None


@dataclass(frozen=True)
class Space:
    name: str
    server: ServerSpec
    drafters: tuple[DrafterSpec, ...]
    search: SearchSpec
    benchmark: BenchmarkSpec
    pruning: PruningSpec = field(default_factory=PruningSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    verdict: VerdictSpec = field(default_factory=VerdictSpec)
    simulate: SimulateSpec | None = None
    objective: ObjectiveSpec = field(default_factory=ObjectiveSpec)
    storage: str | None = None
    path: str | None = None  # the file it was loaded from

    def drafter(self, name: str) -> DrafterSpec:
        for d in self.drafters:
            if d.name == name:
                return d
        raise KeyError(name)

    def searched_drafters(self) -> tuple[str, ...]:
        """The names of the drafters the search uses: ``search.drafters``, else every drafter's; in a method space
        the drafters its methods name."""
        if self.search.methods:
            out: list[str] = []
            for m in self.search.methods.values():
                out += [d for d in m.drafters if d not in out]
            return tuple(out)
        return self.search.drafters or tuple(d.name for d in self.drafters)

    def storage_url(self) -> str:
        """``storage``, or the default ``sqlite:///studies/<name>.db`` (relative to the working directory)."""
        return self.storage or f"sqlite:///studies/{self.name}.db"

"""Plain data that crosses the seam between the search loop and the world.

A ``TrialConfig`` is what the search proposes (one point of the space); its backend resolves it into an
``EffectiveConfig`` (what the server will run) and turns that into argv.
A ``PromptResult`` is what measuring one prompt gives; ``LaunchInfo`` describes a started server.
All figures are in the measured hardware's time: for the simulator, wall-clock times multiplied by its
time scale.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from autotune.acceptance import AcceptPositions

KnobValue = int | float | str | bool
#: a config as a trial record keeps and the report shows it: param name -> value (``TrialConfig.to_dict``)
Config = dict[str, KnobValue | None]


@dataclass(frozen=True, eq=False)
class TrialConfig:
    """One server configuration: the drafter's name in the space (None: the non-speculative baseline), whether CUDA
    graphs are on, and the backend's speculative knobs (empty for a baseline)."""

    drafter: str | None
    cuda_graph: bool = True
    knobs: tuple[tuple[str, KnobValue], ...] = ()

    @classmethod
    def make(cls, drafter: str | None, cuda_graph: bool = True, **knobs: KnobValue | None) -> Self:
        return cls(
            drafter=drafter,
            cuda_graph=bool(cuda_graph),
            knobs=tuple(sorted((k, v) for k, v in knobs.items() if v is not None)),
        )

    @classmethod
    def baseline(cls, cuda_graph: bool = True) -> Self:
        return cls(drafter=None, cuda_graph=bool(cuda_graph))

    def __eq__(self, other: object) -> bool:
        """The same server config (an ``EffectiveConfig`` equals the ``TrialConfig`` of the same values)."""
        if not isinstance(other, TrialConfig):
            return NotImplemented
        return (self.drafter, self.cuda_graph, self.knobs) == (other.drafter, other.cuda_graph, other.knobs)

    def __hash__(self) -> int:
        return hash((self.drafter, self.cuda_graph, self.knobs))

    @property
    def is_baseline(self) -> bool:
        """No drafter and no method (a model-free method's config has drafter None and a ``method`` knob)."""
        return self.drafter is None and self.knob("method") is None

    def knob(self, name: str, default: Any = None) -> Any:
        for k, v in self.knobs:
            if k == name:
                return v
        return default

    @property
    def knob_dict(self) -> dict[str, KnobValue]:
        return dict(self.knobs)

    def with_knobs(self, **changes: KnobValue) -> TrialConfig:
        return TrialConfig.make(self.drafter, self.cuda_graph, **{**self.knob_dict, **changes})

    def to_dict(self) -> Config:
        return {"drafter": self.drafter, "cuda_graph": self.cuda_graph, **self.knob_dict}

    @staticmethod
    def from_dict(d: Mapping[str, KnobValue | None]) -> TrialConfig:
        knobs = {k: v for k, v in d.items() if k not in ("drafter", "cuda_graph")}
        drafter = d.get("drafter")
        return TrialConfig.make(
            None if drafter in (None, "none", "") else str(drafter), bool(d.get("cuda_graph", True)), **knobs
        )

    def key(self) -> str:
        """Canonical string: two configs with the same key are the same server config."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def label(self) -> str:
        cg = "graphs on" if self.cuda_graph else "graphs off"
        if self.is_baseline:
            return f"baseline ({cg})"
        inner = ", ".join(f"{k}={v}" for k, v in self.knobs if k != "method")
        method = self.knob("method")
        who = self.drafter if method is None else (f"{method}:{self.drafter}" if self.drafter else str(method))
        return f"{who} [{inner}] ({cg})"


@dataclass(frozen=True, eq=False)
class EffectiveConfig(TrialConfig):
    """A config as its backend resolved it (``Backend.resolve``): every knob the server takes, filled in and
    checked. Whoever is given one does not resolve it again (``ProcessRunner.launch``, ``Backend.argv``)."""

    @classmethod
    def of(cls, config: TrialConfig) -> EffectiveConfig:
        return cls(drafter=config.drafter, cuda_graph=config.cuda_graph, knobs=config.knobs)


@dataclass(frozen=True)
class PromptResult:
    """The measurement of one prompt, in the measured hardware's seconds."""

    index: int
    completion_tokens: int
    seconds: float
    ttft_s: float | None = None
    prompt_tokens: int | None = None
    accept_length: float | None = None
    text: str = ""
    finish_reason: str | None = None
    #: per-position acceptance counts where the server reports them (``autotune.acceptance``), else None
    positions: AcceptPositions | None = None

    @property
    def tok_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "completion_tokens": self.completion_tokens,
            "seconds": self.seconds,
            "tok_per_s": self.tok_per_s,
            "ttft_s": self.ttft_s,
            "prompt_tokens": self.prompt_tokens,
            "accept_length": self.accept_length,
            "finish_reason": self.finish_reason,
        }
        if self.positions is not None:  # only where the server reports them: older records stay as they were
            d["accept_positions"] = self.positions.to_dict()
        if with_text:
            d["text"] = self.text
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PromptResult:
        return PromptResult(
            index=int(d.get("index", 0)),
            completion_tokens=int(d.get("completion_tokens") or 0),
            seconds=float(d.get("seconds") or 0.0),
            ttft_s=d.get("ttft_s"),
            prompt_tokens=d.get("prompt_tokens"),
            accept_length=d.get("accept_length"),
            text=str(d.get("text") or ""),
            finish_reason=d.get("finish_reason"),
            positions=AcceptPositions.from_dict(d.get("accept_positions")),
        )


@dataclass(frozen=True)
class TokenChoice:
    """One generated token of a reference answer, with the most likely tokens the server saw at that position.

    ``top`` holds (token text, log-probability) pairs, most likely first; at temperature 0 the chosen token is
    normally ``top[0]``. Log-probabilities are natural logs of the target's pre-sampling distribution."""

    text: str
    logprob: float | None = None
    top: tuple[tuple[str, float], ...] = ()

    @property
    def margin(self) -> float | None:
        """How much more likely the best token was than the second best (nats); None with fewer than two."""
        if len(self.top) < 2:
            return None
        return float(self.top[0][1]) - float(self.top[1][1])


@dataclass(frozen=True)
class ReferenceOutput:
    """A temperature-0 answer to one prompt with per-token log-probabilities: what the lossless check compares a
    speculative answer against. Measured once per baseline start, after its timed prompts (never timed itself:
    asking for log-probabilities can slow a server)."""

    index: int
    text: str
    tokens: tuple[TokenChoice, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Compact form for a trial record: tokens as ``[text, logprob, [[alt, logprob], ...]]``."""
        return {
            "index": self.index,
            "text": self.text,
            "tokens": [[t.text, t.logprob, [[a, lp] for a, lp in t.top]] for t in self.tokens],
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ReferenceOutput:
        tokens = tuple(
            TokenChoice(
                str(t[0]),
                None if t[1] is None else float(t[1]),
                tuple((str(a), float(lp)) for a, lp in (t[2] if len(t) > 2 else [])),
            )
            for t in d.get("tokens", [])
        )
        return ReferenceOutput(index=int(d.get("index", 0)), text=str(d.get("text", "")), tokens=tokens)


@dataclass
class LaunchInfo:
    """What a runner knows about a server it started."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # only the variables we set, secrets redacted
    effective: dict[str, Any] = field(default_factory=dict)  # settings as the server resolved them
    startup_s: float = 0.0
    log_path: str | None = None
    pid: int | None = None
    simulated: bool = False


def summarize(results: list[PromptResult]) -> dict[str, Any]:
    """The field report's summary: total tokens over total time, plus per-prompt figures."""
    tokens = sum(r.completion_tokens for r in results)
    seconds = sum(r.seconds for r in results)
    accepts = [r.accept_length for r in results if r.accept_length is not None]
    return {
        "prompts": len(results),
        "completion_tokens": tokens,
        "seconds": seconds,
        "tok_per_s": tokens / seconds if seconds > 0 else 0.0,
        "per_prompt_tok_per_s": [r.tok_per_s for r in results],
        "accept_length": (sum(accepts) / len(accepts)) if accepts else None,
    }


def _percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation between order statistics); None without values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@dataclass(frozen=True)
class LevelResult:
    """One load level of one server start: ``level`` streams at once over the prompt set (level 1: the prompts one
    after another). ``requests`` in the order they were sent; ``seconds`` is the level's wall time in the measured
    hardware's seconds (first request sent to last token; at level 1 the sum of the requests' times, as
    ``summarize`` counts them); ``failed``: requests that failed after their retries."""

    level: int
    requests: tuple[PromptResult, ...]
    seconds: float
    failed: int = 0

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def tok_per_s(self) -> float:
        """Aggregate output tok/s: completion tokens over the level's wall time."""
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    def per_prompt_tok_per_s(self) -> dict[int, float]:
        """Per-stream tok/s of each prompt (the mean over its requests at this level)."""
        by: dict[int, list[float]] = {}
        for r in self.requests:
            by.setdefault(r.index, []).append(r.tok_per_s)
        return {i: sum(v) / len(v) for i, v in sorted(by.items())}

    def summary(self) -> LevelSummary:
        """The level's figures: aggregate and per-stream tok/s, inter-token latency (a request's time after its
        first token over its tokens after the first) and TTFT at p50/p99 over the requests (ms), acceptance
        length (mean over requests), requests and failures (not yet judged: no speedup, no limits)."""
        itl = [
            (r.seconds - r.ttft_s) / (r.completion_tokens - 1) * 1000.0
            for r in self.requests
            if r.ttft_s is not None and r.completion_tokens > 1
        ]
        ttft = [r.ttft_s * 1000.0 for r in self.requests if r.ttft_s is not None]
        accepts = [r.accept_length for r in self.requests if r.accept_length is not None]
        streams = [r.tok_per_s for r in self.requests]
        return LevelSummary(
            level=self.level,
            requests=len(self.requests),
            failed=self.failed,
            completion_tokens=self.completion_tokens,
            seconds=self.seconds,
            tok_per_s=self.tok_per_s,
            stream_tok_per_s=sum(streams) / len(streams) if streams else 0.0,
            itl_p50_ms=_percentile(itl, 50),
            itl_p99_ms=_percentile(itl, 99),
            ttft_p50_ms=_percentile(ttft, 50),
            ttft_p99_ms=_percentile(ttft, 99),
            accept_length=sum(accepts) / len(accepts) if accepts else None,
            per_prompt_tok_per_s={str(i): v for i, v in self.per_prompt_tok_per_s().items()},
        )

    @staticmethod
    def sequential(results: list[PromptResult]) -> LevelResult:
        """Level 1 from the prompts measured one after another."""
        return LevelResult(1, tuple(results), sum(r.seconds for r in results))


@dataclass(frozen=True)
class LevelSummary:
    """One load level of one trial as its record keeps it: ``LevelResult.summary()``'s figures, ``speedup`` over the
    baseline's same level (None: no baseline figure) and the latency limits it broke; ``to_dict`` is the stored
    form (and the report's)."""

    level: int
    requests: int = 0
    failed: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0  # the level's timed seconds (billed)
    tok_per_s: float = 0.0
    stream_tok_per_s: float = 0.0
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    accept_length: float | None = None
    per_prompt_tok_per_s: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    slo_broken: tuple[str, ...] = ()

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> LevelSummary:
        known = {k: v for k, v in d.items() if k in LevelSummary.__dataclass_fields__}
        return LevelSummary(**{**known, "level": int(d["level"]), "slo_broken": tuple(d.get("slo_broken") or ())})

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "slo_broken": list(self.slo_broken)}


def level_requests(level: int, n_prompts: int) -> list[int]:
    """The prompt indices a level sends, in order: the prompts cycled to max(prompts, 2 x level) requests."""
    if n_prompts <= 0:
        return []
    return [i % n_prompts for i in range(max(n_prompts, 2 * int(level)))]


def config_label(cfg: Mapping[str, KnobValue | None] | None) -> str:
    """``aq-medai num_steps=4,topk=1,... graphs off`` or ``baseline (graphs on)``."""
    cfg = cfg or {}
    graphs = "on" if cfg.get("cuda_graph", True) else "off"
    if cfg.get("drafter") in (None, "none") and cfg.get("method") is None:
        return f"baseline (graphs {graphs})"
    knobs = ",".join(f"{k}={v}" for k, v in cfg.items() if k not in ("drafter", "cuda_graph", "method"))
    who = (
        cfg["drafter"] if cfg.get("method") is None else ":".join(str(x) for x in (cfg["method"], cfg["drafter"]) if x)
    )
    return f"{who} {knobs} graphs {graphs}"

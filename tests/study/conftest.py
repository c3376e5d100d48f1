"""A scripted runner at the seam: a deterministic landscape, no processes. Used to test the orchestration's
logic in isolation; the same orchestration is tested end to end against the simulator elsewhere."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.config import LaunchInfo, PromptResult, TrialConfig
from autotune.errors import ServerDied, ServerExited, ServerOOM
from autotune.records import ConfirmationState, TrialRecord
from autotune.sim import ModelRunner
from autotune.space import (
    BenchmarkSpec,
    Choices,
    DrafterSpec,
    IntRange,
    Prompt,
    SearchSpec,
    ServerSpec,
    Space,
    VerdictSpec,
)
from autotune.study.result import Recommendation, StudyResult
from autotune.verdict import Verdict


def make_space(n_trials: int = 20, cuda_graph=(True,), drafters=("good", "bad"), prompts: int = 5, **verdict) -> Space:
    return Space(
        name="t",
        server=ServerSpec(backend="sglang", model_path="/nonexistent/target"),
        drafters=tuple(DrafterSpec(name=d, path=f"/nonexistent/{d}", algorithm="EAGLE3") for d in drafters),
        search=SearchSpec(
            cuda_graph=tuple(cuda_graph),
            knobs={"num_steps": IntRange(1, 6), "topk": Choices((1, 2, 4)), "num_draft_tokens": IntRange(2, 16)},
        ),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(prompts)), max_tokens=100
        ),
        budget=__import__("autotune.space", fromlist=["BudgetSpec"]).BudgetSpec(n_trials=n_trials),
        verdict=VerdictSpec(**verdict),
    )


@dataclass
class ScriptedRunner:
    """tok/s = base * speed(config) * per-prompt factor * noise; accept length from a table."""

    speed: dict  # drafter -> callable(config) -> speedup
    base: float = 100.0
    noise: float = 0.01
    accept: dict = field(default_factory=dict)  # drafter -> accept length
    oom_above: int | None = None
    crash: set = field(default_factory=set)  # drafter names whose servers crash at startup
    crash_serving: dict = field(default_factory=dict)  # drafter -> how many of its starts die at its second prompt
    diverge: set = field(default_factory=set)
    graph_gain: float = 1.0  # a baseline with CUDA graphs on runs this much faster than one with them off
    seed: int = 0
    simulated: bool = True
    launches: list = field(default_factory=list)
    first_baseline: float = 1.0  # the first baseline start runs this much faster (a cold or a lucky GPU start)
    request_noise: float = 0.005  # sd of the log of one request's time factor
    startup_s: float = 60.0
    #: a server that builds its fast paths lazily (llama.cpp's CUDA graphs): the first ``cold_requests`` requests of
    #: each start run this much slower (``cold`` on the baseline, ``cold_speculative`` with a drafter)
    cold: float = 0.0
    cold_speculative: float = 0.0
    cold_requests: int = 0
    sessions: list = field(default_factory=list)  # every start's session, in order

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def launch(self, config: TrialConfig):
        self.launches.append(config)
        if config.drafter in self.crash:  # it fails half-way through its start-up
            e = ServerExited("server exited with code 1 during startup", returncode=1, log_tail="Traceback: boom")
            e.server_s = self.startup_s / 2
            raise e
        if self.oom_above is not None and (config.knob("num_draft_tokens") or 0) > self.oom_above:
            e = ServerOOM("out of memory", returncode=1, log_tail="torch.OutOfMemoryError: CUDA out of memory")
            e.server_s = self.startup_s  # after loading, as SGLang runs out of memory capturing CUDA graphs
            raise e
        if config.is_baseline:
            factor = self.graph_gain if config.cuda_graph else 1.0
        else:
            factor = self.speed[config.drafter](config)
        start = math.exp(self.rng.gauss(0, self.noise))
        if config.is_baseline and not any(c.is_baseline for c in self.launches[:-1]):
            start *= self.first_baseline
        session = _Session(self, config, factor * start)
        starts = sum(1 for c in self.launches if c == config)
        session.dies_at = 1 if starts <= self.crash_serving.get(config.drafter, 0) else None
        self.sessions.append(session)
        return session


class _Session:
    def __init__(self, runner, config, factor):
        self.runner, self.config, self.factor = runner, config, factor
        self.info = LaunchInfo(argv=["fake", config.key()], effective={}, startup_s=runner.startup_s, simulated=True)
        self.closed = False
        self.dies_at = None  # the prompt at which this start's server dies (a crash while serving)
        self.requests = 0  # requests this start served (warm-up passes included)

    def warmup(self):
        pass

    def run_prompt(self, i):
        if i == self.dies_at:
            raise ServerDied(
                "the server exited while serving (code -6)",
                returncode=-6,
                log_tail="llama_decode: ...\nGGML_ASSERT(n_tokens_all <= n_batch) failed\nAborted",
            )
        request = math.exp(self.runner.rng.gauss(0, self.runner.request_noise))
        self.requests += 1
        if self.requests <= self.runner.cold_requests:
            request /= 1 + (self.runner.cold if self.config.is_baseline else self.runner.cold_speculative)
        tps = self.runner.base * (1 + 0.1 * i) * self.factor * request
        acc = None if self.config.is_baseline else self.runner.accept.get(self.config.drafter, 2.5)
        text = f"output of prompt {i} " * 20
        if self.config.drafter in self.runner.diverge:
            text = text[:10] + "XXXX" + text[14:]
        return PromptResult(index=i, completion_tokens=100, seconds=100 / tps, accept_length=acc, text=text)

    def reference(self, i, top_n):
        return None  # no log-probabilities: the lossless check falls back to the matching prefix

    def close(self):
        self.closed = True


@pytest.fixture
def space():
    return make_space()


@pytest.fixture
def every_candidate(monkeypatch):
    """Every candidate the surrogate ranks joins confirmation (``confirm.thin`` leaves no near-tie out: any chance
    is at least 0), for tests of a race among several."""
    from autotune.study import confirm

    monkeypatch.setattr(confirm, "JOIN_PROBABILITY", 0.0)


@pytest.fixture(autouse=True)
def _quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def recommending(
    config: dict[str, Any],
    study: str,
    verdict: Verdict,
    why: str,
    trial: int | None = None,
    tok_per_s: float | None = None,
) -> StudyResult:
    """A study result that recommends ``config`` and holds nothing else (a config chosen outside a study), for the
    exports' tests."""
    return StudyResult(
        study=study,
        simulated=None,
        units="tok/s",
        confirmation=ConfirmationState(keys=[]),
        verdict=verdict,
        basis="search",
        rests_on="search",
        exclusions=[],
        baselines={},
        fastest_baseline=None,
        confirmed=(),
        best=None,
        recommended=Recommendation(config, trial, tok_per_s, why),
        trials=(),
        schedule_rows=[],
    )


class CutAt(ModelRunner):
    """The simulator's runner, interrupted (as Ctrl-C or the harness's SIGTERM interrupt a study) at the ``nth``
    server start of a trial the ``phase`` queued (``records.SEEDED_*``), in study ``name`` at ``storage``."""

    def __init__(self, *args, storage: str, phase: str, nth: int, name: str = "cut", **kw) -> None:
        super().__init__(*args, **kw)
        self.storage, self.phase, self.nth, self.name, self.seen = storage, phase, nth, name, 0

    def launch(self, config):
        study = optuna.load_study(study_name=self.name, storage=self.storage)
        running = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
        if any(TrialRecord(t).seeded == self.phase for t in running):
            self.seen += 1
            if self.seen == self.nth:
                raise KeyboardInterrupt
        return super().launch(config)

"""A proposal the surrogate rules out is not launched (``search.not_worth_a_start``): with CUDA graphs off every
speculative config here runs at 0.45x the graphs-on baseline (the field report's kimi: ~60 tok/s against ~140),
so once the surrogate has its points, the sampler's and the design's proposals with graphs off cost no server
start. End to end on the orchestration with a scripted runner, and the gate's rules one by one."""

from __future__ import annotations

import dataclasses
import math

import optuna
from optuna.trial import TrialState

from autotune import records
from autotune.backends.sglang import SGLangBackend
from autotune.config import TrialConfig
from autotune.report import build_report
from autotune.study import Orchestrator, open_study, search
from autotune.study.context import StudyContext
from autotune.study.policies import Policies, RefinePolicy, StopPolicy

from .conftest import ScriptedRunner, make_space

GRAPH_GAIN = 1.6


def speed(c) -> float:
    """Relative to the graphs-off baseline: graphs on, a broad peak 1.25x over its own baseline at steps 4,
    topk 2, N 8; graphs off, 0.72x of its own baseline whatever the tree."""
    if not c.cuda_graph:
        return 0.72
    s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
    shape = math.exp(-0.02 * (s - 4) ** 2 - 0.1 * (math.log2(k) - 1) ** 2 - 0.004 * (n - 8) ** 2)
    return GRAPH_GAIN * 1.25 * shape


def _run(policies: Policies, n_trials: int = 30, seed: int = 1) -> tuple[optuna.Study, ScriptedRunner]:
    space = make_space(n_trials=n_trials, cuda_graph=(False, True), drafters=("good",))
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=seed)
    runner = ScriptedRunner(speed={"good": speed}, graph_gain=GRAPH_GAIN, seed=seed)
    Orchestrator(space, SGLangBackend(), runner, study, policies=policies).search(n_trials)
    return study, runner


NO_STOP = StopPolicy(settle=False)  # the budget is a quota: the two runs measure the same number of trials


def _skipped(study: optuna.Study) -> list:
    return [t for t in study.trials if records.TrialRecord(t).not_worth_a_start]


def test_configs_the_surrogate_rules_out_cost_no_server_start():
    study, runner = _run(Policies(stop=NO_STOP))
    skipped = _skipped(study)
    assert skipped, "no proposal was ruled out"
    for t in skipped:
        r = records.TrialRecord(t)
        assert t.state == TrialState.PRUNED and not t.intermediate_values and not r.measured
        assert r.seeded in (None, records.SEEDED_DESIGN)  # the sampler's or the design's, nothing else
        skip = r.not_worth_a_start
        assert skip["p"] < RefinePolicy().skip_below
        assert skip["predicted"] <= (1 - RefinePolicy().skip_margin) * skip["tok_per_s"]
        assert records.outcome_reason(t).startswith("not launched: the surrogate gives it P = ")
    # what was not launched could not have won: graphs off (0.45x the fastest baseline) among them, and none
    # within 5% of the true optimum (an answer is judged within 2% of it; the single GP's skips here were all
    # more than 10% under it, the factored surrogate's closest 9.5%)
    configs = [records.TrialRecord(t).effective_config() for t in skipped]
    assert any(not c.cuda_graph for c in configs)
    best = GRAPH_GAIN * 1.25
    assert max(speed(c) for c in configs) < 0.95 * best
    # no server was started for them: every start is a measured trial (baselines included)
    measured = [t for t in study.trials if records.TrialRecord(t).measured and not records.TrialRecord(t).is_duplicate]
    assert len(runner.launches) == len(measured)
    # they use their place in the budget, as a config refused for predicted out-of-memory does
    assert records.counted_trials(study) == 30


def test_without_the_gate_the_same_budget_starts_those_servers():
    gated, gated_runner = _run(Policies(stop=NO_STOP))
    plain, plain_runner = _run(Policies(stop=NO_STOP, refine=RefinePolicy(skip_below=None)))
    assert not _skipped(plain)

    def graphs_off_starts(runner: ScriptedRunner) -> int:
        return sum(1 for c in runner.launches if not c.is_baseline and not c.cuda_graph)

    assert graphs_off_starts(gated_runner) < graphs_off_starts(plain_runner)
    assert len(gated_runner.launches) < len(plain_runner.launches)
    # the answer is as good: the best measured config is as fast (within the runner's 1% noise)
    assert gated.best_value >= 0.97 * plain.best_value


def test_the_report_says_which_trials_were_not_launched():
    study, _ = _run(Policies(stop=NO_STOP))
    report = build_report(study)
    rows = {row["number"]: row for row in report["trials"]}
    for t in _skipped(study):
        assert rows[t.number]["reason"].startswith("not launched: ")
    assert report["reasons"]["PRUNED"]["not launched (the surrogate predicts it well behind the best)"] == len(
        _skipped(study)
    )


def _ctx(study: optuna.Study, **space_changes) -> StudyContext:
    space = dataclasses.replace(make_space(n_trials=30, cuda_graph=(False, True), drafters=("good",)), **space_changes)
    return StudyContext(space, SGLangBackend(), ScriptedRunner({}), study)


def test_the_gates_rules():
    study, _ = _run(Policies(stop=NO_STOP, refine=RefinePolicy(skip_below=None)))
    ctx = _ctx(study)
    grid = ctx.grid
    slow = next(c for c in grid if not c.cuda_graph)
    fast = max((c for c in grid if c.cuda_graph), key=speed)
    # a graphs-off config proposed by the sampler or the design is ruled out, a near-peak one is not
    for seeded in (None, records.SEEDED_DESIGN):
        assert search.not_worth_a_start(ctx, slow, seeded) is not None
        assert search.not_worth_a_start(ctx, fast, seeded) is None
    # never the server defaults or the surrogate's own picks, never a baseline
    for seeded in (records.SEEDED_DEFAULT, records.SEEDED_SURROGATE):
        assert search.not_worth_a_start(ctx, slow, seeded) is None
    baseline = TrialConfig.baseline(False)
    assert search.not_worth_a_start(ctx, baseline, None) is None
    # with load levels a level's winner can be a config the objective never favours: no gate
    loaded = _ctx(study, benchmark=dataclasses.replace(ctx.space.benchmark, concurrency=(1, 8)))
    assert search.not_worth_a_start(loaded, slow, None) is None
    # off by policy; and a margin no prediction reaches keeps it
    off = StudyContext(
        ctx.space, ctx.backend, ctx.runner, study, policies=Policies(refine=RefinePolicy(skip_below=None))
    )
    assert search.not_worth_a_start(off, slow, None) is None
    wide = Policies(refine=RefinePolicy(skip_margin=0.9))
    assert (
        search.not_worth_a_start(StudyContext(ctx.space, ctx.backend, ctx.runner, study, policies=wide), slow, None)
        is None
    )


def test_the_policy_refuses_nonsense():
    import pytest

    for bad in ({"skip_below": 0.0}, {"skip_below": 0.5}, {"skip_margin": -0.1}, {"skip_margin": 1.0}):
        with pytest.raises(ValueError):
            RefinePolicy(**bad)

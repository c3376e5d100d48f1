"""The pruner replayed on real per-prompt tok/s recorded on an NVIDIA H200 (llama-server with CUDA, an F16
Mistral-7B-shaped target, a good and a bad draft, CUDA graphs on and off, 27 configs x 2 interleaved starts,
4 prompts x 256 tokens: docs/gpu-runs/2026-12-01-h200/sweep.json).

Each start is replayed as a trial of one study, in the sweep's order, prompt by prompt, through
``BaselinePruner.decide`` (the baseline rule and the leader rule with the pooled prompt spread). "True" figures
are each config's two starts together. The rules must hold on this hardware as they do on the simulator: no
config that beats its baseline is stopped by the baseline rule, none at least as fast as its leader by the leader
rule, and the bad draft's clear losers are stopped by their second prompt."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune import records
from autotune.pruner import BaselinePruner
from autotune.stats import START_NOISE, log_ratios, pooled_spread

SAMPLE = Path(__file__).parent / "samples" / "h200-sweep-prompts.json"


def _key(c: dict) -> str:
    return json.dumps(c, sort_keys=True)


def _hmean(xs: list[float]) -> float:  # equal tokens per prompt: total tokens / total time
    return len(xs) / sum(1 / x for x in xs)


@pytest.fixture(scope="module")
def starts() -> list[dict]:
    return json.loads(SAMPLE.read_text())["starts"]


def _truth(starts: list[dict]) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for s in starts:
        by.setdefault(_key(s["config"]), []).append(_hmean(s["tok_per_s"]))
    return {k: statistics.fmean(v) for k, v in by.items()}


def _replay(starts: list[dict], pruner: BaselinePruner) -> list[dict]:
    """Every start as a trial; the outcome of each speculative one."""
    study = optuna.create_study(direction="maximize")
    labels = sorted({str(s["config"].get("drafter")) for s in starts} | {"none"})
    dist = {
        records.PARAM_DRAFTER: CategoricalDistribution(labels),
        records.PARAM_CUDA_GRAPH: CategoricalDistribution([True, False]),
    }
    order = sorted(starts, key=lambda s: (s["pass"], s["config"].get("drafter") is not None))
    out = []
    for s in order:
        c = s["config"]
        baseline = c.get("drafter") is None
        study.enqueue_trial(
            {records.PARAM_DRAFTER: "none" if baseline else c["drafter"], records.PARAM_CUDA_GRAPH: c["cuda_graph"]},
            user_attrs={records.ROLE: records.ROLE_BASELINE if baseline else records.ROLE_SPECULATIVE},
        )
        t = study.ask(dist)
        t.set_user_attr(records.CONFIG_KEY, _key(c))
        values = s["tok_per_s"]
        decision = None
        for i, v in enumerate(values):
            t.report(v, i)
            if not baseline and 1 <= i < len(values) - 1:
                d = pruner.decide(study, study._storage.get_trial(t._trial_id))  # noqa: SLF001
                if d is not None and d.prune:
                    decision = d
                    break
        if decision is not None:
            study.tell(t, state=TrialState.PRUNED)
        else:
            study.tell(t, _hmean(values))
        if not baseline:
            against = None
            if decision is not None and decision.against is not None:
                against = _key(json.loads(study.trials[decision.against].user_attrs[records.CONFIG_KEY]))
            out.append({"config": c, "rule": decision.rule if decision else None, "prompts": i + 1, "against": against})
    return out


def test_the_default_start_noise_is_what_the_h200_measured(starts: list[dict]) -> None:
    by: dict[str, dict[int, float]] = {}
    for s in starts:
        by.setdefault(_key(s["config"]), {})[s["pass"]] = _hmean(s["tok_per_s"])
    pairs = [math.log(v[0] / v[1]) for v in by.values() if len(v) == 2]
    sd = statistics.pstdev(pairs)
    assert len(pairs) == 27
    assert 0.5 * START_NOISE < sd < 1.5 * START_NOISE  # measured 0.035 (sd of a start / start log ratio)


def test_prompt_spreads_differ_by_config_so_the_larger_one_is_used(starts: list[dict]) -> None:
    base = {
        (s["pass"], s["config"]["cuda_graph"]): s["tok_per_s"] for s in starts if s["config"].get("drafter") is None
    }
    groups = [
        log_ratios(s["tok_per_s"], base[(s["pass"], s["config"]["cuda_graph"])])
        for s in starts
        if s["config"].get("drafter") is not None
    ]
    pooled = pooled_spread(groups, prior=None)
    assert pooled is not None and 0.03 < pooled.sd < 0.09  # measured 0.058
    own = sorted(statistics.stdev(g) for g in groups)
    assert own[-1] > 2 * pooled.sd  # long drafts spread their prompts more: the pool alone would be too tight


@pytest.mark.parametrize("leader", [True, False])
def test_replayed_pruning_is_right_on_real_hardware(starts: list[dict], leader: bool) -> None:
    truth = _truth(starts)
    base = {c: truth[_key({"drafter": None, "cuda_graph": c})] for c in (True, False)}
    outcomes = _replay(starts, BaselinePruner(leader=leader))
    losers = 0
    for o in outcomes:
        c = o["config"]
        speedup = truth[_key(c)] / base[c["cuda_graph"]]
        if o["rule"] == "baseline":
            assert speedup < 1.0, f"{c} beats its baseline ({speedup:.3f}) but was pruned"
        if o["rule"] == "leader":
            assert leader
            assert truth[_key(c)] < truth[o["against"]], f"{c} is as fast as the leader it lost to"
        if speedup < 0.7:
            losers += 1
            assert o["rule"] is not None and o["prompts"] <= 2, f"{c} ({speedup:.2f}x) ran {o['prompts']} prompts"
    assert losers >= 3
    if leader:  # the leader rule stops some configs that beat the baseline but not the leader
        assert any(o["rule"] == "leader" for o in outcomes)

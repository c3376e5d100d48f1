"""Every trial carries its evidence for the dashboard: a note (outcome, reason, config, argv) and its per-prompt
results and figure as Optuna artifacts in a filesystem store (the log artifact: tests/cli/test_dashboard.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import optuna
from optuna_dashboard import get_note

from autotune.backends.sglang import SGLangBackend
from autotune.config import PromptResult
from autotune.evidence import Evidence, prompts_jsonl, prompts_svg, trial_note
from autotune.study import Orchestrator

from .conftest import ScriptedRunner, make_space


def _artifacts(t: optuna.trial.FrozenTrial) -> dict[str, dict]:
    metas = [json.loads(v) for k, v in t.system_attrs.items() if k.startswith("artifacts:")]
    return {m["filename"]: m for m in metas}


def test_each_trial_gets_a_note_and_its_prompt_artifacts(tmp_path):
    space = make_space(n_trials=8, drafters=("good", "bad"))
    runner = ScriptedRunner(speed={"good": lambda c: 1.8, "bad": lambda c: 0.5}, crash=set())
    study = optuna.create_study(direction="maximize", storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    evidence = Evidence(tmp_path / "artifacts")
    Orchestrator(space, SGLangBackend(), runner, study, evidence=evidence).search(8)
    trials = study.get_trials()
    states = {t.state for t in trials}
    assert optuna.trial.TrialState.PRUNED in states and optuna.trial.TrialState.COMPLETE in states
    for t in trials:
        body = get_note(optuna.Trial(study, t._trial_id))
        assert body.startswith(f"## Trial {t.number}: {t.state.name}"), body[:80]
        if t.state == optuna.trial.TrialState.PRUNED:
            assert "**Reason:**" in body
        arts = _artifacts(t)
        if t.intermediate_values:
            assert set(arts) == {f"trial-{t.number}-prompts.jsonl", f"trial-{t.number}-prompts.svg"}
            meta = arts[f"trial-{t.number}-prompts.jsonl"]
            rows = (tmp_path / "artifacts" / meta["artifact_id"]).read_text().splitlines()
            assert len(rows) == len(t.intermediate_values)  # a pruned trial: the prompts it measured
            assert [round(json.loads(r)["tok_per_s"], 6) for r in rows] == [
                round(t.intermediate_values[s], 6) for s in sorted(t.intermediate_values)
            ]


def test_without_a_store_nothing_is_written(tmp_path):
    space = make_space(n_trials=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.8, "bad": lambda c: 0.5})
    study = optuna.create_study(direction="maximize")
    Orchestrator(space, SGLangBackend(), runner, study).search(3)
    assert all(not _artifacts(t) for t in study.get_trials())


def test_note_names_outcome_reason_argv_and_effective_config():
    attrs = {
        "config": {"drafter": "d", "cuda_graph": True, "num_steps": 9},
        "effective": {"drafter": "d", "cuda_graph": True, "num_steps": 8},
        "argv": ["python3", "-m", "sglang.launch_server", "--speculative-num-steps", "8"],
        "server_effective": {"speculative_num_steps": 8},
        "env": {"HF_TOKEN": "hf_x", "CUDA_VISIBLE_DEVICES": "0"},
        "prune_reason": "upper bound 0.91 < 1 after 2 prompts",
        "prompts": [PromptResult(0, 100, 1.0, accept_length=2.0).to_dict()],
    }
    body = trial_note(4, attrs, {"state": "PRUNED"}, ["p0"])
    assert body.startswith("## Trial 4: PRUNED")
    assert "**Reason:** upper bound 0.91 < 1 after 2 prompts" in body
    assert "--speculative-num-steps 8" in body and '"speculative_num_steps": 8' in body
    assert '"num_steps": 9' in body and '"num_steps": 8' in body  # suggested and effective
    assert "hf_x" not in body and "HF_TOKEN=***" in body
    assert "| p0 | 100 | 1.00 | 100.0 | 2.00 |" in body


def test_prompt_figures_pair_each_prompt_with_the_baseline():
    results = [PromptResult(0, 100, 1.0, text="a"), PromptResult(1, 100, 0.5, text="b")]
    rows = [json.loads(x) for x in prompts_jsonl(results, ["p0", "p1"], [50.0, 100.0]).splitlines()]
    assert [(r["prompt"], r["ratio"], r["text"]) for r in rows] == [("p0", 2.0, "a"), ("p1", 2.0, "b")]
    svg = ET.fromstring(prompts_svg("t", [100.0, 200.0], [50.0, 100.0], ["p0", "p1"]))
    bars = [
        r
        for r in svg.iter("{http://www.w3.org/2000/svg}rect")
        if r.find("{http://www.w3.org/2000/svg}title") is not None
    ]
    assert len(bars) == 4  # baseline and trial, per prompt
    heights = [float(b.get("height")) for b in bars]
    assert abs(heights[1] - 2 * heights[0]) < 0.2 and abs(heights[3] - 2 * heights[2]) < 0.2

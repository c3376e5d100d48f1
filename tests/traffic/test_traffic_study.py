"""A study from a request log (#45) on the simulator: the subset it picks, each request measured with its own
answer limit and sampling, the guards said before any GPU time, bad logs refused with exit 2."""

from __future__ import annotations

import dataclasses
import json
import random

import optuna
import pytest
import yaml

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.sglang import SGLangBackend
from autotune.space import load_space

from ..cli.helpers import REPO, autotune, report, study
from .logs import chat_line, clean_log, flattering_log, write_jsonl

SPACE = """name: traffic
server:
  backend: sglang
  model_path: /models/Llama-3.1-8B-Instruct
  version: "0.5.23"
  extra_args: [--dtype, bfloat16]
drafters:
  - name: eagle3-llama31-8b
    path: /models/EAGLE3-LLaMA3.1-Instruct-8B
search:
  cuda_graph: [true]
  num_steps: {low: 1, high: 8}
  topk: [1, 2, 4]
  num_draft_tokens: {low: 2, high: 32}
benchmark:
  requests_file: LOG
  requests: 24
simulate:
  scenario: llama31-8b-h100
"""


def _space(tmp_path, log_name="log.jsonl"):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.replace("LOG", log_name))
    return path


def test_a_space_takes_its_prompts_from_a_request_log_with_their_own_settings(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=1200)
    space = load_space(str(_space(tmp_path)))
    b = space.benchmark
    assert len(b.prompts) == 24 and b.api == "chat"  # a chat log is replayed through the chat template
    assert b.traffic is not None and b.traffic.log_requests == 1200 and b.traffic.guards == ()
    logged = {json.loads(x)["custom_id"]: json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()}
    for p in b.prompts:
        body = logged[p.id]["body"]
        assert b.tokens_for(p) == body["max_tokens"] and b.temperature_for(p) == body["temperature"]
        assert p.messages is not None and p.messages[-1] == ("user", body["messages"][-1]["content"])
    assert not b.greedy  # the log samples: the lossless check cannot run
    # the request the server gets: the logged turns, top_p and limits
    p = dataclasses.replace(b.prompts[0], thinking=True)
    for backend in (SGLangBackend(), LlamaCppBackend()):
        path, body = backend.request(
            p.text, max_tokens=b.tokens_for(p), temperature=b.temperature_for(p), api=b.api, request=p
        )
        assert path == "/v1/chat/completions" and body["messages"][0]["role"] == "system"
        assert body["top_p"] == p.top_p and body["chat_template_kwargs"] == {"enable_thinking": True}
        # the lossless check's greedy reference asks the same turns, greedy
        path, ref = backend.reference_request(p.text, max_tokens=b.tokens_for(p), top_n=5, api=b.api, request=p)
        assert ref["messages"] == body["messages"] and ref["chat_template_kwargs"] == {"enable_thinking": True}
        assert ref["temperature"] == 0.0 and "top_p" not in ref and ref["max_tokens"] == b.tokens_for(p)
    # SGLang's native /generate (api: completions) carries the request's top_p too
    path, body = SGLangBackend().request(p.text, max_tokens=8, temperature=0.5, request=p)
    assert path == "/generate" and body["sampling_params"]["top_p"] == p.top_p


def test_the_holdout_is_as_many_requests_again_from_the_rest_and_0_turns_it_off(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=1200)
    b = load_space(str(_space(tmp_path))).benchmark
    assert len(b.holdout) == 24 and b.traffic is not None and b.traffic.holdout == 24
    assert not {p.id for p in b.holdout} & {p.id for p in b.prompts}
    assert b.prompt_at(24) == b.holdout[0] and b.prompt_at(23) == b.prompts[23]  # a session's index: then the holdout
    (tmp_path / "space.yaml").write_text(
        SPACE.replace("requests: 24\n", "requests: 24\n  holdout: 0\n").replace("LOG", "log.jsonl")
    )
    assert load_space(str(tmp_path / "space.yaml")).benchmark.holdout == ()


def test_holdout_without_a_request_log_is_exit_2(tmp_path):
    text = SPACE.replace("  requests_file: LOG\n  requests: 24\n", "  prompts: [{id: a, text: hi}]\n  holdout: 8\n")
    (tmp_path / "space.yaml").write_text(text)
    r = autotune("validate", str(tmp_path / "space.yaml"), "--simulate")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "benchmark.holdout" in r.stderr and "needs requests_file" in r.stderr


def test_a_study_runs_from_the_log_and_says_what_it_picked_first(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=1200)
    space, studies = _space(tmp_path), tmp_path / "studies"
    r = study(space, studies)
    head = r.stderr.split("plan: ")[0]
    assert (
        "traffic: 24 of 1200 logged requests picked (stratified by length and category; 24 more from the rest to "
        "check them against)" in head
    )
    assert "the lossless check at temperature 0 on the same prompts" in head
    assert (
        "winner check 0-1 server starts (one more start of the winner, if one wins: its answers at temperature 0"
        in (r.stderr)
    )  # the winner's greedy answers and its acceptance on the holdout: one more start
    assert "holdout check 0 server starts (one extra baseline pass: 24 requests from the rest" in r.stderr
    # measured on the first baseline's start, said before the search goes on
    said = r.stderr.index("traffic: baseline tok/s on the subset")
    assert said < r.stderr.index("#1   COMPLETE")
    db = next(studies.glob("*.db"))
    stored = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{db}")[0], storage=f"sqlite:///{db}")
    picked = load_space(str(space)).benchmark
    done = [t for t in stored.trials if t.state == optuna.trial.TrialState.COMPLETE]
    results = [res for t in done for res in t.user_attrs.get("prompts") or []]
    assert len(results) >= 24
    check = stored.user_attrs["traffic_holdout"]
    assert check["trial"] == 0 and len(check["subset"]) == len(check["rest"]) == 24
    assert all(len(t.user_attrs.get("prompts") or []) <= 24 for t in done)  # the holdout is not in the objective
    # the log samples: the speedup at its sampling, the lossless check at temperature 0 (the baseline's references
    # against the winner's greedy answers on one more start)
    assert len(done[0].user_attrs["reference"]) == 24 and not any("lossless" in t.user_attrs for t in done)
    greedy = stored.user_attrs["greedy_lossless"]
    assert greedy["ok"] is True and greedy["temperature"] == 0.0 and greedy["baseline"] == 0
    assert len(greedy["prefix_fraction"]) == 24 and set(greedy["prefix_fraction"]) == {1.0}
    assert "lossless check at temperature 0: lossless: trial " in r.stderr
    for res in results:
        p = picked.prompts[res["index"]]
        assert res["completion_tokens"] <= picked.tokens_for(p)  # each answer stops at its own limit
    assert any(res["completion_tokens"] > 256 for res in results)  # limits above the smallest logged one


def test_validate_names_each_guard_that_fires(tmp_path):
    rng = random.Random(2)
    tpl = "Translate the following sentence into French and answer with the translation only: "
    write_jsonl(tmp_path / "log.jsonl", [chat_line(rng, i, ask_text=tpl + f"item {i} please") for i in range(300)])
    r = autotune("validate", str(_space(tmp_path)), "--simulate")
    assert r.returncode == 0, r.stderr
    assert "warning: traffic guard templated: " in r.stderr


def test_a_bad_log_is_exit_2_naming_its_file_and_line(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"messages": [{"role": "user", "content": "x"}]}\n{"prompt": 3}\n')
    r = autotune("validate", str(_space(tmp_path)), "--simulate")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{tmp_path / 'log.jsonl'}:2" in r.stderr and "prompt" in r.stderr


def test_the_report_gives_the_subset_the_guards_and_the_speedup_by_input_length(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=1200)
    space, studies = _space(tmp_path), tmp_path / "studies"
    study(space, studies)
    rep = report(space, studies)
    t = rep["traffic"]
    assert (t["log_requests"], t["picked"], t["guards"]) == (1200, 24, [])
    assert rep["acceptance_guards"] == []  # EAGLE-3 accepts alike on every length third of a clean log
    h = t["holdout_check"]
    assert h["warning"] is None and h["ratio"]["low"] <= 1.02 and h["ratio"]["high"] >= 1 / 1.02  # a clean log
    assert h["subset_tok_per_s"]["n"] == h["rest_tok_per_s"]["n"] == 24
    assert t["holdout_text"].startswith(
        "subset vs the rest of the log (baseline trial 0): baseline tok/s on the subset"
    )
    # the winner's acceptance on the subset (its search trial) against the holdout (its one more start): alike
    a = t["acceptance_check"]
    assert a["trial"] == rep["recommended"]["trial"] and a["warning"] is None and len(a["rest"]) == 24
    assert a["subset_accepted_per_round"]["n"] == a["rest_accepted_per_round"]["n"] == 24
    assert a["ratio"]["low"] <= 1.02 and a["rest_accepted_per_round"]["point"] == pytest.approx(sum(a["rest"]) / 24 - 1)
    assert t["acceptance_text"].startswith(
        f"subset vs the rest of the log (the winner, after confirmation): trial {a['trial']}'s accepted draft tokens"
    )
    assert rep["recommended"]["config"]["drafter"]  # this seeded study recommends EAGLE-3
    rows = t["by_length"]
    assert [x["bucket"] for x in rows] == ["short", "medium", "long"] and sum(x["prompts"] for x in rows) == 24
    assert rows[0]["input_tokens"][1] <= rows[2]["input_tokens"][0]
    assert all(x["speedup"] == x["tok_per_s"] / x["baseline_tok_per_s"] for x in rows)
    assert t["by_length_text"].startswith("by input length (search measurement): short inputs")
    out = t["by_output_length"]  # the same prompts by the length of the baseline's answers
    # (answers at their max_tokens share a length: a third with none is left out)
    assert [x["bucket"] for x in out] == [b for b in ("short", "medium", "long") if b in {x["bucket"] for x in out}]
    assert len(out) >= 2 and sum(x["prompts"] for x in out) == 24 and "input_tokens" not in out[0]
    assert out[0]["output_tokens"][1] <= out[-1]["output_tokens"][0]
    assert t["by_output_length_text"].startswith(f"by output length (search measurement): {out[0]['bucket']} outputs")
    text = autotune("report", str(space), "--simulate", "--studies-dir", str(studies)).stdout
    assert "traffic: 24 of 1200 logged requests measured" in text and t["by_output_length_text"] in text
    assert "subset vs the rest of the log (baseline trial 0): baseline tok/s" in text
    assert "subset vs the rest of the log (the winner, after confirmation): trial" in text and "WARNING" not in text
    html = tmp_path / "r.html"
    autotune("report", str(space), "--simulate", "--html", str(html), "--studies-dir", str(studies))
    assert "id='traffic'" in html.read_text() and "<p id='holdout'>subset vs the rest" in html.read_text()
    assert "<p id='holdout-acceptance'>subset vs the rest of the log (the winner" in html.read_text()
    assert "<table id='by-output-length'><tr><th>output length</th>" in html.read_text()


def test_a_subset_that_flatters_the_drafter_is_a_named_warning_after_confirmation(tmp_path):
    """#45: the subset's requests ask for code (the simulator's drafter accepts more there), the rest for poems
    (less): the baseline's speed cannot tell (the holdout check stays silent), the winner's acceptance on the
    holdout, measured on its one more start after confirmation, can."""
    flattering_log(tmp_path / "log.jsonl")
    space, studies = _space(tmp_path), tmp_path / "studies"
    r = study(space, studies)
    assert "its acceptance on the 24 holdout requests against the subset's" in r.stderr.split("plan: ")[1]
    rep = report(space, studies)
    t = rep["traffic"]
    assert t["holdout_check"]["warning"] is None  # the baseline runs as fast on either
    a = t["acceptance_check"]
    assert a["trial"] == rep["recommended"]["trial"] and a["min_gain"] == 0.02
    sub, rest, ratio = a["subset_accepted_per_round"], a["rest_accepted_per_round"], a["ratio"]
    assert (
        rest["high"] < sub["low"]
        and ratio["low"] > 1.02
        and ratio["point"] == pytest.approx(sub["point"] / rest["point"])
    )
    assert a["warning"].startswith("the drafter accepts fewer draft tokens a round on the rest of the log")
    assert "WARNING subset-flatters-drafter: " in t["acceptance_text"]
    said = autotune("report", str(space), "--simulate", "--studies-dir", str(studies)).stdout
    assert "WARNING subset-flatters-drafter" in said
    html = tmp_path / "r.html"
    autotune("report", str(space), "--simulate", "--html", str(html), "--studies-dir", str(studies))
    assert "<p id='holdout-acceptance' class='warn'>subset vs the rest of the log (the winner" in html.read_text()


def test_by_length_warns_when_the_longest_inputs_lose():
    from autotune.config import PromptResult
    from autotune.traffic import by_length, length_text

    def res(i, tokens, secs):
        return PromptResult(index=i, completion_tokens=100, seconds=secs, ttft_s=None, prompt_tokens=tokens)

    base = [res(i, 100 * (i + 1), 1.0) for i in range(6)]
    spec = [res(i, 100 * (i + 1), 0.5 if i < 4 else 1.25) for i in range(6)]  # 2x on short, 0.8x on long inputs
    rows = by_length(spec, base)
    assert [(x.bucket, round(x.speedup, 2)) for x in rows] == [("short", 2.0), ("medium", 2.0), ("long", 0.8)]
    assert "WARNING: the longest inputs lose to the baseline (0.80x)" in length_text(rows)
    assert "WARNING" not in length_text(by_length(base, base))


def test_by_output_length_thirds_the_baselines_answers_and_names_every_losing_third():
    """Output thirds by the baseline's answer's tokens, not the prompt's: short answers (little decode to gain on)
    lose here, long ones gain, whatever the inputs' lengths."""
    from autotune.config import PromptResult
    from autotune.traffic import by_length, length_text

    def res(i, out, secs):
        return PromptResult(index=i, completion_tokens=out, seconds=secs, ttft_s=None, prompt_tokens=500 - 10 * i)

    outs = [20, 40, 200, 220, 800, 900]
    base = [res(i, n, n / 100) for i, n in enumerate(outs)]
    spec = [res(i, n, n / 100 * (1.25 if n < 100 else 0.5)) for i, n in enumerate(outs)]
    rows = by_length(spec, base, side="output")
    assert [(x.bucket, x.to_dict()["output_tokens"], round(x.speedup, 2)) for x in rows] == [
        ("short", [20, 40], 0.8),
        ("medium", [200, 220], 2.0),
        ("long", [800, 900], 2.0),
    ]
    text = length_text(rows, side="output")
    assert text.startswith("by output length (search measurement): short outputs (20-40 tokens, 2 prompts) 0.80x")
    assert text.endswith("WARNING: answers of these lengths lose to the baseline: short (0.80x)")
    assert by_length(spec, base)[0].to_dict()["input_tokens"] == [
        450,
        460,
    ]  # by input, the same prompts third otherwise
    assert "WARNING" not in length_text(by_length(base, base, side="output"), side="output")


def test_a_winner_that_is_lossy_at_temperature_0_is_caught_though_the_log_samples(tmp_path):
    """#45: the divergent drafter (a broken kernel, the simulator's) wins while the requests sample, where no answer
    can be checked; its greedy answers on the same prompts depart from the baseline's: an alarm. Confirmation's
    fresh baselines sample too, so their answers never join the baselines' floor (on the H100 of
    docs/gpu-runs/2026-12-06-h100-traffic they did: 33 chance divergences raised the tolerance in force to 2.87
    nats)."""
    rng = random.Random(0)
    write_jsonl(tmp_path / "code.jsonl", [chat_line(rng, i, category="code") for i in range(1000)])
    data = yaml.safe_load((REPO / "spaces" / "eagle3.yaml").read_text())
    data["drafters"] = [{"name": "divergent", "path": "/models/divergent"}]
    data["search"] = {**data["search"], "drafters": ["divergent"], "cuda_graph": [True]}
    data["benchmark"] = {"requests_file": "code.jsonl", "requests": 12, "holdout": 0}
    space, studies = tmp_path / "space.yaml", tmp_path / "studies"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    study(space, studies)
    rep = report(space, studies)
    assert rep["verdict"] == "speculation-wins"  # measured while sampling: nothing to compare there
    assert all(t.get("lossless") is None for t in rep["trials"])
    lo = rep["lossless"]
    assert lo["greedy"]["ok"] is False and lo["greedy"]["trial"] == rep["recommended"]["trial"]
    assert rep["confirmed"] and lo["baseline_divergences"] == []  # sampled answers are not the server's numerics
    assert lo["greedy_text"].startswith("lossless check at temperature 0: LOSSY: trial ")
    assert "measured at each prompt's own sampling" in lo["figures_from"]
    assert any("diverges from its baseline at temperature 0" in f and "do not deploy it" in f for f in rep["flags"])
    html = tmp_path / "r.html"
    autotune("report", str(space), "--simulate", "--html", str(html), "--studies-dir", str(studies))
    assert "<p id='greedy-lossless' class='warn'>lossless check at temperature 0: LOSSY" in html.read_text()


def test_acceptance_far_below_the_drafters_reference_is_a_named_warning(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=1200)
    space, studies = _space(tmp_path), tmp_path / "studies"
    text = space.read_text().replace(
        "    path: /models/EAGLE3-LLaMA3.1-Instruct-8B\n",
        "    path: /models/EAGLE3-LLaMA3.1-Instruct-8B\n    reference_acceptance: 9.0\n",
    )
    space.write_text(text)
    study(space, studies, "--no-confirm", n_trials=3)
    rep = report(space, studies)
    (g,) = rep["acceptance_guards"]
    assert g["name"] == "acceptance-far-below" and g["text"].startswith("eagle3-llama31-8b (trial ")
    assert "against the 9.00 it reaches elsewhere (drafters[].reference_acceptance" in g["text"]
    out = autotune("report", str(space), "--simulate", "--studies-dir", str(studies)).stdout
    assert "guard acceptance-far-below: eagle3-llama31-8b" in out
    html = tmp_path / "r.html"
    autotune("report", str(space), "--simulate", "--html", str(html), "--studies-dir", str(studies))
    assert "id='guard-acceptance-far-below'" in html.read_text()


def test_reference_acceptance_must_exceed_1(tmp_path):
    clean_log(tmp_path / "log.jsonl", n=50)
    space = _space(tmp_path)
    space.write_text(
        space.read_text().replace(
            "    path: /models/EAGLE3-LLaMA3.1-Instruct-8B\n",
            "    path: /models/EAGLE3-LLaMA3.1-Instruct-8B\n    reference_acceptance: 0.7\n",
        )
    )
    r = autotune("validate", str(space), "--simulate")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "drafters[0].reference_acceptance" in r.stderr


def test_one_more_start_of_the_winner_serves_the_lossless_check_and_the_holdouts_acceptance(tmp_path):
    """A sampling log with a holdout: both checks after confirmation on one start of the winner (the plan's one
    ``winner check`` start), and none again once both are recorded (a resumed study)."""
    from autotune.records import greedy_lossless, traffic_acceptance
    from autotune.seam import VirtualClock
    from autotune.sim import ModelRunner, simulated_space
    from autotune.study import Orchestrator, confirm, open_study, winner
    from autotune.verdict import Verdict

    clean_log(tmp_path / "log.jsonl", n=1200)
    space = load_space(str(_space(tmp_path)))
    sim, backend, clock = simulated_space(space), SGLangBackend(), VirtualClock()
    runner = ModelRunner(sim, backend, clock, seed=0)
    study = open_study(space, optuna.storages.InMemoryStorage(), "one-start", seed=0, simulated=True)
    orch = Orchestrator(sim, backend, runner, study, clock=clock)
    orch.search(6)
    state = confirm.confirm(orch.ctx)
    assert state.verdict == Verdict.SPECULATION_WINS
    before = runner.launches
    winner.check(orch.ctx, state)
    assert runner.launches == before + 1
    lossless, accepted = greedy_lossless(study), traffic_acceptance(study)
    assert lossless is not None and accepted is not None and lossless["trial"] == accepted["trial"] == state.best
    assert lossless["ok"] is True and accepted["warning"] is None
    winner.check(orch.ctx, state)
    assert runner.launches == before + 1

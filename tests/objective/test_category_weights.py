"""``objective.weights`` over prompt categories: the space's checks, the weighted objective (value, speedup, prune
bound) as pure functions, and a seeded simulated study whose winner flips with the weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from autotune import objective
from autotune.config import PromptResult
from autotune.space import load_space
from autotune.space.model import ObjectiveSpec
from autotune.stats import Spread
from tests.cli.helpers import REPO, autotune

PROMPTS = REPO / "tests" / "sim" / "prompts"


def mixed_prompts() -> list[dict]:
    """The simulator's code-edit prompts and its chat prompts (its one creative prompt counted as chat)."""
    out = []
    for name in ("code_edit.yaml", "chat.yaml"):
        for p in yaml.safe_load((PROMPTS / name).read_text()):
            out.append({**p, "category": "chat" if p["category"] == "creative" else p["category"]})
    return out


def flip_space(tmp_path: Path, weights: dict | None, name: str = "flip", **bench) -> Path:
    """``spaces/methods.yaml`` cut to EAGLE-3 and n-gram on the mixed prompts, a small budget."""
    doc = yaml.safe_load((REPO / "spaces" / "methods.yaml").read_text())
    methods = doc["search"]["methods"]
    doc["name"] = name
    doc["search"]["methods"] = {"eagle3": methods["eagle3"], "ngram": methods["ngram"]}
    doc["drafters"] = [d for d in doc["drafters"] if d["name"] == "eagle3-llama31-8b"]
    doc["benchmark"].pop("prompts_file")
    doc["benchmark"]["prompts"] = mixed_prompts()
    doc["benchmark"].update(bench)
    doc["budget"] = {"n_trials": 8}
    doc["verdict"] = {"repeats": 2, "max_repeats": 3, "confirm_top": 2}
    if weights is not None:
        doc["objective"] = {"weights": weights}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ----------------------------------------------------------------------------------------------- the space


def test_category_weights_load_and_normalise(tmp_path):
    space = load_space(flip_space(tmp_path, {"code-edit": 3, "chat": 1}))
    assert space.objective.by_category
    assert space.objective.category_weights() == {"code-edit": 0.75, "chat": 0.25}
    assert space.objective.weights_for((1,)) == {1: 1.0}  # levels: one stream, as always
    assert space.benchmark.categories[:5] == ("code-edit",) * 5 and set(space.benchmark.categories[5:]) == {"chat"}
    # level weights are untouched
    assert ObjectiveSpec(weights={1: 1, 8: 3}).category_weights() is None
    assert ObjectiveSpec(weights={1: 1, 8: 3}).weights_for((1, 8)) == {1: 0.25, 8: 0.75}
    assert ObjectiveSpec().category_weights() is None


@pytest.mark.parametrize(
    ("weights", "bench", "needle"),
    [
        (
            {"code": 1, "chat": 1},
            {},
            "objective.weights.code: 'code' is not a category of the prompts (their categories: chat, code-edit)",
        ),
        ({"code-edit": 1, 1: 1}, {}, "either load levels or prompt categories as keys, not both"),
        ({"code-edit": 0, "chat": 0}, {}, "objective.weights: expected at least one positive weight"),
        ({"code-edit": 1}, {"concurrency": [1, 8]}, "weights over prompt categories need benchmark.concurrency [1]"),
        ({"code-edit": -1, "chat": 1}, {}, "objective.weights.code-edit"),
    ],
)
def test_bad_category_weights_are_one_line_exit_2_nothing_written(tmp_path, weights, bench, needle):
    space = flip_space(tmp_path, weights, **bench)
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--studies-dir", str(studies))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and str(space) in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not studies.exists() or not any(studies.rglob("*"))


def test_a_prompt_without_a_category_is_refused_under_category_weights(tmp_path):
    space = flip_space(tmp_path, {"code-edit": 1, "chat": 1})
    doc = yaml.safe_load(space.read_text())
    doc["benchmark"]["prompts"][2].pop("category")
    space.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = autotune("validate", str(space), "--simulate")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "prompt 'fix-off-by-one' has no category (1 without one)" in r.stderr, r.stderr
    # without category weights the same prompts are fine
    doc.pop("objective")
    space.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert autotune("validate", str(space), "--simulate").returncode == 0


# ------------------------------------------------------------------------------------------ the objective


def _results(tps: list[float], tokens: int = 100) -> list[PromptResult]:
    return [PromptResult(index=i, completion_tokens=tokens, seconds=tokens / v) for i, v in enumerate(tps)]


CATS = ("code", "code", "chat", "chat")


def _of(weights: dict[str, float], categories=CATS) -> objective.Objective:
    return objective.Objective(categories=categories, category_weights=weights)


def test_category_value_is_the_weighted_geometric_mean_of_category_tok_per_s():
    res = _results([100, 300, 50, 50])
    # code: 200 tokens in 1/100 + 1/300 s ... = 150 tok/s aggregate; chat 50 tok/s
    by = objective.Objective(categories=CATS).category_tok_per_s(res)
    assert by == pytest.approx({"code": 150.0, "chat": 50.0})
    assert _of({"code": 0.7, "chat": 0.3}).value(res) == pytest.approx(150**0.7 * 50**0.3)
    assert _of({"code": 1.0, "chat": 0.0}).value(res) == pytest.approx(150.0)
    # the ratio of two configs' objectives is the weighted geometric mean of their per-category speedups
    base = _results([100, 100, 50, 50])
    w = {"code": 0.7, "chat": 0.3}
    ratio = _of(w).value(res) / _of(w).value(base)
    s, on = _of(w).category_speedup(res, base)
    assert s == pytest.approx(ratio) and s == pytest.approx(1.5**0.7) and on == ["code", "chat"]
    # stopped early: over the categories measured, their weights renormalised
    assert _of(w).category_speedup(res[:2], base) == (pytest.approx(1.5), ["code"])
    assert _of({"code": 0.0, "chat": 1.0}).category_speedup(res[:2], base) == (None, [])


def _steps(tps: list[float]) -> dict[int, float]:
    return dict(enumerate(tps))


def test_category_prune_bound_follows_the_weights():
    """A config 2x on code and 0.5x on chat: pruned when chat carries the weight, kept when code does, and no
    decision before every weighted category has its prompts."""
    cats = ("code",) * 4 + ("chat",) * 4
    base = _steps([100.0] * 8)
    trial = _steps([200, 205, 195, 200, 50, 51, 49, 50])
    opts = {"confidence": 0.95, "min_prompts": 2, "start_noise": 0.035}
    chat = _of({"code": 0.0, "chat": 1.0}, cats).prune(trial, base, **opts)
    code = _of({"code": 1.0, "chat": 0.0}, cats).prune(trial, base, **opts)
    even = _of({"code": 0.5, "chat": 0.5}, cats).prune(trial, base, **opts)
    assert chat.prune and chat.upper_bound < 0.6 and "categories weighted" in chat.reason
    assert not code.prune and code.upper_bound > 2.0
    assert not even.prune  # 2x and 0.5x: a geometric mean of 1
    # the code prompts come first: with chat weighted, nothing is decided on them alone
    early = _of({"code": 0.0, "chat": 1.0}, cats).prune({i: trial[i] for i in range(5)}, base, **opts)
    assert not early.prune and math.isinf(early.upper_bound) and "category chat: only 1" in early.reason
    # equal weights over one category reduce to the pooled per-prompt bound's mean
    one = _of({"chat": 1.0}, cats).prune(trial, base, **opts)
    assert one.upper_bound == pytest.approx(chat.upper_bound)
    # a wide study spread widens the bound
    wide = _of({"code": 0.0, "chat": 1.0}, cats).prune(trial, base, spread=Spread(sd=0.5, df=20), **opts)
    assert wide.upper_bound > chat.upper_bound


def test_pruner_uses_the_category_bound(tmp_path):
    """``BaselinePruner`` built from a space with category weights (``storage.make_pruner``) carries them."""
    from autotune.study.storage import make_pruner

    space = load_space(flip_space(tmp_path, {"code-edit": 0, "chat": 1}))
    p = make_pruner(space)
    assert p.objective.category_weights == {"code-edit": 0.0, "chat": 1.0}
    assert p.objective.categories == space.benchmark.categories
    plain = make_pruner(load_space(flip_space(tmp_path, None, name="plain")))
    assert plain.objective.category_weights == {}


# ------------------------------------------------------------------------------------------ a flip study


def _study(tmp_path: Path, weights: dict | None, name: str) -> dict:
    space = flip_space(tmp_path, weights, name=name)
    studies = tmp_path / f"studies-{name}"
    argv = ["study", str(space), "--simulate", "--in-process", "--seed", "0", "--studies-dir", str(studies), "--json"]
    r = autotune(*argv)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    rep["_html"] = next(studies.rglob("report.html")).read_text()
    return rep


def test_weights_over_categories_flip_the_winner(tmp_path):
    """The same prompts (code edits and chat) and seed: weighted to code, n-gram wins (it copies the prompt's
    code); weighted to chat, EAGLE-3 wins. Were the weights ignored both studies would be one study."""
    code = _study(tmp_path, {"code-edit": 1, "chat": 0}, "code")
    chat = _study(tmp_path, {"code-edit": 0, "chat": 1}, "chat")
    assert code["verdict"] == chat["verdict"] == "speculation-wins"
    assert code["methods"]["winner"] == "ngram", code["methods"]["text"]
    assert chat["methods"]["winner"] == "eagle3", chat["methods"]["text"]
    for rep, (cat, other) in ((code, ("code-edit", "chat")), (chat, ("chat", "code-edit"))):
        m = rep["methods"]
        assert m["category_weights"] == {cat: 1.0, other: 0.0}
        assert rep["objective"]["category_weights"] == m["category_weights"]
        assert rep["objective"]["text"].startswith(f"weighted over categories code-edit {int(cat == 'code-edit')}")
        # the confirmed headline is the weighted objective's: the winner's speedup on its category, not the mix
        table = m["categories"][m["winner"]]
        head = rep["best"]["speedup_ci"]["point"]
        assert abs(math.log(head / table[cat])) < abs(math.log(head / table[other])), (head, table)
        assert head == pytest.approx(table[cat], rel=0.15)
        # the HTML report says it too: the objective line and the per-category table with the weights
        html = rep["_html"]
        assert "id='objective'>objective: weighted over categories" in html
        assert "<table id='categories'>" in html and f"{cat} (weight 1)" in html
        assert "search figures from that config's start" in html  # not to be read as confirmed intervals
    # the two winners' category tables show why: n-gram far ahead on code, behind on chat
    ng, e3 = code["methods"]["categories"]["ngram"], chat["methods"]["categories"]["eagle3"]
    assert ng["code-edit"] > e3["code-edit"] and ng["chat"] < e3["chat"]


def test_pruner_judges_a_running_trial_by_the_weighted_categories():
    """In-memory study: a trial 1.6x on code prompts (0-2) and 0.6x on chat prompts (3-5). Weighted to chat it is
    pruned against the baseline once two chat prompts are in; weighted to code it is not, whatever chat does; with
    no weights the plain per-prompt rule applies."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from autotune import records
    from autotune.pruner import BaselinePruner

    dist = {
        records.PARAM_DRAFTER: CategoricalDistribution(["none", "d"]),
        records.PARAM_CUDA_GRAPH: CategoricalDistribution([True, False]),
    }
    cats = ("code",) * 3 + ("chat",) * 3
    base = {i: 100.0 + 3 * i for i in range(6)}
    ratios = [1.6, 1.62, 1.58, 0.6, 0.61, 0.59]

    def decide(weights: dict[str, float] | None, steps: int):
        study = optuna.create_study(direction="maximize")
        study.add_trial(
            create_trial(
                state=optuna.trial.TrialState.COMPLETE,
                value=100.0,
                params={records.PARAM_DRAFTER: "none", records.PARAM_CUDA_GRAPH: True},
                distributions=dist,
                user_attrs={records.ROLE: records.ROLE_BASELINE, records.MEASURED: True},
                intermediate_values=base,
            )
        )
        study.enqueue_trial({records.PARAM_DRAFTER: "d", records.PARAM_CUDA_GRAPH: True})
        t = study.ask(dist)
        for i in range(steps):
            t.report(base[i] * ratios[i], i)
        frozen = study._storage.get_trial(t._trial_id)  # noqa: SLF001 - the frozen view the pruner gets
        pruner = BaselinePruner(
            objective=objective.Objective(categories=cats, category_weights=weights or {}), leader=False
        )
        return pruner.decide(study, frozen)

    assert not decide({"code": 0.0, "chat": 1.0}, 4).prune  # one chat prompt: no decision yet
    chat = decide({"code": 0.0, "chat": 1.0}, 5)
    assert chat.prune and chat.rule == "baseline" and chat.upper_bound < 1
    assert not decide({"code": 1.0, "chat": 0.0}, 6).prune
    assert decide({"code": 1.0, "chat": 0.0}, 6).upper_bound > 1.3
    # the per-prompt rule over all six prompts (no weights) sees a gain and a loss mixed: no prune either
    assert not decide(None, 6).prune

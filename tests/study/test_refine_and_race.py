"""The surrogate's trials at the end of the search, the candidates it ranks, and the confirmation race."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from autotune.backends.sglang import SGLangBackend
from autotune.records import Round
from autotune.report import build_report
from autotune.space import BudgetSpec, VerdictSpec
from autotune.study import Orchestrator, open_study, race_survivors, run

from .conftest import ScriptedRunner, make_space


def peak(c) -> float:
    """Smooth in every knob, best at steps 5, topk 4, N 14 (inside make_space's grid)."""
    s, k, n = c.knob("num_steps"), c.knob("topk"), c.knob("num_draft_tokens")
    return 2.0 * math.exp(-0.03 * (s - 5) ** 2 - 0.15 * (math.log2(k) - 2) ** 2 - 0.004 * (n - 14) ** 2)


def _space(n_trials=16, refine=None, **verdict):
    space = make_space(n_trials=n_trials, drafters=("good",), **verdict)
    return dataclasses.replace(
        space, budget=BudgetSpec(n_trials=n_trials, refine_trials=refine, stop_when_settled=False)
    )


def _counted(study):
    return [
        t
        for t in study.get_trials()
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and "duplicate_of" not in t.user_attrs
    ]


# -- the race (pure) ----------------------------------------------------------------------------------------


def _rounds(values: dict[int, list[float]]) -> list[Round]:
    n = max(len(v) for v in values.values())
    return [Round({True: 100.0}, {k: v[i] for k, v in values.items() if i < len(v)}) for i in range(n)]


def test_race_drops_a_clearly_slower_candidate_after_the_first_repeats_only():
    spec = VerdictSpec(repeats=4, race_confidence=0.8)
    fast = [200.0, 204.0, 198.0, 202.0]
    slow = [180.0, 183.0, 179.0, 182.0]
    assert race_survivors(_rounds({1: fast[:3], 2: slow[:3]}), [1, 2], spec) == [1, 2]  # < repeats
    assert race_survivors(_rounds({1: fast, 2: slow}), [1, 2], spec) == [1]


def test_race_keeps_near_ties_and_a_dropped_candidate_stays_dropped():
    spec = VerdictSpec(repeats=4, race_confidence=0.8)
    a = [200.0, 196.0, 204.0, 199.0, 201.0]
    b = [198.0, 203.0, 197.0, 202.0, 199.0]  # a tie: both race on
    assert race_survivors(_rounds({1: a, 2: b}), [1, 2], spec) == [1, 2]
    # candidate 3 was clearly slower after round 4; a lucky fifth start does not bring it back
    c = [150.0, 152.0, 149.0, 151.0, 260.0]
    assert race_survivors(_rounds({1: a, 2: b, 3: c}), [1, 2, 3], spec) == [1, 2]


def test_the_race_ends_when_no_candidate_racing_could_clear_the_bar():
    """Three near-ties around 1.0x (the field report's case) race on as ties, but no one of them is above the
    2% bar: which is fastest changes nothing, so the race is over at the first look; one above the bar keeps it
    going. Without the points (with load levels) the race goes on as before."""
    from autotune.study import race

    spec = VerdictSpec(repeats=3, min_gain=0.02, race_confidence=0.8)
    ties = {1: [100.5, 99.0, 101.0], 2: [99.5, 100.8, 99.2], 3: [100.2, 99.4, 100.9]}
    cands = [race.Candidate(k, {}, True) for k in ties]
    rounds = _rounds(ties)  # baseline 100 tok/s in every round
    assert race_survivors(rounds, [1, 2, 3], spec) == [1, 2, 3]  # a tie: nobody is clearly slower
    the_race = race.Race(cands, spec, True)
    assert the_race.below_bar(rounds, [1, 2, 3])
    assert the_race.still_racing(rounds, [1, 2, 3]) is None
    assert the_race.first_look(rounds, [1, 2, 3]) == 3
    # what follows is the pick's own extra rounds (here: whether its gain lies under the bar), not a race
    seen = the_race.look(rounds)
    assert the_race.next_round(rounds) in ([], [seen.decision.best])
    loaded = race.Race(cands, spec, True, [1, 8])
    assert not loaded.below_bar(rounds, [1, 2, 3]) and loaded.still_racing(rounds) == [1, 2, 3]
    # one of them 3% faster on the mean (above the bar, not proven, not clearly faster): the race goes on
    close = {**ties, 3: [108.0, 96.0, 105.0]}
    assert the_race.still_racing(_rounds(close), [1, 2, 3]) == [1, 2, 3]
    assert the_race.next_round(_rounds(close)) == [1, 2, 3]


def test_near_ties_under_the_bar_are_confirmed_in_the_first_rounds_only(every_candidate):
    """End to end: every config about as fast as the baseline, every candidate confirmed: the first look (3
    rounds) ends confirmation, where the race used to go on to ``max_rounds`` (8)."""
    space = _space(n_trials=10, repeats=3, confirm_top=3)
    runner = ScriptedRunner(speed={"good": lambda c: 1.0 + 0.002 * c.knob("num_steps")}, noise=0.01, seed=2)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=2)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(10)
    before = len(runner.launches)
    state = orch.confirm()
    assert len(state.keys) >= 3  # the 3 best by the surrogate, and the fastest single measurement
    assert len(state.rounds) == 3
    assert len(runner.launches) - before == 3 * (len(state.keys) + 1)  # each candidate and the baseline
    assert state.verdict.value in ("inconclusive", "no-worthwhile-gain", "baseline-wins")


# -- the search's last trials ---------------------------------------------------------------------------------


def test_after_the_defaults_and_the_design_the_surrogate_picks_the_last_half_and_lands_near_the_peak():
    space = _space(n_trials=16)
    runner = ScriptedRunner(speed={"good": peak}, noise=0.02, seed=1)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=1)
    Orchestrator(space, SGLangBackend(), runner, study).search(16)
    counted = _counted(study)
    assert len(counted) == 16
    seeded = [t.user_attrs.get("seeded") for t in counted]
    n_design = seeded.count("design")
    # baseline, the server default, then the design: enough for the surrogate (MIN_SURROGATE_POINTS + 3 knobs, at
    # most a quarter of the budget)
    assert n_design == 16 // 4 - 1
    picked = [t for t in counted if t.user_attrs.get("seeded") == "surrogate"]
    assert len(picked) == 8  # the last half of the budget (TPE between the design and it)
    assert all(t.number > u.number for t in picked for u in counted if u not in picked)
    keys = [t.user_attrs["config_key"] for t in counted]
    assert len(keys) == len(set(keys))  # never a config already measured
    # the surrogate's picks are where the landscape is high: better on average than the design's, and the best
    # of them within 5% of the peak (2.0)
    design = [t for t in counted if t.user_attrs.get("seeded") == "design"]
    mean = lambda ts: sum(peak(_cfg(t)) for t in ts) / len(ts)  # noqa: E731
    assert mean(picked) > mean(design)
    assert max(peak(_cfg(t)) for t in picked) > 1.9


def test_the_design_spreads_over_the_valid_region_and_is_drawn_once():
    from autotune.study.context import StudyContext
    from autotune.study.search import design_configs, seed_configs
    from autotune.surrogate import Encoding

    space = _space(n_trials=40)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    ctx = StudyContext(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study)
    design = design_configs(ctx, 8)
    grid = {c.key() for c in ctx.grid}
    assert len(design) == 8 and len({c.key() for c in design}) == 8
    assert all(c.key() in grid for c in design)  # valid configs only (N <= S * k + 1 and the rest)
    assert not {c.key() for c in design} & {c.key() for c in seed_configs(ctx)}
    enc = Encoding.from_configs(ctx.grid)
    coords = [enc.coords(c) for c in design]
    for i, knob in enumerate(enc.knobs):  # every numeric knob's range is covered, not one corner
        xs = [x[i] for x in coords]
        assert max(xs) - min(xs) >= 0.5 and len(set(xs)) >= 3, (knob, xs)
    assert [c.key() for c in design_configs(ctx, 8)] == [c.key() for c in design]  # the same study, the same design
    other = open_study(space, optuna.storages.InMemoryStorage(), "another", seed=1)  # --seed draws another design
    ctx2 = StudyContext(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), other)
    assert [c.key() for c in design_configs(ctx2, 8)] != [c.key() for c in design]
    # in a study, the design is queued once: a resumed search with a larger budget does not add another
    Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study).search(12)
    assert sum(t.user_attrs.get("seeded") == "design" for t in study.get_trials()) == 12 // 4 - 1
    Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study).search(16)
    assert sum(t.user_attrs.get("seeded") == "design" for t in study.get_trials()) == 12 // 4 - 1


@pytest.mark.parametrize("d", range(1, 13))
def test_the_designs_sobol_points_are_scipys_bit_for_bit(d):
    from scipy.stats import qmc

    from autotune.study.search import sobol_points

    for seed in range(31):
        for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            ours, scipys = sobol_points(d, n, seed), qmc.Sobol(d=d, scramble=True, seed=seed).random(n)
            assert ours.dtype == scipys.dtype and np.array_equal(ours, scipys), (d, seed, n)


def test_sobol_points_fall_back_to_scipys_sobol_in_another_scipy_layout(tmp_path, monkeypatch):
    """Where scipy keeps its direction numbers elsewhere, the design asks ``scipy.stats.qmc``: the same points."""
    import scipy
    from scipy.stats import qmc

    from autotune.study import search

    monkeypatch.setattr(scipy, "__file__", str(tmp_path / "scipy" / "__init__.py"))
    search._direction_numbers.cache_clear()
    try:
        assert search._direction_numbers() is None
        for d, n, seed in ((1, 8, 0), (3, 16, 5), (7, 32, 11)):
            assert np.array_equal(search.sobol_points(d, n, seed), qmc.Sobol(d=d, scramble=True, seed=seed).random(n))
    finally:
        search._direction_numbers.cache_clear()


def test_the_design_does_not_import_scipy_stats():
    """Importing ``scipy.stats`` costs about 0.6 CPU-s, a ninth of a 40-trial simulated study."""
    script = (
        "import sys, optuna\n"
        "from autotune.backends.sglang import SGLangBackend\n"
        "from autotune.study import open_study\n"
        "from autotune.study.context import StudyContext\n"
        "from autotune.study.search import design_configs\n"
        "from tests.study.conftest import ScriptedRunner, make_space\n"
        "space = make_space(n_trials=40, drafters=('good',))\n"
        "study = open_study(space, optuna.storages.InMemoryStorage(), 't', seed=0)\n"
        "ctx = StudyContext(space, SGLangBackend(), ScriptedRunner(speed={}), study)\n"
        "print(len(design_configs(ctx, 8)), 'scipy.stats' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["8", "False"], out.stderr


def _cfg(t):
    from autotune.config import TrialConfig

    return TrialConfig.from_dict(t.user_attrs["effective"])


def test_the_sampler_fills_in_until_the_surrogate_has_enough_measured_configs():
    from autotune.study import MIN_SURROGATE_POINTS

    space = _space(n_trials=12, refine=12)  # everything to the surrogate: it still needs data first
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study).search(12)
    counted = _counted(study)
    assert len(counted) == 12
    first = next(i for i, t in enumerate(counted) if t.user_attrs.get("seeded") == "surrogate")
    measured_before = {t.user_attrs["config_key"] for t in counted[:first] if t.user_attrs.get("role") == "speculative"}
    assert len(measured_before) == MIN_SURROGATE_POINTS
    assert all(t.user_attrs.get("seeded") == "surrogate" for t in counted[first:])


def test_refine_trials_zero_leaves_every_trial_to_the_sampler():
    space = _space(n_trials=12, refine=0)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    Orchestrator(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study).search(12)
    assert len(_counted(study)) == 12
    assert not [t for t in study.get_trials() if t.user_attrs.get("seeded") == "surrogate"]


def test_resumed_search_finishes_the_surrogates_share_without_repeating_it(tmp_path):
    space = _space(n_trials=14)
    url = f"sqlite:///{tmp_path}/s.db"
    runner = ScriptedRunner(speed={"good": peak}, seed=3)
    Orchestrator(space, SGLangBackend(), runner, open_study(space, url, "t", seed=3)).search(12)  # stopped early
    study = open_study(space, url, "t", seed=3)
    Orchestrator(space, SGLangBackend(), runner, study).search(14)
    counted = _counted(study)
    assert len(counted) == 14
    picked = [t for t in counted if t.user_attrs.get("seeded") == "surrogate"]
    # the design is drawn once (2 points: a quarter of 12, less the default); the first run (budget 12) left 6
    # to the surrogate, the resumed one (budget 14, share 7) adds the rest
    assert sum(t.user_attrs.get("seeded") == "design" for t in counted) == 2
    assert len(picked) >= 7
    assert len({t.user_attrs["config_key"] for t in counted}) == 14


# -- candidates and the race in a study ------------------------------------------------------------------------


def test_confirmation_races_close_candidates_and_recommends_a_survivor(every_candidate):
    space = _space(n_trials=16, confirm_top=3, repeats=3, max_repeats=6)
    runner = ScriptedRunner(speed={"good": peak}, noise=0.02, seed=5)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=5)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(16)
    launches_before_confirm = len(runner.launches)
    cands = orch.candidates()
    assert 3 <= len(cands) <= 4  # confirm_top by the surrogate, plus the fastest single start if it was left out
    state = orch.confirm()
    rounds = state.rounds
    assert 3 <= len(rounds) <= 6
    results = {r["trial"]: r for r in state["results"]}
    survivors = [n for n, r in results.items() if not r["dropped"]]
    assert state["best"] in survivors
    for r in state["results"]:
        assert r["speedup_ci"]["n"] == len(r["tok_per_s"]) >= 3
    keys = [t.number for t in cands]
    for i, rnd in enumerate(rounds):  # a round measures the candidates still racing after a fresh baseline
        assert set(rnd.candidates) == set(race_survivors(rounds[:i], keys, space.verdict))
        assert rnd.baseline
    if len(survivors) >= 2:  # still close: the race ran to max_repeats
        assert len(rounds) == 6
    elif len(rounds) > 3:  # it stopped at the round that left one survivor
        assert len(race_survivors(rounds[:-1], keys, space.verdict)) >= 2
    starts = len(runner.launches) - launches_before_confirm
    assert starts == sum(len(r.baseline) + len(r.candidates) for r in rounds)
    assert build_report(study).to_json()["recommended"]["trial"] == state["best"]


def test_without_the_race_every_candidate_gets_exactly_repeats_rounds():
    space = _space(n_trials=14, confirm_top=3, repeats=3, max_repeats=3)
    runner = ScriptedRunner(speed={"good": peak}, noise=0.02, seed=2)
    state = run(space, SGLangBackend(), runner, open_study(space, optuna.storages.InMemoryStorage(), "t", seed=2))
    assert len(state["rounds"]) == 3
    assert all(r["speedup_ci"]["n"] == 3 for r in state["results"])
    best = next(r for r in state["results"] if r["trial"] == state["best"])
    assert best["speedup_ci"]["point"] == max(r["speedup_ci"]["point"] for r in state["results"])


class _StopAfter(ScriptedRunner):
    """Raises KeyboardInterrupt at the n-th launch (Ctrl-C in the middle of confirmation)."""

    stop_at: int = 10**9

    def launch(self, config):
        if len(self.launches) == self.stop_at:
            raise KeyboardInterrupt
        return super().launch(config)


def test_interrupted_confirmation_resumes_from_its_recorded_rounds(tmp_path):
    space = _space(n_trials=14, confirm_top=2, repeats=3, max_repeats=5)
    url = f"sqlite:///{tmp_path}/s.db"
    runner = _StopAfter(speed={"good": peak}, noise=0.02, seed=4)
    study = open_study(space, url, "t", seed=4)
    orch = Orchestrator(space, SGLangBackend(), runner, study)
    orch.search(14)
    per_round = 1 + len(orch.candidates())  # a fresh baseline and each candidate (one CUDA-graph setting)
    runner.stop_at = len(runner.launches) + 2 * per_round + 1  # two full rounds, then one more start
    with pytest.raises(KeyboardInterrupt):
        orch.confirm()
    partial = study.user_attrs["confirmation"]
    assert len(partial["rounds"]) == 2 and not partial["done"]

    runner.stop_at = 10**9
    before = len(runner.launches)
    state = Orchestrator(space, SGLangBackend(), runner, open_study(space, url, "t", seed=4)).confirm()
    assert state["done"] and state["keys"] == partial["keys"]
    assert state["rounds"][:2] == partial["rounds"]  # the recorded rounds are kept, not measured again
    new_starts = len(runner.launches) - before
    assert new_starts == sum(len(r["baseline"]) + len(r["candidates"]) for r in state["rounds"][2:])


def test_reports_mark_candidates_that_left_the_race(tmp_path, every_candidate):
    import io
    from dataclasses import replace

    from autotune.html import write_html_report
    from autotune.render import render_report

    space = _space(n_trials=12, confirm_top=2, repeats=3)
    runner = ScriptedRunner(speed={"good": peak}, noise=0.02, seed=6)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=6)
    run(space, SGLangBackend(), runner, study)
    report = build_report(study)
    assert len(report.result.confirmed) >= 2
    for c in report.result.confirmed:
        assert c.speedup_ci is not None and len(c.tok_per_s) == c.speedup_ci.n
    # the second one left the race, as the race records it
    confirmed = tuple(replace(c, dropped=i == 1) for i, c in enumerate(report.result.confirmed))
    report = replace(report, result=replace(report.result, confirmed=confirmed))
    out = io.StringIO()
    render_report(report, out)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("confirmed trial")]
    assert "left the race" not in lines[0] and "left the race" in lines[1]
    write_html_report(study, report, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert html.count("(left the race)") == 1


def test_workers_writing_the_same_html_report_at_once_do_not_collide(tmp_path):
    """Workers sharing a study each write its report.html at the end (seen failing in CI with PostgreSQL)."""
    import threading

    from autotune.html import write_html_report

    space = _space(n_trials=8, confirm_top=1, repeats=2)
    study = open_study(space, optuna.storages.InMemoryStorage(), "t", seed=0)
    run(space, SGLangBackend(), ScriptedRunner(speed={"good": peak}), study)
    report = build_report(study)
    path = tmp_path / "report.html"
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(3):
                write_html_report(study, report, path)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert path.read_text().endswith("</body></html>")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temp file left behind

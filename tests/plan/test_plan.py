"""The plan before the bill (pure): starts per phase and the GPU time they cost."""

from __future__ import annotations

import pytest

from autotune import plan as planmod
from autotune.plan import Costs


def _plan(**kw):
    args = dict(
        n_trials=12,
        used=0,
        graph_settings=2,
        levels=(1,),
        confirm_top=3,
        repeats=4,
        max_repeats=8,
        confirm=True,
        n_prompts=5,
        warmup=1,
        gpus=8,
        costs=Costs(startup_s=600.0, request_s=10.0, source="test"),
    )
    args.update(kw)
    return planmod.plan(**args)


def test_the_quick_start_plan_counts_search_and_confirmation_starts():
    p = _plan()
    assert [(ph.name, ph.starts, ph.starts_max) for ph in p.phases] == [("search", 12, 12), ("confirmation", 24, 48)]
    assert p.starts == (36, 60)
    # one start: 600 s start-up + (1 warm-up + 5 prompts) x 10 s = 660 s, on 8 GPUs
    assert p.start_s == pytest.approx(660.0)
    assert p.server_s == pytest.approx((36 * 660.0, 60 * 660.0))
    text = planmod.render(p)
    assert "search 12 server starts" in text and "confirmation 24-48 server starts" in text
    assert "36-60 starts in all" in text and "660 s a start" in text
    assert "6.6 h (at most 11.0 h) of an 8-GPU server (52.8 h of GPU time)" in text


def test_a_resumed_study_plans_only_what_is_left_of_its_budget():
    p = _plan(used=9)
    assert p.phases[0].starts == 3 and "9 used" in p.phases[0].note


def test_without_confirmation_only_the_search_is_planned():
    for kw in ({"confirm": False}, {"confirm_top": 0}, {"repeats": 1}):
        assert [ph.name for ph in _plan(**kw).phases] == ["search"]


def test_one_cuda_graph_setting_takes_one_fresh_baseline_a_round():
    p = _plan(graph_settings=1, repeats=4, max_repeats=4)
    assert p.phases[1].starts == p.phases[1].starts_max == 4 * (1 + 4)


def test_load_levels_add_level_only_candidates_and_level_time():
    p = _plan(levels=(1, 8, 32), graph_settings=1, repeats=4, max_repeats=8)
    # two level-only candidates per level above 1, for two rounds
    assert p.phases[1].starts == 4 * 5 + 2 * 4 and p.phases[1].starts_max == 8 * 5 + 2 * 4
    # level 8: 16 requests at 8 streams = 2 rounds; level 32: 64 requests at 32 = 2 rounds
    assert p.start_s == pytest.approx(600.0 + 6 * 10.0 + 2 * 10.0 + 2 * 10.0)


def test_without_figures_the_plan_gives_counts_and_says_how_to_get_an_estimate():
    p = _plan(costs=None)
    assert p.server_s is None
    assert "unknown until the first start" in planmod.render(p)


def test_a_search_that_may_stop_settled_plans_its_fewest_starts_and_a_single_candidate():
    p = _plan(settle_after=8)
    assert [(ph.name, ph.starts, ph.starts_max) for ph in p.phases] == [("search", 8, 12), ("confirmation", 8, 48)]
    text = planmod.render(p)
    assert "search 8-12 server starts" in text and "not before 8" in text and "1 to 4 candidates" in text
    resumed = _plan(settle_after=8, used=10)  # past the first check: it may stop at once, or use what is left
    assert (resumed.phases[0].starts, resumed.phases[0].starts_max) == (0, 2)
    whole = _plan(settle_after=12)  # no trial to spare before the budget ends: the budget is the plan
    assert (whole.phases[0].starts, whole.phases[0].starts_max) == (12, 12) and "settled" not in whole.phases[0].note


def test_load_levels_plan_the_level_picks_and_the_ladder_after_the_search():
    # the H200 load study's plan said "search 8-10 server starts" and the study made 21: each level's surrogate
    # picks and the best config's draft-length ladder (autotune.study.ladder) come after the search's budget
    p = _plan(levels=(1, 4, 16), level_rounds=2, ladder_rungs=6)
    assert [(ph.name, ph.starts, ph.starts_max) for ph in p.phases][:2] == [("search", 12, 12), ("level picks", 0, 12)]
    text = planmod.render(p)
    assert "level picks 0-12 server starts (2 round(s) of a pick per level and up to 6 draft lengths" in text
    assert p.starts[1] == 12 + 12 + p.phases[2].starts_max
    resumed = _plan(levels=(1, 4, 16), level_rounds=0, ladder_rungs=6)  # the picks' rounds done, the ladder not
    assert resumed.phases[1].starts_max == 6 and "round" not in resumed.phases[1].note
    done = _plan(levels=(1, 4, 16), level_rounds=0, ladder_rungs=0)
    assert [ph.name for ph in done.phases] == ["search", "confirmation"]
    assert [ph.name for ph in _plan(levels=(1,), level_rounds=2, ladder_rungs=6).phases] == ["search", "confirmation"]


def test_warm_up_passes_are_priced_into_every_start():
    # one untimed pass of the 5 prompts: 600 + (1 + 2 x 5) x 10 = 710 s a start
    p = _plan(warmup_passes=1)
    assert p.start_s == pytest.approx(710.0) and p.server_s == pytest.approx((36 * 710.0, 60 * 710.0))
    assert "710 s a start" in planmod.render(p) and ", 1 untimed warm-up pass(es) of the prompts;" in planmod.render(p)
    p = _plan(warmup_passes=2)
    assert p.start_s == pytest.approx(760.0) and p.server_s == pytest.approx((36 * 760.0, 60 * 760.0))
    assert ", 2 untimed warm-up pass(es) of the prompts;" in planmod.render(p)
    assert "warm-up pass" not in planmod.render(_plan())


def test_a_method_space_plans_each_methods_best_among_the_candidates():
    """Confirmation adds each method's best not among the top ``confirm_top`` (``confirm._method_bests``): with 4
    methods, up to 3 + 4 = 7 candidates (the plan once said "1 to 4" and confirmation weighed 6 and 5)."""
    p = _plan(methods=4, graph_settings=1, repeats=3, max_repeats=8, settle_after=8)
    assert "1 to 7 candidates" in p.phases[1].note
    assert p.phases[1].starts_max == 8 * (1 + 7)
    assert "1 to 4 candidates" in _plan(methods=1, graph_settings=1, repeats=3, settle_after=8).phases[1].note


def test_a_request_logs_holdout_check_is_one_extra_baseline_pass_in_the_cost():
    without, p = _plan(), _plan(holdout=32)
    assert p.starts == without.starts  # on the first baseline's start: no start of its own
    assert [ph.name for ph in p.phases] == ["search", "holdout check", "confirmation"]
    # 32 more requests at 10 s each, once
    assert p.server_s == pytest.approx((without.server_s[0] + 320.0, without.server_s[1] + 320.0))
    assert "one extra baseline pass: 32 requests from the rest of the log" in planmod.render(p)


def test_sampling_prompts_plan_one_more_start_for_the_winners_lossless_check_at_temperature_0():
    p = _plan(greedy_check=True)
    assert [(ph.name, ph.starts, ph.starts_max) for ph in p.phases][-1] == ("winner check", 0, 1)
    assert p.starts == (_plan().starts[0], _plan().starts[1] + 1)
    said = "winner check 0-1 server starts (one more start of the winner, if one wins: its answers at temperature 0"
    assert said in planmod.render(p)
    assert [ph.name for ph in _plan(greedy_check=True, confirm=False).phases] == ["search"]  # no winner, no check


def test_the_holdouts_acceptance_shares_the_winners_start_and_a_greedy_log_plans_it_alone():
    both = _plan(greedy_check=True, holdout_acceptance=32)
    assert both.starts == _plan(greedy_check=True).starts  # one start serves both checks
    assert both.phases[-1].note.endswith(
        "its answers at temperature 0 (the prompts sample) and its acceptance on the 32 holdout requests against "
        "the subset's"
    )
    alone = _plan(holdout_acceptance=32)  # a greedy log: the start exists for this check only, and is counted
    assert [(ph.name, ph.starts, ph.starts_max) for ph in alone.phases][-1] == ("winner check", 0, 1)
    assert alone.starts == (_plan().starts[0], _plan().starts[1] + 1)

"""An inconclusive verdict gets more confirmation rounds (up to ``verdict.max_repeats``), with a look after each.

Looking again is a second chance to clear the bar by luck, so the extra looks use a stricter confidence
(``race.look_confidence``), shared with the candidates still racing. Each rule on small fixed rounds, through
confirmation's own pure race (``race.Race.next_round`` chooses what each round measures, ``race.Race.look`` gives
the verdict), and end to end on the orchestration with a scripted runner. What the rules give over many seeded
confirmations (false wins at the bar, marginal winners proven, the prior, the race's tie end) is measured by
scripts/bench_statistics.py (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.backends.sglang import SGLangBackend
from autotune.records import LevelVerdict, Round, RoundLevels
from autotune.space import VerdictSpec
from autotune.stats import Interval, speedup_interval, start_prior, two_sided_t
from autotune.study import Orchestrator, confirm, open_study, race

from ..study.conftest import ScriptedRunner, make_space

CANDS = [race.Candidate(7, {"num_steps": 3}, True)]
#: the shipped default: the first look after 3 rounds, at most 8
DEFAULT = VerdictSpec(repeats=3, max_repeats=8, confidence=0.95, min_gain=0.02)


def _rounds(ratio: float, deviations: tuple[float, ...]) -> list[Round]:
    """Rounds of candidate 7 at ``ratio`` x a 100 tok/s baseline, each start off by its deviation."""
    return [Round({True: 100.0}, {7: 100.0 * ratio * (1 + d)}) for d in deviations]


def _confirm(rounds: list[Round], spec: VerdictSpec) -> tuple[int, race.Look]:
    """Confirmation fed these rounds in order, as long as ``race.Race.next_round`` asks for the candidate: the
    rounds used and the verdict they give."""
    used: list[Round] = []
    the_race = race.Race(CANDS, spec, True)
    while the_race.next_round(used) == [7]:
        used.append(rounds[len(used)])
    assert the_race.next_round(used) == []
    return len(used), the_race.look(used)


def test_the_looks_after_the_first_and_the_candidates_still_racing_share_the_error():
    """Bonferroni over the extra looks allowed (``max_rounds`` - the first look's rounds) and over the candidates
    still racing: with a first look after 3 rounds of at most 8, each later look gets a fifth of the 5%."""
    assert race.look_confidence(DEFAULT, None, 2) == race.look_confidence(DEFAULT, 3, 3) == 0.95
    for n in (4, 5, 8):
        assert race.look_confidence(DEFAULT, 3, n) == pytest.approx(1 - 0.05 / 5)
    assert race.look_confidence(DEFAULT, 3, 3, candidates=3) == pytest.approx(1 - 0.05 / 3)
    assert race.look_confidence(DEFAULT, 3, 4, candidates=3) == pytest.approx(1 - 0.05 / 3 / 5)
    assert race.look_confidence(dataclasses.replace(DEFAULT, repeats=4), 4, 5) == pytest.approx(1 - 0.05 / 4)


def test_an_extra_look_is_stricter_than_the_first():
    """A 1.09x config after 5 rounds: at the space's own 95% its interval clears the 2% bar; at the extra look's
    99% it does not, and the verdict stays open."""
    rounds = _rounds(1.08, (0.06, -0.05, 0.04, -0.03, 0.02))
    seen = race.Race(CANDS, DEFAULT, True).look(rounds)
    ci = seen.results[0].deploy_speedup_ci
    assert ci is not None
    assert seen.confidence == pytest.approx(0.99) and ci.confidence == pytest.approx(0.99)
    assert seen.decision.verdict == "inconclusive" and ci.low < 1.02 < ci.point
    logs = [math.log(r.candidates[7] / r.baseline[True]) for r in rounds]
    at_95 = speedup_interval(logs, 0.95, race.measured_prior(rounds, race.DEFAULT_PRIOR))
    assert at_95.low > 1.02 and at_95.point == pytest.approx(ci.point)


def test_an_open_verdict_buys_rounds_of_the_pick_until_it_clears_the_bar():
    """A marginal winner (1.08x): open at the first look after 3 rounds; the extra rounds measure it until its
    interval at the stricter confidence clears the bar, here after 5."""
    n, seen = _confirm(_rounds(1.08, (0.05, -0.04, 0.03, -0.02, 0.01, 0.0, 0.02, -0.01)), DEFAULT)
    assert race.Race(CANDS, DEFAULT, True).look(_rounds(1.08, (0.05, -0.04, 0.03))).decision.verdict == "inconclusive"
    assert n == 5 and seen.decision.verdict == "speculation-wins" and seen.confidence == pytest.approx(0.99)
    # with no extra round allowed the same rounds end at the first look, open
    n, seen = _confirm(_rounds(1.08, (0.05, -0.04, 0.03)), dataclasses.replace(DEFAULT, max_repeats=3))
    assert n == 3 and seen.decision.verdict == "inconclusive"


def test_the_default_first_look_is_after_three_rounds_and_a_clear_winner_stops_there():
    spec = VerdictSpec(confidence=0.95, min_gain=0.02)
    assert (spec.repeats, spec.max_rounds) == (3, 8)
    # without max_repeats: twice the first look, at least 8; given, never below repeats
    assert [VerdictSpec(repeats=r).max_rounds for r in (2, 4, 5)] == [8, 8, 10]
    assert VerdictSpec(repeats=3, max_repeats=2).max_rounds == 3
    n, seen = _confirm(_rounds(1.31, (0.03, -0.02, 0.01, 0.0)), spec)
    assert n == 3 and seen.decision.verdict == "speculation-wins" and seen.confidence == 0.95


def test_the_verdict_rests_on_the_candidates_still_racing():
    """Three near-ties at the bar share the error three ways; one of them clearly slower (dropped by the race)
    leaves two to share it."""
    cands = [race.Candidate(k, {}, True) for k in (1, 2, 3)]
    devs = ((0.01, -0.02, 0.015), (-0.015, 0.01, 0.0), (0.02, 0.0, -0.01))
    ties = [
        Round({True: 100.0 * (1 + b)}, {k: 102.0 * (1 + d) for k, d in zip((1, 2, 3), ds, strict=True)})
        for ds, b in zip(devs, (0.0, 0.01, -0.01), strict=True)
    ]
    assert race.in_contention(ties, [1, 2, 3], DEFAULT) == 3
    assert race.Race(cands, DEFAULT, True).look(ties).confidence == pytest.approx(1 - 0.05 / 3)
    slow = [
        Round(r.baseline, {**r.candidates, 3: 80.0 * (1 + d)}) for r, d in zip(ties, (0.01, -0.01, 0.0), strict=True)
    ]
    assert race.in_contention(slow, [1, 2, 3], DEFAULT) == 2
    seen = race.Race(cands, DEFAULT, True).look(slow)
    assert seen.confidence == pytest.approx(1 - 0.05 / 2)
    assert [r.dropped for r in seen.results] == [False, False, True]


def test_a_tie_under_a_wide_bar_gets_the_rounds_that_settle_it_as_no_worthwhile_gain():
    """A 1.004x config under a 5% bar: open at the first look (its interval reaches over 1.05); the extra rounds
    bring the high end under the bar: no-worthwhile-gain (deploy the baseline) instead of inconclusive."""
    spec = dataclasses.replace(DEFAULT, min_gain=0.05)
    rounds = _rounds(1.004, (0.03, -0.02, 0.01, -0.01, 0.0, 0.01, -0.005, 0.0))
    first = race.Race(CANDS, spec, True).look(rounds[:3])
    assert first.decision.verdict == "inconclusive"
    n, seen = _confirm(rounds, spec)
    assert n == 5 and seen.decision.verdict == "no-worthwhile-gain"
    ci = seen.results[0].deploy_speedup_ci
    assert ci is not None and ci.low < 1.0 < ci.high < 1.05


def test_a_clear_verdict_takes_no_extra_round_and_the_extra_rounds_measure_only_the_pick():
    spec = VerdictSpec(repeats=4, max_repeats=8)
    clear = [
        Round.from_dict({"baseline": {"True": 100.0}, "candidates": {"7": 150.0 * (1 + 0.01 * i)}}) for i in range(4)
    ]
    assert race.Race(CANDS, spec, True).next_round(clear) == []
    # two candidates, the second clearly slower (dropped by the race), the first's verdict open
    two = [*CANDS, race.Candidate(9, {"num_steps": 5}, True)]
    open_ = [
        Round({True: 100.0}, {7: 100.0 * f, 9: 80.0 * (1 + 0.001 * i)}) for i, f in enumerate((1.10, 0.99, 1.12, 1.01))
    ]
    assert race.Race(two, spec, True).look(open_).decision.verdict == "inconclusive"
    assert race.Race(two, spec, True).next_round(open_) == [7]
    # the looks after the first are stricter; at max_repeats it stops, whatever the verdict
    assert race.Race(two, spec, True).look(open_ + open_[:1]).confidence == pytest.approx(1 - 0.05 / 4)
    assert race.Race(two, spec, True).next_round(open_ * 2) == []
    # max_repeats equal to repeats: no extra round
    assert race.Race(two, dataclasses.replace(spec, max_repeats=4), True).next_round(open_) == []


def test_the_orchestrated_confirmation_extends_an_open_verdict_and_records_its_confidence():
    """Every config 1.05x with 3% start-to-start noise: close to the 2% bar, so the first look is often open."""
    extended = 0
    for seed in range(4):
        space = make_space(n_trials=8, drafters=("good",), confirm_top=2, repeats=4, max_repeats=8)
        runner = ScriptedRunner(speed={"good": lambda c: 1.05}, noise=0.03, seed=seed)
        study = open_study(space, optuna.storages.InMemoryStorage(), f"seq-{seed}", seed=seed)
        orch = Orchestrator(space, SGLangBackend(), runner, study)
        orch.search(8)
        state = orch.confirm()
        rounds = state.rounds
        assert state.results is not None
        keys = [r.trial for r in state.results]
        cands = [race.Candidate(r.trial, r.config, True) for r in state.results]
        # the race confirmation ran: the space's start noise as the prior, the tie
        the_race = race.Race(
            cands, space.verdict, True, prior=start_prior(space.pruning.start_noise), tie=confirm.RACE_TIE
        )
        first = the_race.first_look(rounds, keys)
        assert first is not None and len(rounds) <= space.verdict.max_rounds
        # the candidates still racing after the first look's rounds share the error
        k = race.in_contention(rounds, keys, space.verdict)
        assert 1 <= k <= len(keys)
        if len(rounds) > first:
            extended += 1
            # the first look was open; each extra round measured only what next_round asked for
            assert the_race.look(rounds[:first]).decision.verdict == "inconclusive"
            for i in range(first, len(rounds)):
                asked = the_race.next_round(rounds[:i])
                assert sorted(rounds[i].candidates) == sorted(asked)
            assert state.confidence == pytest.approx(1 - 0.05 / k / (space.verdict.max_rounds - first))
        else:
            assert state.confidence == pytest.approx(1 - 0.05 / k)
    assert extended >= 1


def test_more_rounds_are_bought_to_settle_a_gain_under_the_bar_only_when_they_can():
    """The pick's point estimate under the bar, its interval's high end not yet: more rounds turn "inconclusive"
    into "no worthwhile gain", but only when the interval projected to ``max_repeats`` rounds fits under the bar."""
    spec = VerdictSpec(repeats=4, max_repeats=8, confidence=0.95, min_gain=0.05)
    tie = Interval(point=1.004, low=0.951, high=1.06, n=4, confidence=0.95)
    rounds = [Round({True: 100.0}, {7: 100.4}) for _ in range(4)]
    assert race._could_settle_below(tie, 1.05, 4, spec)  # a 5% bar: 8 rounds can settle it
    assert not race._could_settle_below(tie, 1.02, 4, spec)  # a 2% bar: they cannot (a start each, for nothing)
    assert not race._could_settle_below(dataclasses.replace(tie, high=1.04), 1.05, 4, spec)  # settled already
    assert not race._could_settle_below(tie, 1.05, 1, spec)
    assert race.Race(CANDS, spec, True).next_round(rounds) == []  # no spread measured: the interval is a point


RECORDED = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"


def test_the_h200_confirmations_clear_winners_would_have_been_proven_after_three_rounds():
    """Real hardware, recorded: every confirmation the H200 runs in docs/gpu-runs ended (4-6 rounds each, a fresh
    start of the pick and of the baseline per round). From each pick's recorded interval, the spread of its
    per-round log ratio (0.7-4.7% there; the Monte Carlo above assumes 4.9%), and the interval it would have had
    after 3 rounds with that spread at 95%: every pick at 1.3x or more clears its space's bar after 3 rounds, so the
    default's first look costs those studies a round less and changes none of their verdicts. (The two marginal
    winners there, 1.09x and 1.12x, would not clear at 3 rounds: they get the extra rounds, as they did.)"""
    clear = 0
    for path in sorted(RECORDED.glob("*/**/report.json")):
        report = json.loads(path.read_text())
        space = (
            yaml.safe_load((path.parent / "space.yaml").read_text()) if (path.parent / "space.yaml").exists() else {}
        )
        bar = 1 + float((space.get("verdict") or {}).get("min_gain", 0.02))
        for c in report.get("confirmed") or []:
            ci = c["deploy_speedup_ci"]
            if c.get("dropped") or ci["n"] < 3 or ci["point"] < 1.3:
                continue
            n = ci["n"]
            sd = math.log(ci["high"] / ci["point"]) * math.sqrt(n) / two_sided_t(ci["confidence"], n - 1)
            low3 = ci["point"] * math.exp(-two_sided_t(0.95, 2) * sd / math.sqrt(3))
            assert low3 > bar, (path, c["trial"], low3, bar)
            clear += 1
    assert clear >= 9, clear


#: kimi seed 8 of scripts/bench_search.py (the shipped defaults of 2026-12-03): three rounds of the fresh
#: graphs-on baseline and of the three candidates, a 1.004x config (trial 22, custom-10k chain of 2) among them;
#: its three starts ran 2.4-3.2% fast and the baseline's 1-2% slow, and their ratios agreed to 0.8%
KIMI_SEED8 = [
    Round({True: 139.26}, {2: 138.53, 22: 145.14, 27: 141.52}),
    Round({True: 138.38}, {2: 141.08, 22: 146.45, 27: 139.15}),
    Round({True: 137.59}, {2: 139.55, 22: 144.49, 27: 140.25}),
]


def test_three_rounds_that_agree_by_luck_do_not_make_a_tie_a_winner():
    """The false winner the simulated field-report study found (kimi seed 8): a 1.004x config measured 1.05x
    [1.03, 1.07] over three rounds, a 2-df t-interval trusting a spread a quarter of the start-to-start noise. With
    the space's ``pruning.start_noise`` as a prior worth three rounds (``stats.start_prior``) its interval reaches
    below the bar, and the verdict buys rounds instead of calling a winner."""
    spec = VerdictSpec(repeats=3, max_repeats=8, confidence=0.95, min_gain=0.02)
    cands = [race.Candidate(k, {}, True) for k in (2, 22, 27)]
    bare = race.Race(cands, spec, True, prior=None).look(KIMI_SEED8)
    assert bare.decision.verdict == "speculation-wins" and bare.decision.best == 22
    seen = race.Race(cands, spec, True).look(KIMI_SEED8)
    ci = next(r for r in seen.results if r.trial == 22).deploy_speedup_ci
    assert seen.decision.verdict == "inconclusive" and ci is not None and ci.low < 1.02 < ci.high
    assert ci.df == 5  # the prior's 3 and the rounds' 2
    assert race.Race(cands, spec, True).next_round(KIMI_SEED8) == [22]  # one more round of the pick


def test_a_server_noisier_than_the_prior_raises_it_and_quieter_rounds_keep_it():
    """The prior is only ever raised to what the rounds show (``race.measured_prior``): starts 5% apart raise it,
    starts that agree to 0.2% keep the prior (their luck is what the prior discounts)."""
    loud = [Round({True: 100.0 * (1 + d)}, {1: 104.0 * (1 - d)}) for d in (0.06, -0.05, 0.02)]
    raised = race.measured_prior(loud, race.DEFAULT_PRIOR)
    assert raised is not None and raised.sd > race.DEFAULT_PRIOR.sd and raised.df == race.DEFAULT_PRIOR.df
    calm = [Round({True: 100.0 * (1 + d)}, {1: 104.0 * (1 - d)}) for d in (0.002, -0.001, 0.0)]
    assert race.measured_prior(calm, race.DEFAULT_PRIOR) == race.DEFAULT_PRIOR
    assert race.measured_prior(loud, None) is None


def test_the_tie_rule_ends_a_race_only_for_a_proven_winner_beside_proven_near_ties():
    assert confirm.RACE_TIE == 0.01  # shipped: a race ends once the rest are proven at most 1% faster
    spec = DEFAULT
    cands = [race.Candidate(7, {}, True), race.Candidate(9, {}, True)]
    untied = race.Race(cands, spec, True)
    rule = race.Race(cands, spec, True, tie=confirm.RACE_TIE)
    # both ~1.22x over the baseline, within 0.4% of each other in every round
    jitter = (0.004, -0.003, 0.002, -0.004)
    close = [
        Round({True: 100.0 * (1 + d)}, {7: 122.0 * (1 + d), 9: 122.0 * (1 + d + j)})
        for d, j in zip((0.02, -0.03, 0.01, 0.0), jitter, strict=True)
    ]
    assert untied.still_racing(close) == [7, 9] and not untied.tied(close, [7, 9])
    assert rule.tied(close, [7, 9]) and rule.still_racing(close) is None
    # the same ratios, 5% apart from round to round: not proven within 1% of each other
    apart = [Round({True: 100.0}, {7: 122.0 * (1 + d), 9: 122.0 * (1 - d)}) for d in (0.05, -0.05, 0.04, -0.03)]
    assert not rule.tied(apart, [7, 9]) and rule.still_racing(apart) == [7, 9]
    # near-ties at the bar: the leader is not a proven winner, the race goes on
    at_bar = [
        Round({True: 100.0 * (1 + d)}, {7: 102.0 * (1 + d), 9: 102.0 * (1 + d + j)})
        for d, j in zip((0.02, -0.03, 0.01, 0.0), jitter, strict=True)
    ]
    assert not rule.tied(at_bar, [7, 9])


def _level_rounds(ratio: float, wobble: tuple[float, ...]) -> list[Round]:
    """Three rounds of one candidate 1.2x on the objective and 2x at one stream, ``ratio`` x the baseline at 128
    streams with these per-start deviations there."""
    out = []
    for d, w in zip((0.01, -0.02, 0.015), wobble, strict=False):
        b = 100 * (1 + d)
        levels = RoundLevels({True: {1: b, 128: b}}, {5: {1: 2 * b, 128: ratio * b * (1 + w)}})
        out.append(Round({True: b}, {5: 120 * (1 + d)}, levels))
    return out


def test_a_level_gets_more_rounds_only_while_they_can_lift_its_winner_over_the_bar():
    """With load levels a level's winner whose interval straddles the bar (point above it) got rounds up to
    ``max_repeats`` whether or not they could settle it (llama-load seed 11: 1.07x [1.01, 1.14] at 128 streams
    after 8 rounds, 8 of the study's 65 starts). Now only while the interval's half-width projected to
    ``max_repeats`` rounds fits between the bar and the point (``race._settles``), as below the bar."""
    spec = VerdictSpec(repeats=3, max_repeats=8, confidence=0.95, min_gain=0.02)
    cands = [race.Candidate(5, {}, True)]

    def at_128(rounds: list[Round]) -> LevelVerdict:
        seen = race.Race(cands, spec, True, [1, 128]).look(rounds)
        return next(v for v in seen.level_verdicts or [] if v.level == 128)

    # 1.06x with 4% between starts: no 8 rounds lift the low end over 1.02
    about_bar = _level_rounds(1.05, (0.04, -0.04, 0.03))
    lv = at_128(about_bar)
    assert lv.verdict == "inconclusive" and lv.speedup_ci is not None and lv.speedup_ci.low < 1.02 < lv.speedup_ci.point
    assert race.Race(cands, spec, True, [1, 128]).next_round(about_bar) == []
    # the same gain measured closely, or a larger one measured loosely: more rounds can settle it
    for ratio, wobble in ((1.05, (0.01, -0.01, 0.01)), (1.15, (0.08, -0.09, 0.07))):
        rounds = _level_rounds(ratio, wobble)
        assert at_128(rounds).verdict == "inconclusive"
        assert race.Race(cands, spec, True, [1, 128]).next_round(rounds) == [5]


def test_per_level_intervals_pool_their_spread_with_the_prior_and_each_level_is_raised_by_its_own_starts():
    """``levels.level_intervals`` with the start-noise prior: three rounds that agree closely at a level do not make
    its interval much narrower than the start-to-start noise allows (5 degrees of freedom, wider than the rounds'
    own); a level whose starts differ more than the prior raises it for that level only (``levels.level_prior``)."""
    from autotune.study.levels import level_intervals, level_prior

    calm = _level_rounds(1.10, (0.002, -0.002, 0.001))
    bare = level_intervals(5, True, calm, [128], confidence=0.95)[128]
    pooled = level_intervals(5, True, calm, [128], confidence=0.95, prior=race.DEFAULT_PRIOR)[128]
    assert bare is not None and pooled is not None and bare.df is None and pooled.df == 5
    assert pooled.high / pooled.low > bare.high / bare.low
    assert pooled.low < bare.low and pooled.point == pytest.approx(bare.point)
    loud = _level_rounds(1.10, (0.09, -0.08, 0.07))
    raised = level_prior(loud, 128, race.DEFAULT_PRIOR)
    assert raised is not None and raised.sd > race.DEFAULT_PRIOR.sd and raised.df == race.DEFAULT_PRIOR.df
    assert level_prior(loud, 1, race.DEFAULT_PRIOR) == race.DEFAULT_PRIOR  # one stream: the starts agree
    assert level_prior(loud, 128, None) is None

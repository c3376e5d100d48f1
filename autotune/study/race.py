"""The confirmation's math, pure over the recorded rounds: who is still racing, each candidate's intervals, the
pick and what the verdict rests on. A round is a ``records.Round`` (fresh baselines by CUDA-graph setting,
candidates by trial number); candidates are named by their trial numbers; a ``Race`` holds what every look at one
confirmation's rounds shares (its candidates, the space's rules, the deployable setting, the load levels, the prior
and the tie).

Its rules, each written once. Two drop a candidate: clearly slower than the leader (``race_survivors``), a
level-only one leading no level (``Race.level_only_out``). Four end the race: one candidate left, none above the bar
(``Race.below_bar``), near-ties of a proven winner (``Race.tied``; the same paired bound as the drop, ``_may_reach``),
``max_rounds`` (``Race.still_racing``, ``Race.first_look``). Three buy extra rounds after it (``Race.next_round``):
the pick's point above the bar and its low end not (``_could_win``), the pick's point under the bar and its high end
not while the rounds left can settle it (``_could_settle_below``), a level's winner above the bar while they can
lift it (``_could_win`` and ``_settles``, the projection both share)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.config import Config
from autotune.records import CandidateResult, Exclusion, LevelIntervals, LevelVerdict, Round
from autotune.space import VerdictSpec
from autotune.stats import Interval, Spread, speedup_interval, start_prior, two_sided_t, upper_bound
from autotune.study.levels import level_intervals, level_verdicts, raised, summary_text
from autotune.verdict import Verdict, verdict

#: the prior on the spread of a round's paired log ratio when the caller names none: the default start-to-start
#: noise (a study passes its own ``pruning.start_noise``: ``stats.start_prior``)
DEFAULT_PRIOR = start_prior()

#: rounds a level-only candidate (confirmed for one level's sake, ``confirm._level_winners``) gets before it must
#: have the best point estimate at some level to stay
LEVEL_ONLY_ROUNDS = 2


def measured_prior(rounds: list[Round], prior: Spread | None) -> Spread | None:
    """``prior`` (the space's start-to-start noise) raised to what the recorded rounds show, when they show more:
    the pooled sd of each config's log tok/s around its own mean over the rounds (each start is independent),
    times sqrt 2 for a pair of starts. Only ever raised: a server noisier than ``pruning.start_noise`` must not make
    a tie look precise, while rounds that happen to agree closely are the luck the prior is there to discount."""
    if prior is None:
        return None
    groups: list[list[float]] = []
    for cg in {k for r in rounds for k in r.baseline}:
        groups.append([math.log(r.baseline[cg]) for r in rounds if r.baseline.get(cg)])
    for k in {k for r in rounds for k in r.candidates}:
        groups.append([math.log(r.candidates[k]) for r in rounds if r.candidates.get(k)])
    return raised(prior, groups)


def _mean_log(rounds: list[Round], key: int) -> float:
    xs = [math.log(r.candidates[key]) for r in rounds if r.candidates.get(key)]
    return sum(xs) / len(xs) if xs else -math.inf


def _leader(rounds: list[Round], active: list[int]) -> int:
    """The candidate with the best mean log tok/s over the rounds."""
    return max(active, key=lambda k: _mean_log(rounds, k))


def paired_logs(rounds: Sequence[Round], a: int, b: int, level: int | None = None) -> list[float]:
    """The log ratios of candidate ``a``'s tok/s to ``b``'s within each round both were measured in (so drift
    cancels); with ``level``, at that load level of the rounds that measured levels."""
    out = []
    for r in rounds:
        if level is None:
            x, y = r.candidates.get(a), r.candidates.get(b)
        elif r.levels is not None:
            x, y = r.levels.candidates.get(a, {}).get(level), r.levels.candidates.get(b, {}).get(level)
        else:
            continue
        if x and y:
            out.append(math.log(x / y))
    return out


def _may_reach(rounds: list[Round], k: int, leader: int, spec: VerdictSpec, ratio: float) -> bool:
    """Whether candidate ``k`` may still be ``ratio`` times as fast as ``leader`` or more: the one-sided
    ``spec.race_confidence`` upper bound of its mean paired log ratio to the leader (``paired_logs``) is not below
    ``ratio`` (1: not clearly slower; ``1 + tie``: not proven a near-tie), or fewer than two rounds paired them."""
    diffs = paired_logs(rounds, k, leader)
    return len(diffs) < 2 or upper_bound(diffs, spec.race_confidence, 0.0) >= ratio


def race_survivors(rounds: list[Round], keys: list[int], spec: VerdictSpec) -> list[int]:
    """The candidates (trial numbers) still racing after ``rounds`` of confirmation.

    A candidate leaves the race once the one-sided ``spec.race_confidence`` upper bound of its mean log
    tok/s ratio to the current leader, over the rounds both were measured in, is below 0: it is clearly
    slower (``_may_reach`` 1 no longer). Dropped candidates stay dropped; nobody is dropped before ``spec.repeats``
    rounds."""
    active = list(keys)
    for i in range(spec.repeats, len(rounds) + 1):
        done = rounds[:i]
        if len(active) <= 1:
            break
        leader = _leader(done, active)
        active = [k for k in active if k == leader or _may_reach(done, k, leader, spec, 1.0)]
    return active


def in_contention(rounds: list[Round], keys: list[int], spec: VerdictSpec) -> int:
    """How many candidates the pick is chosen among: those still racing after the first ``spec.repeats`` rounds
    (before them, every one). Counted there and not later: a tie dropped by chance in an extra round of the race
    was still a chance the pick had to be lucky."""
    return len(race_survivors(rounds[: spec.repeats], keys, spec)) if len(rounds) >= spec.repeats else len(keys)


def look_confidence(spec: VerdictSpec, first: int | None, n: int, candidates: int = 1) -> float:
    """The confidence of the verdict's interval after ``n`` rounds of ``candidates`` confirmed candidates. At the
    first look, the space's own. An inconclusive verdict gets more rounds, up to ``spec.max_rounds``, and a look
    after each; each of those looks spends an equal share of the space's error (Bonferroni over the extra looks
    allowed), so that looking again cannot turn a config that is not ``min_gain`` faster into a winner much more
    often than one look would. And the verdict rests on the pick, the best of the ``candidates`` still racing
    (those not dropped as clearly slower than the leader: they cannot be the pick): each spends an equal share of
    the error (Bonferroni over them)."""
    error = (1.0 - spec.confidence) / max(1, candidates)
    if first is None or n <= first:
        return 1.0 - error
    extra = max(1, spec.max_rounds - first)
    return 1.0 - error / extra


def _interval(pairs: list[tuple[float, float | None]], confidence: float, prior: Spread | None) -> Interval | None:
    logs = [math.log(c / b) for c, b in pairs if c and b]
    return speedup_interval(logs, confidence, prior) if len(logs) >= 2 else None


def candidate_result(
    c: Candidate,
    rounds: list[Round],
    deploy_cuda_graph: bool | None,
    *,
    confidence: float,
    dropped: bool,
    prior: Spread | None = DEFAULT_PRIOR,
) -> CandidateResult:
    """One candidate's figures over the rounds it was measured in: against the fresh baseline of its own
    CUDA-graph setting (``speedup_ci``) and against the deployable one (``deploy_speedup_ci``). The intervals'
    spread is pooled with ``prior`` (the start-to-start noise, ``stats.speedup_interval``)."""
    mine = [r for r in rounds if r.candidates.get(c.number)]

    def against(graph: bool | None) -> list[tuple[float, float | None]]:
        return [(r.candidates[c.number], r.baseline.get(graph) if graph is not None else None) for r in mine]

    pairs, dep = against(c.cuda_graph), against(deploy_cuda_graph)
    return CandidateResult(
        trial=c.number,
        config=c.config,
        tok_per_s=tuple(x for x, _ in pairs),
        baseline_tok_per_s=tuple(b for _, b in pairs),
        speedup_ci=_interval(pairs, confidence, prior),
        deploy_baseline_tok_per_s=tuple(b for _, b in dep),
        deploy_speedup_ci=_interval(dep, confidence, prior),
        dropped=dropped,
    )


def pick(results: list[CandidateResult]) -> CandidateResult | None:
    """The best point estimate against the fastest baseline among the candidates still racing (the others were
    clearly slower than the leader of their rounds)."""
    racing = [(h, r) for r in results if (h := r.headline) and not r.dropped]
    best = max(racing, key=lambda hr: hr[0].point, default=None)
    return best[1] if best is not None else None


@dataclass(frozen=True)
class Decision:
    """A verdict of confirmed results (``decide``): the verdict, the pick, ``basis`` (confirmed | not-confirmed |
    search) and what it rests on, in words."""

    verdict: Verdict
    best: int | None
    basis: str
    rests_on: str


def decide(
    results: list[CandidateResult], excluded: list[Exclusion], deploy_cuda_graph: bool | None, min_gain: float
) -> Decision:
    """The verdict of confirmed ``results``: never "the baseline wins" while a config could not be weighed
    (``excluded``)."""
    best = pick(results)
    return Decision(
        verdict(best.headline if best is not None else None, min_gain, unweighed=bool(excluded)),
        None if best is None else best.trial,
        "confirmed" if any(r.headline for r in results) else ("not-confirmed" if results else "search"),
        basis(results, excluded, deploy_cuda_graph),
    )


def basis(results: list[CandidateResult], excluded: list[Exclusion], deploy_cg: bool | None) -> str:
    """What a verdict rests on, in words."""
    graphs = {True: "graphs on", False: "graphs off"}.get(deploy_cg, "") if deploy_cg is not None else ""
    confirmed = [h for r in results if (h := r.headline)]
    if confirmed:
        rounds = sorted({h.n for h in confirmed})
        n = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
        text = f"confirmed: {len(confirmed)} candidate(s), {n} rounds each against fresh baselines" + (
            f"; speedups against the fastest baseline ({graphs})" if graphs else ""
        )
    elif results:
        text = "not confirmed: no candidate got two complete rounds"
    elif excluded:
        text = (
            "search only: no speculative config left to confirm (each was excluded or clearly slower than its baseline)"
        )
    else:
        text = "search only: no speculative config was worth confirming (each clearly slower than its baseline)"
    if excluded:
        kinds = Counter(e.kind for e in excluded)
        text += "; excluded: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return text


# ------------------------------------------------------------------------------------------ looks and rounds


@dataclass(frozen=True)
class Candidate:
    """A candidate as the confirmation's math needs it: its trial number, effective config and CUDA-graph
    setting."""

    number: int
    config: Config
    cuda_graph: bool | None


@dataclass(frozen=True)
class Look:
    """What the recorded rounds give at one look (``Race.look``): each candidate's result at the look's
    confidence, the decision and, with load levels, each candidate's interval per level, each level's verdict and
    the summary of those."""

    results: list[CandidateResult]
    confidence: float
    decision: Decision
    level_results: dict[int, LevelIntervals] | None = None
    level_verdicts: list[LevelVerdict] | None = None
    level_text: str | None = None


@dataclass(frozen=True)
class Race:
    """One confirmation's race: its candidates and what every look at its rounds shares: the space's rules
    (``spec``), the deployable baseline's CUDA-graph setting, the load levels (None without), the candidates
    confirmed for a level's sake (``level_only``), the prior on a round's spread and the tie (``tied``; None: no
    such end)."""

    cands: list[Candidate]
    spec: VerdictSpec
    deploy_cuda_graph: bool | None
    levels: list[int] | None = None
    level_only: frozenset[int] = frozenset()
    prior: Spread | None = DEFAULT_PRIOR
    tie: float | None = None

    def level_only_out(self, rounds: list[Round]) -> set[int]:
        """The level-only candidates that, after ``LEVEL_ONLY_ROUNDS`` rounds, have the best point estimate at no
        level (against every candidate, over those rounds): they are measured no more and weigh in no verdict."""
        if not self.levels or not self.level_only or len(rounds) < LEVEL_ONLY_ROUNDS:
            return set()
        done = rounds[:LEVEL_ONLY_ROUNDS]
        per = {
            c.number: level_intervals(c.number, c.cuda_graph, done, self.levels, confidence=0.95) for c in self.cands
        }
        leaders = {v.trial for v in level_verdicts(per, self.levels, 0.0) if v.trial is not None}
        return {k for k in self.level_only if k not in leaders}

    def keys(self, rounds: list[Round]) -> list[int]:
        """The candidates that weigh in: all but the level-only ones out (``level_only_out``)."""
        gone = self.level_only_out(rounds)
        return [c.number for c in self.cands if c.number not in gone]

    def _headline(self, rounds: list[Round], number: int, confidence: float) -> Interval | None:
        """``number``'s headline interval over ``rounds`` at ``confidence``, the prior raised to what they show."""
        graph = next((c.cuda_graph for c in self.cands if c.number == number), None)
        c = Candidate(number, {}, graph)
        prior = measured_prior(rounds, self.prior)
        return candidate_result(
            c, rounds, self.deploy_cuda_graph, confidence=confidence, dropped=False, prior=prior
        ).headline

    def below_bar(self, rounds: list[Round], active: list[int]) -> bool:
        """Whether no candidate in ``active`` has its point estimate (its headline's, at 95%) above ``1 +
        min_gain``: which of several configs under the bar is fastest changes nothing (the baseline is what to
        deploy), and more rounds shrink an interval around its point, so they would not lift one over the bar
        (``_could_win``). Never with load levels: a level's winner is a question of its own."""
        if self.levels:
            return False
        bar = 1.0 + self.spec.min_gain
        return all((h.point if (h := self._headline(rounds, k, 0.95)) else 0.0) <= bar for k in active)

    def tied(self, rounds: list[Round], active: list[int]) -> bool:
        """The race's end among near-ties (``confirm.RACE_TIE`` in a study): the leader (the best mean log tok/s
        over the rounds) is a proven winner, its interval against the fastest baseline above ``1 + min_gain`` at a
        confidence that shares the space's error among the candidates in contention and every round the race could
        end at (ending a race is a look), and every other candidate racing is proven at most ``tie`` faster than
        it (``_may_reach``). Not at the space's confidence alone: the rule ends the race just when the leader
        looks good."""
        if self.tie is None:
            return False
        spec = self.spec
        leader = _leader(rounds, active)
        looks = spec.max_rounds - spec.repeats + 1
        contending = max(1, in_contention(rounds, [c.number for c in self.cands], spec))
        h = self._headline(rounds, leader, 1.0 - (1.0 - spec.confidence) / (contending * looks))
        if h is None or not h.low > 1.0 + spec.min_gain:
            return False
        return all(k == leader or not _may_reach(rounds, k, leader, spec, 1.0 + self.tie) for k in active)

    def still_racing(self, rounds: list[Round], keys: list[int] | None = None) -> list[int] | None:
        """The candidates the race still measures after ``rounds`` (of ``keys``, by default those weighing in:
        ``Race.keys``): every one for ``spec.repeats`` rounds, then those not clearly slower while two or more are;
        None once the race is over (what follows is extra rounds): one left, none above the bar (``below_bar``), or
        the rest tied with a proven leader (``tied``)."""
        active = race_survivors(rounds, self.keys(rounds) if keys is None else keys, self.spec)
        if len(rounds) < self.spec.repeats:
            return active
        if len(active) <= 1 or self.below_bar(rounds, active) or self.tied(rounds, active):
            return None
        return active

    def first_look(self, rounds: list[Round], keys: list[int] | None = None) -> int | None:
        """The number of rounds at which the race alone ends (``still_racing``, or ``spec.max_rounds``): the
        verdict's first look. None while fewer rounds are recorded."""
        keys = self.keys(rounds) if keys is None else keys
        for n in range(self.spec.repeats, self.spec.max_rounds + 1):
            if n > len(rounds):
                return None
            if n >= self.spec.max_rounds or self.still_racing(rounds[:n], keys) is None:
                return n
        return None

    def look(self, rounds: list[Round]) -> Look:
        """The verdict the recorded rounds give at this look's confidence (``look_confidence``): each candidate's
        result, the pick and, with load levels, each level's interval and verdict. Exclusions are left out here
        (see ``decide``): more rounds cannot weigh a config that could not be measured."""
        spec, keys = self.spec, self.keys(rounds)
        active = race_survivors(rounds, keys, spec)
        conf = look_confidence(spec, self.first_look(rounds, keys), len(rounds), in_contention(rounds, keys, spec))
        prior = measured_prior(rounds, self.prior)
        deploy = self.deploy_cuda_graph
        results = [
            candidate_result(c, rounds, deploy, confidence=conf, dropped=c.number not in active, prior=prior)
            for c in self.cands
        ]
        decision = decide(results, [], deploy, spec.min_gain)
        if not self.levels:
            return Look(results, conf, decision)
        per = {
            c.number: level_intervals(c.number, c.cuda_graph, rounds, self.levels, confidence=conf, prior=self.prior)
            for c in self.cands
            if c.number in keys
        }
        verdicts = level_verdicts(per, self.levels, spec.min_gain)
        return Look(results, conf, decision, per, verdicts, summary_text(verdicts))

    def next_round(self, rounds: list[Round]) -> list[int]:
        """Which candidates the next round measures (none: confirmation is over). Every candidate for
        ``spec.repeats`` rounds (a level-only one: ``LEVEL_ONLY_ROUNDS``, then only while it leads a level), then
        those still racing while two or more are; then, while it is open whether the pick clears ``1 + min_gain``
        (its point estimate above it, its interval's low end not) or more rounds can settle it under the bar, the
        pick, and with load levels the best of each level where that is open and more rounds can settle it, up to
        ``spec.max_rounds`` rounds in all."""
        spec = self.spec
        if not self.cands or len(rounds) >= spec.max_rounds:
            return []
        racing = self.still_racing(rounds)
        if racing is not None:
            return racing
        seen = self.look(rounds)
        bar, n = 1.0 + spec.min_gain, len(rounds)
        contending = in_contention(rounds, self.keys(rounds), spec)
        out: list[int] = []
        best = next((r for r in seen.results if r.trial == seen.decision.best), None)
        h = best.headline if best is not None else None
        if best is not None and (_could_win(h, bar) or _could_settle_below(h, bar, n, spec, contending)):
            out.append(best.trial)
        for lv in seen.level_verdicts or []:
            iv = lv.speedup_ci
            if (
                lv.trial is not None
                and _could_win(iv, bar)
                and (iv is None or n < 2 or _settles(iv, bar, n, spec, contending))
                and lv.trial not in out
            ):
                out.append(lv.trial)
        return out


def _settles(interval: Interval, bar: float, n: int, spec: VerdictSpec, candidates: int) -> bool:
    """Whether the rounds left can settle which side of the bar ``interval`` (measured over ``n`` rounds) lies
    on: its half-width projected to ``spec.max_rounds`` rounds (the spread measured so far, at the last look's
    confidence) must fit between the bar and the point estimate. Asked of a pick above the bar whose low end is
    not (lifting a level's winner over it) and of one under it whose high end is not ("no worthwhile gain" instead
    of "inconclusive"): otherwise those rounds cost a start each, for nothing."""
    rounds = spec.max_rounds
    last = look_confidence(spec, spec.repeats, rounds, candidates)
    df = rounds - 1 + (interval.df - (n - 1) if interval.df is not None else 0.0)
    projected = two_sided_t(last, df) * interval.sd / math.sqrt(rounds)
    return abs(math.log(interval.point) - math.log(bar)) > projected


def _could_settle_below(interval: Interval | None, bar: float, n: int, spec: VerdictSpec, candidates: int = 1) -> bool:
    """Open on the other question more rounds can answer: whether the pick's gain lies under the bar (its point
    estimate below ``1 + min_gain``, its interval's high end not yet): "no worthwhile gain" instead of
    "inconclusive"; bought only when the rounds left can settle it (``_settles``)."""
    return (
        interval is not None
        and interval.point < bar <= interval.high
        and n >= 2
        and _settles(interval, bar, n, spec, candidates)
    )


def _could_win(interval: Interval | None, bar: float) -> bool:
    """Open on the one question more rounds can answer: whether it clears the bar. The point estimate must be
    above it: more rounds shrink the interval around the point, so one below the bar will not clear it (a tie with
    the baseline would only buy rounds towards "inconclusive"), and an interval below the bar is no winner,
    whether or not it also proves a loss (for a schedule both mean off)."""
    return interval is not None and interval.low <= bar < interval.point

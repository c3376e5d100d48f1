"""How a study chooses confirmation candidates, refines its search and stops: objects the ``Orchestrator`` takes
(``policies=``) and the jobs read from ``StudyContext.policies``. The defaults are the shipped behaviour; the
benchmarks (``scripts/bench_search.py``) pass variants."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CandidatePolicy:
    """Confirmation candidates (``confirm.candidates``): ranked by posterior mean + ``kappa`` sd of the
    surrogate; with load levels, the ``per_level`` fastest at each level join them."""

    kappa: float = 2.0
    per_level: int = 2
    #: a candidate after the first joins only while the surrogate gives it at least this probability of beating the
    #: best-ranked one (by posterior mean) by more than ``StopPolicy.resolution`` (``confirm.thin``); 0: every one
    #: joins (each costs a server start per round)
    join_probability: float = 0.05
    #: the race among confirmed candidates ends once every one still racing beside the leader is, at the race's
    #: confidence, at most this much faster than the leader (``race.still_racing``): which of near-ties to deploy
    #: changes tok/s by less than this, and racing them costs a start of each per round up to ``max_rounds``
    #: (None: they race on to ``max_rounds``)
    race_tie: float | None = 0.01
    #: a candidate joins when it could change the answer: beat the best-ranked one by the resolution or clear the
    #: ``min_gain`` bar over the fastest baseline, whichever is higher (as ``StopPolicy.over_bar`` asks of the
    #: search: under the bar a config 1% faster than a tie changes nothing); False: only beat the best-ranked one
    #: by the resolution, under the bar too (scripts/bench_search.py ``tuner_join_under``: kimi 5.73 h, 4.71 h with)
    join_over_bar: bool = True

    def __post_init__(self) -> None:
        if self.race_tie is not None and not 0 < self.race_tie < 0.5:
            raise ValueError(f"race_tie must be in (0, 0.5) or None but got {self.race_tie}")
        if self.per_level < 0:
            raise ValueError(f"per_level must be at least 0 but got {self.per_level}")
        if not 0 <= self.join_probability < 1:
            raise ValueError(f"join_probability must be in [0, 1) but got {self.join_probability}")


@dataclass(frozen=True)
class RefinePolicy:
    """The surrogate's part of the search (``search.refine_next``, the ladder): it takes over once ``min_points``
    configs were measured, and proposes the highest posterior mean + ``kappa`` sd."""

    kappa: float = 2.0
    min_points: int = 6
    #: a proposal of the sampler or of the design is not launched when the surrogate predicts it at least
    #: ``skip_margin`` slower than the best measured config and gives it less than ``skip_below`` probability of
    #: reaching it (``search.not_worth_a_start``; None: every proposal is launched). It still uses its place in
    #: the budget, as a config refused for predicted out-of-memory does.
    skip_below: float | None = 0.01
    skip_margin: float = 0.10
    #: model log tok/s as log acceptance length minus log seconds per round, one GP each, where every measured
    #: start reports its acceptance length (``autotune.surrogate.FactoredSurrogate``); False: one GP of log tok/s
    factored: bool = True

    def __post_init__(self) -> None:
        if self.min_points < 1:
            raise ValueError(f"min_points must be at least 1 but got {self.min_points}")
        if self.skip_below is not None and not 0 < self.skip_below < 0.5:
            raise ValueError(f"skip_below must be in (0, 0.5) or None but got {self.skip_below}")
        if not 0 <= self.skip_margin < 1:
            raise ValueError(f"skip_margin must be in [0, 1) but got {self.skip_margin}")


@dataclass(frozen=True)
class StopPolicy:
    """When the study stops early: ``max_launch_failures`` servers in a row that did not start (before any
    speculative config ran) stop it with a ``UserError``; and the search stops before its budget once its answer
    is settled (``autotune.study.settle``: ``settle``; a probability under ``settle_probability``, with differences
    below ``resolution`` counted as ties; ``settle_samples`` joint posterior draws). "The best is found" settles it
    only after ``improve_after_picks`` of the surrogate's own picks were measured: a model fitted to the design
    alone is confident where it has not looked (scripts/bench_search.py: an optimum on the space's edge was missed
    in 3 of 20 seeds that stopped right after the design). The resolution is 1%, half the 2% a recommendation is
    judged by: at 2% the stop and the thinning together missed the 2% target in 3-4 of 20 seeds on two
    scenarios (docs/benchmarks.md, "The study's bill"). ``expected_gain`` (None: off, the shipped default): also stop
    once the next trial's expected gain (``Settled.expected_gain_bar``, relative tok/s) is under it; measured at
    0.1-0.3% and not shipped (fewer hits on the generated landscapes for 4% of the GPU time; same section)."""

    max_launch_failures: int = 3
    settle: bool = True
    settle_probability: float = 0.05
    resolution: float = 0.01
    settle_samples: int = 512
    improve_after_picks: int = 3
    expected_gain: float | None = None
    #: "the best is found" also when no unmeasured config is likely to change the answer (``Settled.p_change``:
    #: beat the best measured by the resolution or clear the ``min_gain`` bar, whichever is higher); False: only
    #: when none is likely to beat the best measured (``p_improve``), under the bar too
    over_bar: bool = True
    #: ``expected_gain`` per minute of the measured median server start (None: off, the shipped default): the bar
    #: scales with what the next trial costs (a 10-minute start must promise 10x a 1-minute one's gain); at 0.03%
    #: it took kimi from 6.46 to 5.21 h and lost 4 of 150 hits on the generated landscapes: not shipped
    #: (docs/benchmarks.md, "The study's bill")
    expected_gain_per_start_min: float | None = None

    def __post_init__(self) -> None:
        if self.max_launch_failures < 1:
            raise ValueError(f"max_launch_failures must be at least 1 but got {self.max_launch_failures}")
        if not 0 < self.settle_probability < 1:
            raise ValueError(f"settle_probability must be in (0, 1) but got {self.settle_probability}")
        if not self.resolution > 0:
            raise ValueError(f"resolution must be > 0 but got {self.resolution}")
        if self.improve_after_picks < 0:
            raise ValueError(f"improve_after_picks must be at least 0 but got {self.improve_after_picks}")
        if self.expected_gain is not None and not self.expected_gain > 0:
            raise ValueError(f"expected_gain must be > 0 or None but got {self.expected_gain}")
        if self.expected_gain_per_start_min is not None and not self.expected_gain_per_start_min > 0:
            raise ValueError(
                f"expected_gain_per_start_min must be > 0 or None but got {self.expected_gain_per_start_min}"
            )
        if self.settle_samples < 16:
            raise ValueError(f"settle_samples must be at least 16 but got {self.settle_samples}")


@dataclass(frozen=True)
class Policies:
    candidates: CandidatePolicy = field(default_factory=CandidatePolicy)
    refine: RefinePolicy = field(default_factory=RefinePolicy)
    stop: StopPolicy = field(default_factory=StopPolicy)


#: the shipped behaviour
DEFAULT_POLICIES = Policies()

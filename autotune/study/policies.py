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

    def __post_init__(self) -> None:
        if self.per_level < 0:
            raise ValueError(f"per_level must be at least 0 but got {self.per_level}")


@dataclass(frozen=True)
class RefinePolicy:
    """The surrogate's part of the search (``search.refine_next``, the ladder): it takes over once ``min_points``
    configs were measured, and proposes the highest posterior mean + ``kappa`` sd."""

    kappa: float = 2.0
    min_points: int = 6

    def __post_init__(self) -> None:
        if self.min_points < 1:
            raise ValueError(f"min_points must be at least 1 but got {self.min_points}")


@dataclass(frozen=True)
class StopPolicy:
    """When the study stops early: ``max_launch_failures`` servers in a row that did not start (before any
    speculative config ran) stop it with a ``UserError``."""

    max_launch_failures: int = 3

    def __post_init__(self) -> None:
        if self.max_launch_failures < 1:
            raise ValueError(f"max_launch_failures must be at least 1 but got {self.max_launch_failures}")


@dataclass(frozen=True)
class Policies:
    candidates: CandidatePolicy = field(default_factory=CandidatePolicy)
    refine: RefinePolicy = field(default_factory=RefinePolicy)
    stop: StopPolicy = field(default_factory=StopPolicy)


#: the shipped behaviour
DEFAULT_POLICIES = Policies()

"""The trial record: what a study stores about each trial (Optuna user attrs) and about itself (study attrs), and
the queries over trials.

Every user-attr key autotune writes or reads is named here, and nowhere else: the study writes a running trial
through ``TrialWriter`` (Optuna refuses writes once a trial has finished), everyone reads through ``TrialRecord``
or the queries below (the pruner, the search, confirmation, the report). The study's own attrs are read and written
by the functions at the end; the study attr ``confirmation`` is typed (``ConfirmationState``, its rounds ``Round``
and records such as ``CandidateResult`` and ``Exclusion``).

Trial user attrs (``TrialRecord`` reads each as a property of the same name in lower case):

| key | written | value |
|---|---|---|
| ``role`` | enqueued / trial start | ``baseline`` (enqueued, never proposed by the sampler) or ``speculative`` |
| ``seeded`` | enqueued | ``server default`` (the first configs) or ``surrogate`` (the refinement's picks) |
| ``requeued_from`` | enqueued | the number of the interrupted trial whose config this one measures again |
| ``config`` / ``effective`` | trial start | the suggested config / the one the server runs (``TrialConfig.to_dict``) |
| ``config_key`` | trial start | ``TrialConfig.key()`` of ``effective``: same key, same server config |
| ``worker`` | trial start | ``host:pid`` of the worker that ran it |
| ``claimed`` | trial start | True: the trial took a place in the study's budget (under the study lock) |
| ``duplicate_of`` | duplicate | the trial whose measurement this one copies (it costs no start and no budget) |
| ``fail_kind`` / ``fail_reason`` | outcome | what ended it (an error's ``kind``: ``exited``, ``oom``, ...) |
| ``infeasible`` / ``feasible`` | outcome | why the server would reject it (PRUNED) / False then, True once measured |
| ``not_launched`` | outcome | True: refused before launch (its config failed twice) |
| ``interrupted`` | outcome | True: the orchestrator stopped during it (it does not use the budget) |
| ``prune_reason`` / ``speedup_upper`` | outcome | why it lost / the upper bound of its speedup over the reference |
| ``prune_rule`` / ``pruned_against`` | outcome | ``baseline`` or ``leader`` / the reference trial it lost to |
| ``not_worth_a_start`` | outcome | not launched: why (``search.not_worth_a_start``: P, prediction, reference) |
| ``baseline_trial`` | before launch | the baseline trial it is paired with |
| ``argv`` / ``env`` / ``server_effective`` | launch | the launch command, the variables set, the server's own account |
| ``startup_s`` / ``log_path`` / ``log_tail`` | launch | startup time, server log, its end (on failures) |
| ``crashes`` | a crash | each crash of its server (exit, last log line): one fresh start; two: ``unstable`` |
| ``failed_starts`` | a failed start | starts that held the machine for nothing: ``kind``, ``seconds`` (billed) |
| ``measured`` | launch | True once the server ran this config (the prompts follow) |
| ``warmup`` | after warm-up | its untimed passes of the prompts (``autotune.warmup.WarmUp.to_dict``), when it had any |
| ``prompts`` | each prompt | ``PromptResult.to_dict()`` of each prompt measured so far (+ ``accept_positions``) |
| ``accept_length`` / ``speedup`` | end | mean acceptance length / tok/s over the baseline's on the same prompts |
| ``outputs`` / ``reference`` | baseline | the answers / the reference answers with top log-probabilities |
| ``lossless`` | speculative | the lossless record (``autotune.lossless.check_outputs``) |
| ``levels`` | each level | with load levels: ``LevelSummary.to_dict()`` of each level so far, judged |
| ``slo_broken`` | end | levels (strings) breaking ``objective.slo``; constraint ``slo`` = their number |

``accept_positions`` (in a prompt's dict only where the server reports it): the per-position acceptance counts of
that request, ``{"drafts", "accepted": [drafts whose first i tokens were accepted, i = 1..K]}``
(``autotune.acceptance``); ``TrialRecord.accept_positions`` pools a trial's prompts.

A trial's evidence for review (server log, per-prompt results and figure as Optuna artifacts, a dashboard note) is
not a user attr: ``autotune.evidence`` writes it as the system attrs Optuna and optuna-dashboard define.

Study user attrs: ``space_digest``, ``space_name``, ``backend``, ``simulated``, ``prompt_ids``, ``units``, ``seed``
(set when the study is created), ``lossless_floor`` (divergences between baselines), ``confirmation``
(``ConfirmationState``), ``worker_spec`` (what every worker must share: ``autotune.study.storage.worker_spec``),
``n_trials`` (the budget the last ``autotune study`` set; ``autotune worker`` reads it),
``level_phase`` (with load levels: the per-level picks' rounds and the ladder done after the search),
``baseline_check_rounds`` (fresh baseline rounds measured when the search left nothing to confirm),
``search_settled`` (why the search stopped before its budget: ``autotune.study.settle``),
``verdict`` / ``recommended`` (written by ``autotune dashboard`` for optuna-dashboard: the verdict, and the trial
autotune recommends with rounded figures; ``autotune.render.publish``), ``methods`` (a space with
``search.methods``: its method catalogue, each method's label and availability; ``autotune.study.methods.record``),
``traffic`` (a request-log space: the subset, its comparison with the log and the guards; ``autotune.traffic``),
``traffic_holdout`` (the subset's baseline tok/s against a holdout from the rest of the log, measured on the first
baseline's start: ``autotune.traffic.holdout_check``), ``traffic_acceptance`` (the confirmed winner's acceptance on
the subset against the holdout, the holdout measured on the winner's one more start after confirmation:
``autotune.traffic.acceptance_check``), ``greedy_lossless`` (a space whose prompts sample: the
confirmed winner's answers at temperature 0 against its baseline's references; ``autotune.study.winner``),
``drafter_references`` (the acceptance length each drafter reaches elsewhere, as the space gives it: the report's
``acceptance-far-below`` guard; set at every open, so the space's current values).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, NotRequired, TypedDict, TypeVar, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless
from autotune.acceptance import AcceptPositions, pool
from autotune.config import Config, LaunchInfo, LevelSummary, PromptResult, ReferenceOutput, TrialConfig
from autotune.errors import (
    BenchmarkError,
    DrafterNotEngaged,
    LaunchError,
    ServerDied,
    ServerExited,
    ServerOOM,
    StartupTimeout,
    Unstable,
)
from autotune.space.model import TrafficInfo
from autotune.stats import Interval
from autotune.verdict import ToSettle, Verdict
from autotune.warmup import WarmUp, WarmUpJSON

ROLE = "role"
SEEDED = "seeded"
REQUEUED_FROM = "requeued_from"
CONFIG = "config"
EFFECTIVE = "effective"
CONFIG_KEY = "config_key"
WORKER = "worker"
CLAIMED = "claimed"
DUPLICATE_OF = "duplicate_of"
FAIL_KIND = "fail_kind"
FAIL_REASON = "fail_reason"
INFEASIBLE = "infeasible"
FEASIBLE = "feasible"
NOT_LAUNCHED = "not_launched"
INTERRUPTED = "interrupted"
PRUNE_REASON = "prune_reason"
SPEEDUP_UPPER = "speedup_upper"
PRUNE_RULE = "prune_rule"
PRUNED_AGAINST = "pruned_against"
#: ``Skip.to_dict`` (``search.not_worth_a_start``)
NOT_WORTH_A_START = "not_worth_a_start"
BASELINE_TRIAL = "baseline_trial"
ARGV = "argv"
ENV = "env"
SERVER_EFFECTIVE = "server_effective"
STARTUP_S = "startup_s"
CRASHES = "crashes"
FAILED_STARTS = "failed_starts"
LOG_PATH = "log_path"
LOG_TAIL = "log_tail"
MEASURED = "measured"
PROMPTS = "prompts"
ACCEPT_LENGTH = "accept_length"
SPEEDUP = "speedup"
OUTPUTS = "outputs"
REFERENCE = "reference"
LOSSLESS = "lossless"
LEVELS = "levels"
SLO_BROKEN = "slo_broken"
WARMUP = "warmup"

# study user attrs
SPACE_DIGEST = "space_digest"
SPACE_NAME = "space_name"
BACKEND = "backend"
SIMULATED = "simulated"
PROMPT_IDS = "prompt_ids"
UNITS = "units"
LOSSLESS_FLOOR = "lossless_floor"
CONFIRMATION = "confirmation"
SEED = "seed"
WORKER_SPEC = "worker_spec"
N_TRIALS = "n_trials"
LEVEL_PHASE = "level_phase"
BASELINE_CHECK_ROUNDS = "baseline_check_rounds"
SEARCH_SETTLED = "search_settled"
VERDICT = "verdict"
METHODS = "methods"
TRAFFIC = "traffic"
TRAFFIC_HOLDOUT = "traffic_holdout"
TRAFFIC_ACCEPTANCE = "traffic_acceptance"
GREEDY_LOSSLESS = "greedy_lossless"
DRAFTER_REFERENCES = "drafter_references"
RECOMMENDED = "recommended"

# fmt: off
TRIAL_KEYS = (
    ROLE, SEEDED, REQUEUED_FROM, CONFIG, EFFECTIVE, CONFIG_KEY, WORKER, CLAIMED, DUPLICATE_OF, FAIL_KIND, FAIL_REASON,
    INFEASIBLE, FEASIBLE, NOT_LAUNCHED, INTERRUPTED, PRUNE_REASON, SPEEDUP_UPPER, PRUNE_RULE, PRUNED_AGAINST,
    NOT_WORTH_A_START, BASELINE_TRIAL, ARGV, ENV, SERVER_EFFECTIVE, STARTUP_S, LOG_PATH, LOG_TAIL, MEASURED, PROMPTS,
    ACCEPT_LENGTH, SPEEDUP, OUTPUTS, REFERENCE, LOSSLESS, LEVELS, SLO_BROKEN, CRASHES, FAILED_STARTS, WARMUP,
)
STUDY_KEYS = (
    SPACE_DIGEST, SPACE_NAME, BACKEND, SIMULATED, PROMPT_IDS, UNITS, LOSSLESS_FLOOR, CONFIRMATION, SEED, WORKER_SPEC,
    N_TRIALS, LEVEL_PHASE, BASELINE_CHECK_ROUNDS, SEARCH_SETTLED, VERDICT, RECOMMENDED, METHODS, TRAFFIC,
    TRAFFIC_HOLDOUT, TRAFFIC_ACCEPTANCE, GREEDY_LOSSLESS, DRAFTER_REFERENCES,
)
# fmt: on

#: what a duplicate copies from the trial it duplicates
COPIED_BY_DUPLICATES = (SPEEDUP, ACCEPT_LENGTH, PROMPTS, BASELINE_TRIAL, LOSSLESS, STARTUP_S, LEVELS, SLO_BROKEN)

# values, parameter and constraint names
ROLE_BASELINE = "baseline"
ROLE_SPECULATIVE = "speculative"
SEEDED_DEFAULT = "server default"
SEEDED_SURROGATE = "surrogate"
SEEDED_DESIGN = "design"
#: Optuna parameter names every backend's ``suggest`` uses; the baseline is drafter "none"
PARAM_DRAFTER = "drafter"
#: the method param of a trial in a space with ``search.methods`` (``autotune.backends.methods``)
PARAM_METHOD = "method"
PARAM_CUDA_GRAPH = "cuda_graph"
BASELINE_DRAFTER = "none"
#: the constraint (``trial.set_constraint``) that marks a trial infeasible (value 1.0; feasible is <= 0)
CONSTRAINT_FEASIBLE = "feasible"
#: the constraint that counts the load levels whose latency limits a config breaks (0: feasible)
CONSTRAINT_SLO = "slo"
#: log tail kept in a record (characters)
LOG_TAIL_CHARS = 4000

#: trials that used the budget (with these states, unless interrupted or duplicates)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
#: failures of a launched server that one retry may cover (a config failing twice is not launched again)
RETRIED_FAILURES = (ServerExited.kind, StartupTimeout.kind, LaunchError.kind, ServerDied.kind, BenchmarkError.kind)
#: failures to start: several in a row before any speculative config ran stop the study
START_FAILURES = (ServerExited.kind, StartupTimeout.kind, LaunchError.kind)
#: a server that resolved another config than launched (listed as an exclusion)
CONFIG_MISMATCH = "config-mismatch"


# -- the study attr ``confirmation`` typed: the confirmation's state (``ConfirmationState``), its rounds (``Round``)
# and its records (``CandidateResult``, ``LevelVerdict``, ``Exclusion``, ``FailedCandidate``, ``BaselineCheck``,
# ``SuspectPrune``; ``verdict.ToSettle``). All read from and write to the stored JSON unchanged: rounds keep
# CUDA-graph settings as ``"True"``/``"False"`` and trial numbers and load levels as strings there, real ``bool`` /
# ``int`` keys here; the state writes its keys in the order they were first set (as the dict it replaces did), and
# keeps keys it does not know.

_GRAPHS = {"True": True, "False": False}


def _graph(key: str) -> bool:
    if key not in _GRAPHS:
        raise ValueError(f"a round's CUDA-graph key must be 'True' or 'False' but got {key!r}")
    return _GRAPHS[key]


class RoundLevelsJSON(TypedDict, total=False):
    """``RoundLevels`` stored: CUDA-graph settings / trial numbers, then load levels, as strings."""

    baseline: dict[str, dict[str, float]]
    candidates: dict[str, dict[str, float]]


class StartRecordJSON(TypedDict):
    tok_per_s: NotRequired[list[list[float]]]
    startup_s: float
    seconds: float
    warmup: NotRequired[WarmUpJSON]
    failed_s: NotRequired[list[float]]


class RoundStartsJSON(TypedDict, total=False):
    baseline: dict[str, StartRecordJSON]
    candidates: dict[str, StartRecordJSON]


class RoundJSON(TypedDict, total=False):
    """``Round`` stored: tok/s by CUDA-graph setting (``"True"``/``"False"``) and by trial number (a string)."""

    baseline: dict[str, float]
    candidates: dict[str, float]
    levels: RoundLevelsJSON | None
    starts: RoundStartsJSON | None


@dataclass
class RoundLevels:
    """With load levels: each start's ``{level: tok/s}``, baselines by setting, candidates by trial number."""

    baseline: dict[bool, dict[int, float]] = field(default_factory=dict)
    candidates: dict[int, dict[int, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: RoundLevelsJSON) -> RoundLevels:
        return cls(
            {_graph(k): {int(c): v for c, v in lv.items()} for k, lv in (d.get("baseline") or {}).items()},
            {int(k): {int(c): v for c, v in lv.items()} for k, lv in (d.get("candidates") or {}).items()},
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": {str(k): {str(c): v for c, v in lv.items()} for k, lv in self.baseline.items()},
            "candidates": {str(k): {str(c): v for c, v in lv.items()} for k, lv in self.candidates.items()},
        }


@dataclass
class StartRecord:
    """One confirmation start's detail: its per-prompt tok/s (one list: the pass of the prompts it measured), its
    start-up seconds, its timed seconds (the prompts, and the load levels above 1), its warm-up passes, and the
    server seconds of the starts of the same config that failed before it in its round (``measure.measure_fresh``)."""

    tok_per_s: list[list[float]]
    startup_s: float
    seconds: float
    warmup: WarmUp = WarmUp()  # its untimed warm-up passes (``autotune.warmup``), when it had any
    failed_s: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: StartRecordJSON) -> StartRecord:
        return cls(
            [list(map(float, p)) for p in d.get("tok_per_s") or []],
            float(d["startup_s"]),
            float(d["seconds"]),
            WarmUp.from_dict(d.get("warmup")),
            tuple(float(x) for x in d.get("failed_s") or ()),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"tok_per_s": self.tok_per_s, "startup_s": self.startup_s, "seconds": self.seconds}
        if self.warmup.passes:
            out["warmup"] = self.warmup.to_dict()
        if self.failed_s:
            out["failed_s"] = list(self.failed_s)
        return out


@dataclass
class RoundStarts:
    """Each start's ``StartRecord``: baselines by CUDA-graph setting, candidates by trial number."""

    baseline: dict[bool, StartRecord] = field(default_factory=dict)
    candidates: dict[int, StartRecord] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: RoundStartsJSON) -> RoundStarts:
        return cls(
            {_graph(k): StartRecord.from_dict(v) for k, v in (d.get("baseline") or {}).items()},
            {int(k): StartRecord.from_dict(v) for k, v in (d.get("candidates") or {}).items()},
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": {str(k): v.to_dict() for k, v in self.baseline.items()},
            "candidates": {str(k): v.to_dict() for k, v in self.candidates.items()},
        }


@dataclass
class Round:
    """One round: a fresh baseline start per CUDA-graph setting and one start per candidate still racing (tok/s);
    ``starts`` each start's per-prompt detail (rounds recorded before it was kept have none)."""

    baseline: dict[bool, float] = field(default_factory=dict)
    candidates: dict[int, float] = field(default_factory=dict)
    levels: RoundLevels | None = None
    starts: RoundStarts | None = None

    @classmethod
    def from_dict(cls, d: RoundJSON) -> Round:
        lv, st = d.get("levels"), d.get("starts")
        return cls(
            {_graph(k): v for k, v in (d.get("baseline") or {}).items()},
            {int(k): v for k, v in (d.get("candidates") or {}).items()},
            None if lv is None else RoundLevels.from_dict(lv),
            None if st is None else RoundStarts.from_dict(st),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "baseline": {str(k): v for k, v in self.baseline.items()},
            "candidates": {str(k): v for k, v in self.candidates.items()},
        }
        if self.levels is not None:
            out["levels"] = self.levels.to_dict()
        if self.starts is not None:
            out["starts"] = self.starts.to_dict()
        return out


def rounds_from(stored: list[RoundJSON] | None) -> list[Round]:
    return [Round.from_dict(r) for r in stored or []]


def rounds_to(rounds: list[Round]) -> list[dict[str, object]]:
    return [r.to_dict() for r in rounds]


def _ci(iv: Interval | None) -> dict[str, float] | None:
    return None if iv is None else iv.to_dict()


def _ci_from(d: Mapping[str, float] | None) -> Interval | None:
    return None if d is None else Interval.from_dict(d)


def _mean(xs: Sequence[float | None]) -> float | None:
    got = [x for x in xs if x is not None]
    return sum(got) / len(got) if got else None


def _json(v: object) -> object:
    if isinstance(v, Interval):
        return v.to_dict()
    return list(v) if isinstance(v, tuple) else v.value if isinstance(v, Verdict) else v


class _Stored:
    """A typed record of the confirmation state: stored as its fields in order, intervals, tuples and verdicts as
    JSON."""

    def to_dict(self) -> dict[str, object]:
        return {k: _json(v) for k, v in self.__dict__.items()}


class CandidateResultJSON(TypedDict):
    trial: int
    config: NotRequired[Config]
    tok_per_s: NotRequired[list[float]]
    baseline_tok_per_s: NotRequired[list[float | None]]
    speedup_ci: NotRequired[dict[str, float] | None]
    deploy_baseline_tok_per_s: NotRequired[list[float | None]]
    deploy_speedup_ci: NotRequired[dict[str, float] | None]
    dropped: NotRequired[bool]


@dataclass(frozen=True)
class CandidateResult(_Stored):
    """One confirmed candidate's figures over the rounds it was measured in (``race.candidate_result``): its tok/s
    and the fresh baseline's of its own CUDA-graph setting each round with their interval (``speedup_ci``), the
    deployable baseline's with theirs (``deploy_speedup_ci``), and whether it left the race (``dropped``: clearly
    slower than the leader)."""

    trial: int
    config: Config
    tok_per_s: tuple[float, ...]
    baseline_tok_per_s: tuple[float | None, ...]
    speedup_ci: Interval | None
    deploy_baseline_tok_per_s: tuple[float | None, ...]
    deploy_speedup_ci: Interval | None
    dropped: bool

    @property
    def headline(self) -> Interval | None:
        """The interval against the fastest baseline (the same-setting one when that is missing)."""
        return self.deploy_speedup_ci or self.speedup_ci

    @property
    def mean_tok_per_s(self) -> float | None:
        """Its mean tok/s over the rounds it ran."""
        return _mean(self.tok_per_s)

    def summary(self) -> dict[str, object]:
        """The report's form: its intervals, and its mean tok/s and its baseline's over the rounds it ran."""
        return {
            "trial": self.trial,
            "config": self.config,
            "speedup_ci": _ci(self.speedup_ci),
            "deploy_speedup_ci": _ci(self.deploy_speedup_ci),
            "tok_per_s": self.mean_tok_per_s,
            "baseline_tok_per_s": _mean(self.baseline_tok_per_s),
            "rounds": len(self.tok_per_s),
            "dropped": self.dropped,
        }

    @classmethod
    def from_dict(cls, d: CandidateResultJSON) -> CandidateResult:
        return cls(
            int(d["trial"]),
            d.get("config") or {},
            tuple(d.get("tok_per_s") or ()),
            tuple(d.get("baseline_tok_per_s") or ()),
            _ci_from(d.get("speedup_ci")),
            tuple(d.get("deploy_baseline_tok_per_s") or ()),
            _ci_from(d.get("deploy_speedup_ci")),
            bool(d.get("dropped", False)),
        )


#: one candidate's interval at each load level (None: fewer than two rounds there), by level
LevelIntervals = dict[int, Interval | None]


class LevelVerdictJSON(TypedDict):
    level: int
    trial: NotRequired[int | None]
    speedup_ci: NotRequired[dict[str, float] | None]
    verdict: str


@dataclass(frozen=True)
class LevelVerdict(_Stored):
    """One load level's verdict (``autotune.study.levels.level_verdicts``): the candidate with the best point
    estimate there (None: none measured), its interval and the level's verdict."""

    level: int
    trial: int | None
    speedup_ci: Interval | None
    verdict: Verdict

    @classmethod
    def from_dict(cls, d: LevelVerdictJSON) -> LevelVerdict:
        return cls(int(d["level"]), d.get("trial"), _ci_from(d.get("speedup_ci")), Verdict(d["verdict"]))


def _level_results_from(stored: dict[str, dict[str, dict[str, float] | None]]) -> dict[int, LevelIntervals]:
    return {int(n): {int(c): _ci_from(iv) for c, iv in ivs.items()} for n, ivs in stored.items()}


def _level_results_to(per: dict[int, LevelIntervals]) -> dict[str, dict[str, dict[str, float] | None]]:
    return {str(n): {str(c): _ci(iv) for c, iv in ivs.items()} for n, ivs in per.items()}


class ExclusionJSON(TypedDict):
    trial: int
    kind: str
    config: NotRequired[Config | None]
    reason: NotRequired[str | None]
    speedup: NotRequired[float | None]


@dataclass(frozen=True)
class Exclusion:
    """A speculative config the verdict cannot weigh, and why (``find_exclusions``; a candidate whose starts failed
    in confirmation: ``FailedCandidate.exclusion``): "the baseline wins" is then inconclusive, as it might have
    won. ``kind``: ``lossy`` (with its search ``speedup``), ``not-engaged``, ``failed``, or a failed start's kind."""

    trial: int
    kind: str
    config: Config | None
    reason: str | None
    speedup: float | None = None
    in_confirmation: bool = False  # its starts failed in a confirmation round (``ConfirmationState.failed``)

    @classmethod
    def from_dict(cls, d: ExclusionJSON) -> Exclusion:
        return cls(
            int(d["trial"]),
            str(d["kind"]),
            d.get("config"),
            d.get("reason"),
            d.get("speedup"),
            "speedup" in d and d["kind"] != "lossy",
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"trial": self.trial, "kind": self.kind, "config": self.config}
        if self.kind == "lossy" or self.in_confirmation:  # stored with a speedup (None: measured, not weighed)
            out["speedup"] = self.speedup
        out["reason"] = self.reason
        return out


class BaselineCheckJSON(TypedDict):
    cuda_graph: str
    search_tok_per_s: float
    fresh_tok_per_s: float
    fresh: list[float]
    ratio: float
    limit: float
    flagged: bool


@dataclass(frozen=True)
class BaselineCheck(_Stored):
    """The search's baseline of one CUDA-graph setting (``cuda_graph`` as stored: ``"True"``/``"False"``) against
    confirmation's fresh starts of it (``autotune.study.baseline_check.check``): their geometric mean, its ratio to
    the search's value, the limit of the start-to-start noise and whether the ratio is past it (``flagged``)."""

    cuda_graph: str
    search_tok_per_s: float
    fresh_tok_per_s: float
    fresh: tuple[float, ...]
    ratio: float
    limit: float
    flagged: bool

    @classmethod
    def from_dict(cls, d: BaselineCheckJSON) -> BaselineCheck:
        search, fresh = d["search_tok_per_s"], tuple(d["fresh"])
        return cls(str(d["cuda_graph"]), search, d["fresh_tok_per_s"], fresh, d["ratio"], d["limit"], d["flagged"])


class SuspectPruneJSON(TypedDict):
    trial: int
    cuda_graph: str
    speedup_upper: NotRequired[float | None]
    corrected_upper: NotRequired[float | None]


@dataclass(frozen=True)
class SuspectPrune(_Stored):
    """A trial the baseline rule pruned (``cuda_graph`` as the rounds' keys are stored), its upper bound and, under a
    search baseline that ran fast, that bound corrected by the check's ratio (``baseline_check.suspects``)."""

    trial: int
    cuda_graph: str
    speedup_upper: float | None
    corrected_upper: float | None = None

    @classmethod
    def from_dict(cls, d: SuspectPruneJSON) -> SuspectPrune:
        return cls(int(d["trial"]), str(d["cuda_graph"]), d.get("speedup_upper"), d.get("corrected_upper"))


class FailedCandidateJSON(TypedDict):
    trial: int
    kind: str
    reason: str
    round: int
    failed_s: NotRequired[list[float]]


@dataclass(frozen=True)
class FailedCandidate(_Stored):
    """A candidate whose starts failed in confirmation round ``round`` (a crash on every fresh start it got, a
    refusal, a timeout): out of the race and listed among the exclusions; ``failed_s``: each failed start's server
    seconds (billed)."""

    trial: int
    kind: str
    reason: str
    round: int
    failed_s: tuple[float, ...]

    def exclusion(self, config: Config | None) -> Exclusion:
        return Exclusion(self.trial, self.kind, config, self.reason, None, in_confirmation=True)

    @classmethod
    def from_dict(cls, d: FailedCandidateJSON) -> FailedCandidate:
        failed_s = tuple(float(s) for s in d.get("failed_s") or ())
        return cls(int(d["trial"]), str(d["kind"]), str(d["reason"]), int(d["round"]), failed_s)


@dataclass(eq=False)
class ConfirmationState:
    """The study attr ``confirmation``: recorded after every round, so that a killed run resumes it. A field is
    stored once it is set (``recorded``); unset ones read as None."""

    keys: list[str | None]  # the candidates' config keys
    rounds: list[Round] = field(default_factory=list)
    done: bool = field(default=False, init=False)
    level_only: list[int] | None = field(default=None, init=False)  # candidates confirmed for a level's sake
    deploy_cuda_graph: bool | None = field(default=None, init=False)  # the fastest search baseline's setting
    results: list[CandidateResult] | None = field(default=None, init=False)  # per candidate
    # with load levels (``autotune.study.levels``): per candidate {level: interval}; per level the best candidate,
    # its interval and the level's verdict; "speculation wins up to 8 streams, loses from 32"
    level_results: dict[int, LevelIntervals] | None = field(default=None, init=False)
    level_verdicts: list[LevelVerdict] | None = field(default=None, init=False)
    level_text: str | None = field(default=None, init=False)
    confidence: float | None = field(default=None, init=False)  # of the verdict's intervals
    exclusions: list[Exclusion] | None = field(default=None, init=False)  # ``records.find_exclusions``
    verdict: Verdict | None = field(default=None, init=False)
    best: int | None = field(default=None, init=False)
    basis: str | None = field(default=None, init=False)  # confirmed | not-confirmed | search
    rests_on: str | None = field(default=None, init=False)  # what the verdict rests on, in words
    note: str | None = field(default=None, init=False)
    # the search's baseline against confirmation's fresh ones (``autotune.study.baseline_check``): fresh baselines
    # alone when the search left nothing to confirm, the checks, baseline-rule prunes a fast baseline may have caused
    check_rounds: list[Round] | None = field(default=None, init=False)
    baseline_check: list[BaselineCheck] | None = field(default=None, init=False)
    suspect_prunes: list[SuspectPrune] | None = field(default=None, init=False)
    # an inconclusive verdict whose pick straddles the bar: what settling it would take (``confirm._to_settle``)
    to_settle: ToSettle | None = field(default=None, init=False)
    # candidates whose starts failed in a round: out of the race and listed among the exclusions
    failed: list[FailedCandidate] | None = field(default=None, init=False)
    # the server seconds of fresh baseline starts that failed in a round whose baseline could not be measured
    # (``confirm._baseline``: confirmation stopped there; a resumed study goes on from the rounds), billed
    lost_s: list[float] | None = field(default=None, init=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _FIELDS:
            order = self.__dict__.setdefault("_order", [])
            if name not in order:
                order.append(name)

    def recorded(self, name: str) -> bool:
        """Whether ``name`` is stored (set, to None or not)."""
        return name in self.__dict__.get("_order", [])

    @classmethod
    def not_confirmed(cls, note: str, exclusions: list[Exclusion]) -> ConfirmationState:
        """Configs worth confirming exist but the space asks for no (usable) confirmation: nothing is proven."""
        s = cls.__new__(cls)
        s.keys, s.rounds, s.results, s.best, s.done = [], [], [], None, True
        s.verdict, s.basis, s.rests_on, s.note, s.exclusions = (
            Verdict.INCONCLUSIVE,
            "not-confirmed",
            note,
            note,
            exclusions,
        )
        return s

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ConfirmationState:
        s = cls.__new__(cls)
        object.__setattr__(s, "rounds", [])
        extra: dict[str, object] = {}
        object.__setattr__(s, "_extra", extra)
        for k, v in d.items():
            if k in _DECODE:
                setattr(s, k, _DECODE[k](v))
            elif k in _FIELDS:
                setattr(s, k, v)
            else:
                extra[k] = v
                s.__dict__.setdefault("_order", []).append(k)
        return s

    def to_dict(self) -> dict[str, object]:
        extra = self.__dict__.get("_extra", {})
        out: dict[str, object] = {}
        for k in self.__dict__.get("_order", []):
            if k in extra:
                out[k] = extra[k]
            else:
                v = getattr(self, k)
                out[k] = _ENCODE[k](v) if k in _ENCODE and v is not None else v
        return out

    def __getitem__(self, key: str) -> Any:
        """The stored (JSON) form of one key, for readers of the study attr's shape."""
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when the state has no such key (the benchmark scripts read it so)."""
        return self.to_dict().get(key, default)


_FIELDS = frozenset(f.name for f in fields(ConfirmationState))
_DECODE: dict[str, Callable[[Any], object]] = {
    "rounds": rounds_from,
    "check_rounds": rounds_from,
    "level_only": lambda v: None if v is None else [int(x) for x in v],
    "verdict": lambda v: None if v is None else Verdict(v),
    "results": lambda v: None if v is None else [CandidateResult.from_dict(r) for r in v],
    "level_results": lambda v: None if v is None else _level_results_from(v),
    "level_verdicts": lambda v: None if v is None else [LevelVerdict.from_dict(x) for x in v],
    "to_settle": lambda v: None if v is None else ToSettle.from_dict(v),
    "baseline_check": lambda v: None if v is None else [BaselineCheck.from_dict(c) for c in v],
    "suspect_prunes": lambda v: None if v is None else [SuspectPrune.from_dict(p) for p in v],
    "exclusions": lambda v: None if v is None else [Exclusion.from_dict(e) for e in v],
    "failed": lambda v: None if v is None else [FailedCandidate.from_dict(f) for f in v],
}
_ENCODE: dict[str, Callable[[Any], object]] = {
    "rounds": rounds_to,
    "check_rounds": rounds_to,
    "level_only": lambda v: [str(x) for x in v],
    "verdict": lambda v: Verdict(v).value,
    "results": lambda v: [r.to_dict() for r in v],
    "level_results": _level_results_to,
    "level_verdicts": lambda v: [x.to_dict() for x in v],
    "to_settle": lambda v: v.to_dict(),
    "baseline_check": lambda v: [c.to_dict() for c in v],
    "suspect_prunes": lambda v: [p.to_dict() for p in v],
    "exclusions": lambda v: [e.to_dict() for e in v],
    "failed": lambda v: [f.to_dict() for f in v],
}


# -- one trial's record: ``TrialRecord`` (typed reads) and ``TrialWriter`` (writes while it runs)


@dataclass(frozen=True)
class FailedStart:
    """A start that held the machine without giving its trial its figures: why (an error's ``kind``) and the
    server seconds it held it (billed)."""

    kind: str
    seconds: float


@dataclass(frozen=True)
class Skip:
    """Why a proposal was not launched (``search.not_worth_a_start``): the surrogate's chance ``p`` of it reaching
    ``tok_per_s`` (trial ``against``'s, the best measured config's or the fastest baseline's), its prediction and
    sd, and the reason in words."""

    p: float
    against: int | None
    tok_per_s: float
    predicted: float
    sd: float
    reason: str


_T = TypeVar("_T")


class _Attr(Generic[_T]):
    """A ``TrialRecord`` property: the stored attr ``key`` as it is (stored JSON, typed for the reader, not
    checked), ``default()`` when absent (None without one)."""

    def __init__(self, key: str, default: Callable[[], _T] | None = None) -> None:
        self.key, self.default = key, default

    def __get__(self, r: TrialRecord, owner: object = None) -> _T:
        if self.default is not None and self.key not in r.attrs:
            return self.default()
        return cast(_T, r.attrs.get(self.key))


class TrialRecord:
    """Typed read access to one trial's record (a ``FrozenTrial``, or the running ``optuna.Trial``)."""

    __slots__ = ("trial", "attrs")

    def __init__(self, trial: FrozenTrial | optuna.Trial, attrs: dict[str, Any] | None = None) -> None:
        """``attrs``: the trial's user attrs where the caller has them without a copy (a running ``optuna.Trial``
        deep-copies them on every read: ``autotune.study._optuna.live_attrs``)."""
        self.trial = trial
        self.attrs: dict[str, Any] = trial.user_attrs if attrs is None else attrs

    role = _Attr[str | None](ROLE)
    seeded = _Attr[str | None](SEEDED)
    config = _Attr[Config | None](CONFIG)
    effective = _Attr[Config | None](EFFECTIVE)
    config_key = _Attr[str | None](CONFIG_KEY)
    duplicate_of = _Attr[int | None](DUPLICATE_OF)
    fail_kind = _Attr[str | None](FAIL_KIND)
    fail_reason = _Attr[str | None](FAIL_REASON)
    infeasible = _Attr[str | None](INFEASIBLE)
    feasible = _Attr[bool | None](FEASIBLE)
    prune_reason = _Attr[str | None](PRUNE_REASON)
    speedup_upper = _Attr[float | None](SPEEDUP_UPPER)
    pruned_against = _Attr[int | None](PRUNED_AGAINST)
    speedup = _Attr[float | None](SPEEDUP)
    accept_length = _Attr[float | None](ACCEPT_LENGTH)
    startup_s = _Attr[float | None](STARTUP_S)
    log_path = _Attr[str | None](LOG_PATH)
    argv = _Attr[list[str] | None](ARGV)
    baseline_trial = _Attr[int | None](BASELINE_TRIAL)
    outputs = _Attr[list[str]](OUTPUTS, list)
    lossless = _Attr[lossless.LosslessRecord | None](LOSSLESS)
    slo_broken = _Attr[list[str]](SLO_BROKEN, list)

    @property
    def is_baseline(self) -> bool:
        """Baseline trials are enqueued with role=baseline (the sampler never proposes them)."""
        return self.attrs.get(ROLE) == ROLE_BASELINE or self.trial.params.get(PARAM_DRAFTER) == BASELINE_DRAFTER

    @property
    def drafter(self) -> Any:
        """The drafter param; in a method space (param ``method``) the suggested config's drafter (None: model-free)."""
        if PARAM_DRAFTER in self.trial.params or PARAM_METHOD not in self.trial.params:
            return self.trial.params.get(PARAM_DRAFTER)
        return (self.attrs.get(CONFIG) or {}).get(PARAM_DRAFTER)

    @property
    def method(self) -> Any:
        """The method param of a trial in a space with ``search.methods`` (None elsewhere)."""
        return self.trial.params.get(PARAM_METHOD)

    @property
    def is_speculative(self) -> bool:
        """Not a baseline, and a drafter or a method was suggested."""
        return not self.is_baseline and (PARAM_DRAFTER in self.trial.params or PARAM_METHOD in self.trial.params)

    @property
    def cuda_graph(self) -> Any:
        return self.trial.params.get(PARAM_CUDA_GRAPH)

    @property
    def shown_config(self) -> Config | None:
        """The effective config, else the suggested one (a config the server would reject has no effective one)."""
        return self.attrs.get(EFFECTIVE) or self.attrs.get(CONFIG)

    def effective_config(self) -> TrialConfig:
        return TrialConfig.from_dict(self.attrs.get(EFFECTIVE) or {})

    @property
    def not_worth_a_start(self) -> Skip | None:
        """Not launched: the surrogate's chance of it reaching the best measured config was too small."""
        stored = self.attrs.get(NOT_WORTH_A_START)
        return Skip(**stored) if stored else None

    @property
    def is_duplicate(self) -> bool:
        return DUPLICATE_OF in self.attrs

    @property
    def measured(self) -> bool:
        return bool(self.attrs.get(MEASURED))

    @property
    def interrupted(self) -> bool:
        return bool(self.attrs.get(INTERRUPTED))

    @property
    def not_launched(self) -> bool:
        return bool(self.attrs.get(NOT_LAUNCHED))

    @property
    def prune_rule(self) -> str | None:
        """``baseline`` or ``leader`` for a trial the pruner stopped (recorded without a rule: baseline)."""
        if self.attrs.get(PRUNE_REASON) is None:
            return None
        rule: str = self.attrs.get(PRUNE_RULE, "baseline")
        return rule

    @property
    def accept_positions(self) -> AcceptPositions | None:
        """Its prompts' per-position acceptance counts pooled (``autotune.acceptance.pool``; None: the server
        reported none): ``rates`` are accepted at position i / drafts, an explanation, never a ranking."""
        return pool(p.positions for p in self.prompt_results())

    def prompt_results(self) -> list[PromptResult]:
        """Per-prompt results, in the order measured (``PromptResult``, without the answers' text)."""
        return [PromptResult.from_dict(p) for p in self.attrs.get(PROMPTS, [])]

    @property
    def warmup(self) -> WarmUp:
        """Its untimed warm-up passes (``autotune.warmup``); empty when it had none."""
        return WarmUp.from_dict(self.attrs.get(WARMUP))

    @property
    def crashes(self) -> list[str]:
        return list(self.attrs.get(CRASHES) or [])

    @property
    def failed_starts(self) -> list[FailedStart]:
        """Its starts that failed, billed."""
        return [FailedStart(x["kind"], float(x.get("seconds") or 0.0)) for x in self.attrs.get(FAILED_STARTS) or []]

    def references(self) -> list[ReferenceOutput | None]:
        return [ReferenceOutput.from_dict(r) if r else None for r in self.attrs.get(REFERENCE, [])]

    @property
    def levels(self) -> list[LevelSummary]:
        """Per-level summaries, lowest level first (empty without load levels)."""
        return [LevelSummary.from_dict(x) for x in self.attrs.get(LEVELS) or []]

    def level(self, level: int) -> LevelSummary | None:
        """Load level ``level``'s summary (None: not measured)."""
        return next((x for x in self.levels if x.level == int(level)), None)

    def level_tok_per_s(self) -> dict[int, float]:
        return {x.level: x.tok_per_s for x in self.levels}

    @property
    def lossy(self) -> bool:
        """A lossless record that says the answers diverged where the baseline was confident."""
        return not (self.attrs.get(LOSSLESS) or {}).get("ok", True)


# ---------------------------------------------------------------------------------------------- writing


class TrialWriter:
    """Writes the running trial's record (Optuna accepts user attrs only while a trial runs)."""

    __slots__ = ("trial",)

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial

    def _set(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, value)

    def claimed(self) -> None:
        self._set(CLAIMED, True)

    def started(self, config: TrialConfig, worker: str) -> None:
        self._set(CONFIG, config.to_dict())
        self._set(ROLE, ROLE_BASELINE if config.is_baseline else ROLE_SPECULATIVE)
        self._set(WORKER, worker)

    def resolved(self, effective: TrialConfig) -> None:
        self._set(EFFECTIVE, effective.to_dict())
        self._set(CONFIG_KEY, effective.key())

    def duplicate(self, of: FrozenTrial) -> None:
        self._set(DUPLICATE_OF, of.number)
        for k in COPIED_BY_DUPLICATES:
            if k in of.user_attrs:
                self._set(k, of.user_attrs[k])

    def failed(self, kind: str | None, reason: str, *, not_launched: bool = False) -> None:
        self._set(FAIL_KIND, kind)
        self._set(FAIL_REASON, reason)
        if not_launched:
            self._set(NOT_LAUNCHED, True)

    def infeasible(self, kind: str, reason: str) -> None:
        self._set(FAIL_KIND, kind)
        self._set(INFEASIBLE, reason)
        self._set(FEASIBLE, False)

    def pruned(self, reason: str, upper: float | None, rule: str | None = None, against: int | None = None) -> None:
        self._set(PRUNE_REASON, reason)
        self._set(SPEEDUP_UPPER, upper)
        if rule is not None:
            self._set(PRUNE_RULE, rule)
        if against is not None:
            self._set(PRUNED_AGAINST, against)

    def not_worth_a_start(self, skip: Skip) -> None:
        self._set(NOT_WORTH_A_START, dataclasses.asdict(skip))

    def server_log(self, tail: str, path: str | None) -> None:
        """The log of a server that did not start."""
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])
        self._set(LOG_PATH, path)

    def log_tail(self, tail: str) -> None:
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])

    def crashes(self, lines: list[str]) -> None:
        self._set(CRASHES, list(lines))

    def failed_starts(self, starts: Sequence[FailedStart]) -> None:
        self._set(FAILED_STARTS, [dataclasses.asdict(x) for x in starts])

    def interrupted(self) -> None:
        self._set(INTERRUPTED, True)

    def baseline_trial(self, number: int) -> None:
        self._set(BASELINE_TRIAL, number)

    def launched(self, info: LaunchInfo) -> None:
        self._set(ARGV, list(info.argv))
        self._set(ENV, dict(info.env))
        self._set(SERVER_EFFECTIVE, info.effective)

    def measuring(self, info: LaunchInfo) -> None:
        """The server runs the config it was asked for: from here on the trial is a measurement."""
        self._set(STARTUP_S, info.startup_s)
        self._set(LOG_PATH, info.log_path)
        self._set(MEASURED, True)

    def warmup(self, w: WarmUp) -> None:
        if w.passes:
            self._set(WARMUP, w.to_dict())

    def prompts(self, results: Sequence[PromptResult]) -> None:
        self._set(PROMPTS, [x.to_dict() for x in results])

    def references(self, refs: Sequence[ReferenceOutput | None]) -> None:
        self._set(REFERENCE, [r.to_dict() if r is not None else None for r in refs])

    def measured(self, accept_length: float | None) -> None:
        self._set(ACCEPT_LENGTH, accept_length)
        self._set(FEASIBLE, True)

    def outputs(self, texts: list[str]) -> None:
        self._set(OUTPUTS, texts)

    def speedup(self, value: float) -> None:
        self._set(SPEEDUP, value)

    def lossless(self, record: Mapping[str, object]) -> None:
        self._set(LOSSLESS, record)

    def levels(self, summaries: Sequence[LevelSummary]) -> None:
        self._set(LEVELS, [s.to_dict() for s in summaries])

    def slo_broken(self, levels: list[str]) -> None:
        self._set(SLO_BROKEN, levels)


# -- queries over a study's trials (baseline of a setting, duplicates, failed twice, drafter not engaged, predicted
# OOM, launch failures in a row, exclusions, budget, level rows) and enqueueing


def enqueue_baseline(study: optuna.Study, cuda_graph: bool) -> None:
    study.enqueue_trial({PARAM_CUDA_GRAPH: cuda_graph}, user_attrs={ROLE: ROLE_BASELINE})


def enqueue_speculative(
    study: optuna.Study, params: Mapping[str, object], *, seeded: str | None = None, requeued_from: int | None = None
) -> None:
    attrs: dict[str, object] = {ROLE: ROLE_SPECULATIVE}
    if seeded is not None:
        attrs[SEEDED] = seeded
    if requeued_from is not None:
        attrs[REQUEUED_FROM] = requeued_from
    study.enqueue_trial(dict(params), user_attrs=attrs)


def enqueue_retry(study: optuna.Study, lost: FrozenTrial, system_attrs: dict[str, object]) -> None:
    """Queue the config of a lost trial again (``autotune.study.storage.RetryLostTrial``): its params, the attrs
    it was enqueued with (role, seeded) and ``requeued_from``, not what the lost attempt recorded."""
    attrs = {k: lost.user_attrs[k] for k in (ROLE, SEEDED) if k in lost.user_attrs}
    attrs[REQUEUED_FROM] = lost.number
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=lost.params,
            distributions=lost.distributions,
            user_attrs=attrs,
            system_attrs=system_attrs,
        )
    )


# ---------------------------------------------------------------------------------------------- queries


#: where ``reading`` keeps its snapshot on the study object
_SNAPSHOT = "_autotune_snapshot"


def trials(study: optuna.Study, states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
    """The study's trials (of ``states``), from the snapshot of an enclosing ``reading`` if there is one."""
    snapshot: list[FrozenTrial] | None = study.__dict__.get(_SNAPSHOT)
    if snapshot is None:
        return study.get_trials(deepcopy=False, states=states)
    return snapshot if states is None else [t for t in snapshot if t.state in states]


@contextlib.contextmanager
def reading(study: optuna.Study) -> Iterator[None]:
    """Within: every ``trials(study)`` reads one snapshot of the study, taken on entry. For a decision that only
    reads (the refusal rules before a start, the settled check between trials): each read of an RDB study
    re-reads the running trials with all their attrs (Optuna's cache), ~24 reads a trial were a third of the
    loop's CPU. Not for a wait on other workers (it would never see them change). Nested: the outer snapshot."""
    if study.__dict__.get(_SNAPSHOT) is not None:
        yield
        return
    study.__dict__[_SNAPSHOT] = study.get_trials(deepcopy=False)
    try:
        yield
    finally:
        del study.__dict__[_SNAPSHOT]


def is_baseline_trial(t: FrozenTrial) -> bool:
    """Baseline trials are enqueued with user attr role=baseline (the sampler never proposes them)."""
    return TrialRecord(t).is_baseline


def find_baseline(study: optuna.Study, cuda_graph: object) -> FrozenTrial | None:
    """The measured baseline trial (not a duplicate) for a CUDA-graph setting, or None. A finished trial never
    changes, so one found is kept on the study object (the search asks several times a trial)."""
    found: dict[object, FrozenTrial] = study.__dict__.setdefault("_autotune_baselines", {})
    if cuda_graph in found:
        return found[cuda_graph]
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline and r.cuda_graph == cuda_graph and not r.is_duplicate and t.intermediate_values:
            found[cuda_graph] = t
            return t
    return None


def is_lost(t: FrozenTrial) -> bool:
    """A trial whose worker was lost (SIGKILL, node down) mid-trial: FAIL without an outcome of ours, failed by
    Optuna's heartbeat check (``autotune.study.storage.RetryLostTrial`` queues its config once more)."""
    return t.state == TrialState.FAIL and FAIL_REASON not in t.user_attrs and not t.user_attrs.get(INTERRUPTED)


def is_counted(t: FrozenTrial) -> bool:
    """Whether a trial (of a counted state) used the budget: not interrupted, not a duplicate, not lost."""
    r = TrialRecord(t)
    return not r.interrupted and not r.is_duplicate and not is_lost(t)


def counted_trials(study: optuna.Study, *, running: bool = False) -> int:
    """Trials that used the budget: measured, failed or infeasible; not duplicates nor interrupted ones."""
    states = COUNTED + ((TrialState.RUNNING,) if running else ())
    return sum(1 for t in trials(study, states) if is_counted(t))


def used_budget(study: optuna.Study, among: list[FrozenTrial] | None = None) -> tuple[int, int]:
    """(finished trials that used the budget, running trials of any worker that claimed a place in it and may
    still use it): what a worker weighs before it starts a trial."""
    done = running = 0
    for t in trials(study) if among is None else among:
        if t.state in COUNTED and is_counted(t):
            done += 1
        elif t.state == TrialState.RUNNING and t.user_attrs.get(CLAIMED) and is_counted(t):
            running += 1
    return done, running


def running_same_config(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    """A trial of another worker that is measuring the server config ``key`` right now (not a duplicate)."""
    for t in trials(study, (TrialState.RUNNING,)):
        r = TrialRecord(t)
        if t.number != number and r.config_key == key and not r.is_duplicate:
            return t
    return None


def is_measured_speculative(t: FrozenTrial) -> bool:
    """A speculative start that measured prompts (not a duplicate)."""
    r = TrialRecord(t)
    return not r.is_baseline and not r.is_duplicate and r.measured


def find_duplicate(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    """A measured trial (COMPLETE or PRUNED, not itself a duplicate) of the server config ``key``."""
    for t in trials(study, (TrialState.COMPLETE, TrialState.PRUNED)):
        r = TrialRecord(t)
        if t.number != number and r.config_key == key and not r.is_duplicate and r.measured:
            return t
    return None


def failed_twice(study: optuna.Study, key: str) -> list[FrozenTrial]:
    """Two launched trials of this server config that failed (crash, hang, benchmark failure), else []."""
    failed = [
        t
        for t in trials(study, (TrialState.FAIL,))
        if (r := TrialRecord(t)).config_key == key
        and r.fail_kind in RETRIED_FAILURES
        and not r.interrupted
        and not r.not_launched
    ]
    return failed[:2] if len(failed) >= 2 else []


def unstable(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A trial whose server config ``key`` crashed on every start it got (``fail_kind`` ``unstable``)."""
    for t in trials(study, (TrialState.FAIL,)):
        r = TrialRecord(t)
        if r.config_key == key and r.fail_kind == Unstable.kind:
            return t
    return None


def disengaged(study: optuna.Study, config: TrialConfig, among: list[FrozenTrial] | None = None) -> FrozenTrial | None:
    """A failed trial whose drafter (``config``'s) was found not engaged."""
    for t in trials(study, (TrialState.FAIL,)) if among is None else among:
        r = TrialRecord(t)
        if (
            t.state == TrialState.FAIL
            and r.fail_kind == DrafterNotEngaged.kind
            and r.drafter == config.drafter
            and r.method == config.knob(PARAM_METHOD)
        ):
            return t
    return None


def config_size(config: TrialConfig, size_knob: str | None) -> int | None:
    """The config's tree size (its backend's ``size_knob``), None without one."""
    v = config.knob(size_knob) if size_knob else None
    return None if v is None else int(v)


def predicted_oom(
    study: optuna.Study, config: TrialConfig, size_knob: str | None, among: list[FrozenTrial] | None = None
) -> FrozenTrial | None:
    """A trial that ran out of memory with the same drafter and CUDA-graph setting at a size <= ``config``'s."""
    size = config_size(config, size_knob)
    if size is None:
        return None
    for t in trials(study, (TrialState.PRUNED,)) if among is None else among:
        r = TrialRecord(t)
        if t.state != TrialState.PRUNED or r.fail_kind != ServerOOM.kind:
            continue
        eff = TrialConfig.from_dict(r.effective or {})
        other = config_size(eff, size_knob)
        if (
            eff.drafter == config.drafter
            and eff.cuda_graph == config.cuda_graph
            and other is not None
            and size >= other
        ):
            return t
    return None


def consecutive_launch_failures(study: optuna.Study) -> int:
    """Servers that failed to start in a row since the last measured one. Once a speculative config has run, a
    failing one is that config's problem (the study goes on): then 0."""
    counted = trials(study, COUNTED)
    if any((r := TrialRecord(t)).measured and not r.is_baseline for t in counted):
        return 0
    n = 0
    for t in sorted(counted, key=lambda t: t.number, reverse=True):
        r = TrialRecord(t)
        if r.not_launched:
            continue
        if r.fail_kind in START_FAILURES:
            n += 1
        elif r.measured:
            break
    return n


def find_exclusions(study: optuna.Study) -> list[Exclusion]:
    """Speculative configs the verdict cannot weigh, each with its reason: answers that diverge from the
    baseline's where the baseline was confident (lossy), drafters that were not engaged, server configs that
    failed and were never measured. A verdict with exclusions says so, and "the baseline wins" becomes
    inconclusive: an excluded config might have won."""
    everything = sorted(trials(study), key=lambda t: t.number)
    measured = {
        TrialRecord(t).config_key
        for t in everything
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and TrialRecord(t).measured
    }
    out: list[Exclusion] = []
    seen: set[str] = set()
    for t in everything:
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or r.interrupted:
            continue
        cfg = r.shown_config
        if t.state == TrialState.COMPLETE and r.lossy:
            why = "output differs from the baseline's where the baseline was confident: "
            out.append(Exclusion(t.number, "lossy", cfg, why + lossless.summary_line(r.lossless or {}), r.speedup))
        elif t.state == TrialState.FAIL and r.fail_kind == DrafterNotEngaged.kind:
            key = f"drafter:{r.drafter}"
            if key not in seen:
                seen.add(key)
                out.append(Exclusion(t.number, "not-engaged", cfg, r.fail_reason))
        elif (
            t.state == TrialState.FAIL
            and r.fail_kind in (*RETRIED_FAILURES, CONFIG_MISMATCH)
            and r.config_key not in measured
        ):
            key = f"config:{r.config_key}"
            if key not in seen:
                seen.add(key)
                out.append(Exclusion(t.number, "failed", cfg, f"{r.fail_kind}: {r.fail_reason}"))
    return out


@dataclass(frozen=True)
class LevelRow:
    """A measured speculative trial's per-level speedups (and latency limits broken), as ``autotune.schedule.build``
    reads them."""

    trial: int
    config: Config | None
    levels: tuple[LevelSummary, ...]
    lossy: bool


def level_rows(study: optuna.Study) -> list[LevelRow]:
    """Measured speculative trials with load levels, as the search measured them."""
    out = []
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or not (levels := r.levels):
            continue
        out.append(LevelRow(t.number, r.effective, tuple(levels), r.lossy))
    return out


def confirmed_level_rows(study: optuna.Study) -> list[LevelRow]:
    """The confirmed candidates' per-level speedups (interval points); [] without a per-level confirmation.
    Latency limits broken in the search still count."""
    conf = confirmation(study)
    per = (conf.level_results if conf is not None else None) or {}
    out = []
    for number, ivs in per.items():
        t = next((x for x in trials(study) if x.number == number), None)
        if t is None:
            continue
        r = TrialRecord(t)
        broken = {x.level: x.slo_broken for x in r.levels}
        levels = tuple(
            LevelSummary(int(c), speedup=iv.point, slo_broken=broken.get(int(c), ())) for c, iv in ivs.items() if iv
        )
        out.append(LevelRow(t.number, r.effective, levels, r.lossy))
    return out


def outcome_reason(t: FrozenTrial) -> str | None:
    """Why a trial ended as it did, in words, for every table and note (None: a COMPLETE trial, nothing to say).

    Every PRUNED and FAIL trial gets one, also those without an outcome of ours: a trial failed by another run or
    by Optuna's heartbeat check (``is_lost``), and one a launch error outside the trial's steps left FAIL."""
    r = TrialRecord(t)
    if r.is_duplicate:
        return f"same server config as trial {r.duplicate_of}: its measurement is copied"
    if t.state == TrialState.COMPLETE:
        return None
    if t.state == TrialState.WAITING:
        return "queued, not started yet"
    if t.state == TrialState.RUNNING:
        return "running"
    if r.interrupted:
        why = r.fail_reason or "the run stopped during this trial"
        return f"interrupted: {why} (not counted in the budget)"
    if t.state == TrialState.PRUNED:
        if r.not_worth_a_start:
            return f"not launched: {r.not_worth_a_start.reason}"
        if r.infeasible:
            kind = "out of memory" if r.fail_kind == ServerOOM.kind else "infeasible"
            return f"{kind}: {r.infeasible}"
        if r.prune_reason:
            against = f" (trial {r.pruned_against})" if r.pruned_against is not None else ""
            who = "lost to the leader" if r.prune_rule == "leader" else "lost to the baseline"
            return f"{who}{against}: {r.prune_reason}"
        return "pruned (no reason recorded)"
    if r.fail_reason or r.fail_kind:
        head = r.fail_kind or "failed"
        return f"{head}: {r.fail_reason}" if r.fail_reason else head
    return (
        "no outcome recorded: the process running it stopped (killed, lost, or an error outside the trial's "
        "steps) before the trial settled; it does not use the budget"
    )


# -- the study's own attrs: labels, the lossless floor, the phases' recorded state, the worker spec, the budget
@dataclass(frozen=True)
class FloorEntry:
    """One entry of the study attr ``lossless_floor``: baseline ``baseline`` (a trial number, or ``"confirmation"``
    for a fresh start) diverged from trial ``against``; or, without a ``divergence``, that the baseline was
    compared (stored as ``"checked": true``)."""

    baseline: int | str
    cuda_graph: bool
    divergence: lossless.Divergence | None = None
    against: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FloorEntry:
        if d.get("checked"):
            return cls(d["baseline"], d["cuda_graph"])
        return cls(d["baseline"], d["cuda_graph"], lossless.Divergence.from_dict(d), d["against"])

    def to_dict(self) -> dict[str, object]:
        if self.divergence is None:
            return {"baseline": self.baseline, "checked": True, "cuda_graph": self.cuda_graph}
        div = self.divergence.to_dict()
        return {**div, "baseline": self.baseline, "against": self.against, "cuda_graph": self.cuda_graph}


def lossless_floor(study: optuna.Study) -> list[FloorEntry]:
    """The divergences found between baselines, and each baseline compared."""
    return [FloorEntry.from_dict(d) for d in study.user_attrs.get(LOSSLESS_FLOOR, [])]


def set_lossless_floor(study: optuna.Study, floor: Sequence[FloorEntry]) -> None:
    study.set_user_attr(LOSSLESS_FLOOR, [f.to_dict() for f in floor])


@dataclass(frozen=True)
class LevelPhase:
    """With load levels: how far the phase after the search got: ``rounds`` of per-level picks, the ladder done."""

    rounds: int = 0
    ladder: bool = False


def level_phase(study: optuna.Study) -> LevelPhase:
    stored = study.user_attrs.get(LEVEL_PHASE) or {}
    return LevelPhase(int(stored.get("rounds", 0)), bool(stored.get("ladder", False)))


def set_level_phase(study: optuna.Study, state: LevelPhase) -> None:
    """Stored as ``{"rounds": N}`` until the ladder is done, then with ``"ladder": true``."""
    study.set_user_attr(LEVEL_PHASE, {"rounds": state.rounds, **({"ladder": True} if state.ladder else {})})


def baseline_check_rounds(study: optuna.Study) -> list[Round]:
    """Rounds of fresh baselines alone, measured when the search left nothing to confirm (so that "the baseline
    wins" does not rest on a single baseline start); ``autotune.study.baseline_check``."""
    return rounds_from(study.user_attrs.get(BASELINE_CHECK_ROUNDS))


def set_baseline_check_rounds(study: optuna.Study, rounds: list[Round]) -> None:
    study.set_user_attr(BASELINE_CHECK_ROUNDS, rounds_to(rounds))


@dataclass(frozen=True)
class Settled:
    """Whether the surrogate's probabilities settle the search (``autotune.study.settle``; ``reason`` is None while
    they do not); the study attr ``search_settled`` once they did, with the counted ``trials`` then and the
    ``n_trials`` cap the search stopped under."""

    p_improve: float
    p_gain: float
    threshold: float
    resolution: float
    min_gain: float
    measured: int
    unmeasured: int
    reason: str | None
    #: the largest expected improvement of one unmeasured config over the best measured one (relative tok/s): what
    #: the next trial can gain at best, in expectation; ``expected_gain_bar``: the same over the best measured or the
    #: bar (the fastest baseline times 1 + min_gain), whichever is higher: the gain that could change the verdict.
    #: Recorded with a settled stop; no stop rule reads them
    expected_gain: float = 0.0
    expected_gain_bar: float = 0.0
    #: how likely any config not measured yet changes the answer: beats the best measured one by more than the
    #: resolution where that is above the bar, or clears the bar (the fastest baseline times 1 + min_gain) where
    #: the best measured is below it. Under the bar, a config 1% faster than the best measured changes nothing the
    #: user decides (both deploy the baseline): the field report's study, whose best is a 1.004x tie, measured ~30
    #: configs refining ties under the bar after its expected gain over the bar was under 0.1%
    p_change: float = 1.0
    trials: int | None = None
    n_trials: int | None = None

    @property
    def text(self) -> str:
        return f"search stopped after {self.trials} of up to {self.n_trials} trials: {self.reason}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Settled:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_dict(self) -> dict[str, float | int | str | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def search_settled(study: optuna.Study) -> Settled | None:
    """Why the search stopped before its budget, or None."""
    stored = study.user_attrs.get(SEARCH_SETTLED)
    return Settled.from_dict(stored) if stored else None


def set_search_settled(study: optuna.Study, state: Settled) -> None:
    study.set_user_attr(SEARCH_SETTLED, state.to_dict())


def confirmation(study: optuna.Study) -> ConfirmationState | None:
    stored = study.user_attrs.get(CONFIRMATION)
    return ConfirmationState.from_dict(stored) if stored else None


def set_confirmation(study: optuna.Study, state: ConfirmationState) -> None:
    study.set_user_attr(CONFIRMATION, state.to_dict())


def reopen_confirmation(study: optuna.Study) -> None:
    """Mark a recorded confirmation not done, so that it is run again (``autotune confirm``)."""
    prev = confirmation(study)
    if prev:
        prev.done = False
        set_confirmation(study, prev)


def label_study(
    study: optuna.Study,
    *,
    digest: str,
    space_name: str,
    backend: str,
    simulated: bool,
    label: Mapping[str, object] | None,
    prompt_ids: list[str],
    seed: int | None = None,
) -> None:
    """A new study's labels; ``label`` (the scenario and time scale) is kept for simulated studies only; ``seed``
    (``--seed``) also seeds the search's design."""
    if seed is not None:
        study.set_user_attr(SEED, seed)
    study.set_user_attr(SPACE_DIGEST, digest)
    study.set_user_attr(SPACE_NAME, space_name)
    study.set_user_attr(BACKEND, backend)
    study.set_user_attr(SIMULATED, label if simulated else None)
    study.set_user_attr(PROMPT_IDS, prompt_ids)
    study.set_user_attr(UNITS, "simulated hardware tok/s" if simulated else "tok/s")


def design_seed(study: optuna.Study) -> int:
    """The seed of the search's design: the study's ``--seed``, else derived from its name (stable per study). Set
    when the study is created and never after, so it is read once per study object (the settled check asks it
    before every trial)."""
    known: int | None = study.__dict__.get("_autotune_design_seed")
    if known is not None:
        return known
    seed = study.user_attrs.get(SEED)
    if not isinstance(seed, int):
        seed = int.from_bytes(hashlib.sha256(study.study_name.encode()).digest()[:4], "little")
    study.__dict__["_autotune_design_seed"] = seed
    return seed


class WorkerSpec(TypedDict, total=False):
    """The study attr ``worker_spec`` (``autotune.study.storage.worker_spec``): what every worker of a study must
    share, a JSON document compared key by key (``storage.spec_differences``); ``warmup_passes`` only where the
    starts warm up."""

    space_digest: str
    search: dict[str, object]  # drafters, CUDA graphs, knobs' domains (and methods: each one's drafters and knobs)
    drafters: dict[str, dict[str, object]]  # name -> its forced algorithm
    pruning: dict[str, object]
    budget: dict[str, object]
    sampler: dict[str, object]
    pruner: dict[str, object]
    warmup_passes: int


def worker_spec(study: optuna.Study) -> WorkerSpec | None:
    return study.user_attrs.get(WORKER_SPEC)


def set_worker_spec(study: optuna.Study, spec: WorkerSpec) -> None:
    study.set_user_attr(WORKER_SPEC, spec)


def study_n_trials(study: optuna.Study) -> int | None:
    return study.user_attrs.get(N_TRIALS)


def set_study_n_trials(study: optuna.Study, n: int) -> None:
    study.set_user_attr(N_TRIALS, int(n))


def space_digest(study: optuna.Study) -> str | None:
    return study.user_attrs.get(SPACE_DIGEST)


def prompt_ids(study: optuna.Study) -> list[str]:
    """The ids of the study's prompts, in order (``prompt_ids``, set when the study is created)."""
    return list(study.user_attrs.get(PROMPT_IDS) or [])


def study_labels(study: optuna.Study) -> tuple[Any, str]:
    """(simulated label or None, units) for reports."""
    return study.user_attrs.get(SIMULATED), study.user_attrs.get(UNITS, "tok/s")


class SubsetCheckRecord(TypedDict, total=False):
    """The study attrs ``traffic_holdout`` (the baseline's tok/s) and ``traffic_acceptance`` (the winner's accepted
    draft tokens a round): the figures on the subset and on the holdout, and ``traffic.SubsetCheck.to_dict`` of them
    (keys ``subset_KEY`` / ``rest_KEY`` by what is measured); ``skipped``: why the acceptance was not measured."""

    trial: int
    skipped: str
    subset: list[float | None]
    rest: list[float | None]
    subset_tok_per_s: dict[str, float]
    rest_tok_per_s: dict[str, float]
    subset_accepted_per_round: dict[str, float]
    rest_accepted_per_round: dict[str, float]
    ratio: dict[str, float]
    min_gain: float
    warning: str | None
    text: str


def traffic(study: optuna.Study) -> TrafficInfo | None:
    """A request-log study's subset and guards (``space.model.TrafficInfo`` as recorded); None for other studies."""
    value = study.user_attrs.get(TRAFFIC)
    if not isinstance(value, dict):
        return None
    return TrafficInfo(**{**value, "guards": tuple((str(n), str(x)) for n, x in value.get("guards") or ())})


def set_traffic(study: optuna.Study, info: TrafficInfo) -> None:
    """Record the subset and guards once (the first run's stay: the study's prompts are fixed by its digest)."""
    if TRAFFIC not in study.user_attrs:
        study.set_user_attr(TRAFFIC, dataclasses.asdict(info))


def _subset_check(study: optuna.Study, key: str) -> SubsetCheckRecord | None:
    value = study.user_attrs.get(key)
    return cast(SubsetCheckRecord, value) if isinstance(value, dict) else None


def traffic_holdout(study: optuna.Study) -> SubsetCheckRecord | None:
    """None until a baseline measured it, or without a holdout."""
    return _subset_check(study, TRAFFIC_HOLDOUT)


def set_traffic_holdout(study: optuna.Study, value: Mapping[str, object]) -> None:
    """Record the holdout check once (the first baseline's; later baselines do not measure it again)."""
    if TRAFFIC_HOLDOUT not in study.user_attrs:
        study.set_user_attr(TRAFFIC_HOLDOUT, value)


def traffic_acceptance(study: optuna.Study) -> SubsetCheckRecord | None:
    """None until it ran, or without a holdout."""
    return _subset_check(study, TRAFFIC_ACCEPTANCE)


def set_traffic_acceptance(study: optuna.Study, value: Mapping[str, object]) -> None:
    study.set_user_attr(TRAFFIC_ACCEPTANCE, value)


class GreedyLossless(lossless.LosslessRecord, total=False):
    """The study attr ``greedy_lossless``: the winner ``trial``'s answers at temperature 0 against its ``baseline``'s
    references (``autotune.study.winner``), or why the check was ``skipped``."""

    trial: int
    baseline: int | None
    temperature: float
    skipped: str


def greedy_lossless(study: optuna.Study) -> GreedyLossless | None:
    """None until it ran."""
    value = study.user_attrs.get(GREEDY_LOSSLESS)
    return cast(GreedyLossless, value) if isinstance(value, dict) else None


def set_greedy_lossless(study: optuna.Study, value: Mapping[str, object]) -> None:
    study.set_user_attr(GREEDY_LOSSLESS, value)


def drafter_references(study: optuna.Study) -> dict[str, float]:
    """The drafters' reference acceptance lengths as the space gave them ({} when it gave none)."""
    value = study.user_attrs.get(DRAFTER_REFERENCES)
    return {str(k): float(v) for k, v in value.items()} if isinstance(value, dict) else {}


def set_drafter_references(study: optuna.Study, value: dict[str, float]) -> None:
    if study.user_attrs.get(DRAFTER_REFERENCES) != value:
        study.set_user_attr(DRAFTER_REFERENCES, value)


class MethodEntry(TypedDict):
    """A method of the study attr ``methods``: how reports name it, whether it adapts its draft (and which static
    method it adapts), why it cannot run with the target (None: it can)."""

    label: str
    adaptive: bool
    adapts: str | None
    unavailable: str | None


class MethodCatalogue(TypedDict):
    """The study attr ``methods`` (``autotune.study.methods.catalogue``): the space's methods by name, and each
    prompt's category."""

    methods: dict[str, MethodEntry]
    categories: list[str | None]
    # what a tie between methods is judged with (absent in studies recorded before it: the defaults)
    start_noise: NotRequired[float]
    confidence: NotRequired[float]


def method_catalogue(study: optuna.Study) -> MethodCatalogue | None:
    """The method space's catalogue the study recorded (``autotune.study.methods``); None for other spaces."""
    return study.user_attrs.get(METHODS)


def set_method_catalogue(study: optuna.Study, info: MethodCatalogue) -> None:
    """Record the catalogue once (the first run's stays)."""
    if METHODS not in study.user_attrs:
        study.set_user_attr(METHODS, info)


def set_outcome(study: optuna.Study, verdict: str, recommended: Mapping[str, object]) -> None:
    """The verdict and the recommendation, rounded, for optuna-dashboard's study view."""
    study.set_user_attr(VERDICT, verdict)
    study.set_user_attr(RECOMMENDED, recommended)

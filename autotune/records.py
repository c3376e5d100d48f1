"""The trial record: what a study stores about each trial (Optuna user attrs), and the queries over trials.

Every user-attr key autotune writes or reads is named here, and nowhere else: the study writes a running trial
through ``TrialWriter`` (Optuna refuses writes once a trial has finished), everyone reads through ``TrialRecord``
or the queries below (the pruner, the search, confirmation, the report).

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
| ``baseline_trial`` | before launch | the baseline trial it is paired with |
| ``argv`` / ``env`` / ``server_effective`` | launch | the launch command, the variables set, the server's own account |
| ``startup_s`` / ``log_path`` / ``log_tail`` | launch | startup time, server log, its end (on failures) |
| ``measured`` | launch | True once the server ran this config (the prompts follow) |
| ``prompts`` | each prompt | ``PromptResult.to_dict()`` of each prompt measured so far |
| ``accept_length`` / ``speedup`` | end | mean acceptance length / tok/s over the baseline's on the same prompts |
| ``outputs`` / ``reference`` | baseline | the answers / the reference answers with top log-probabilities |
| ``lossless`` | speculative | the lossless record (``autotune.lossless.check_outputs``) |
| ``levels`` | each level | with load levels: ``LevelResult.summary()`` per level so far, ``speedup``, ``slo_broken`` |
| ``slo_broken`` | end | levels (strings) breaking ``objective.slo``; constraint ``slo`` = their number |

A trial's evidence for review (server log, per-prompt results and figure as Optuna artifacts, a dashboard note) is
not a user attr: ``autotune.evidence`` writes it as the system attrs Optuna and optuna-dashboard define.

Study user attrs: ``space_digest``, ``space_name``, ``backend``, ``simulated``, ``prompt_ids``, ``units``, ``seed``
(set when the study is created), ``lossless_floor`` (divergences between baselines), ``confirmation``
(``ConfirmationState``), ``worker_spec`` (what every worker must share: ``autotune.study.storage.worker_spec``),
``n_trials`` (the budget the last ``autotune study`` set; ``autotune worker`` reads it),
``level_phase`` (with load levels: the per-level picks' rounds and the ladder done after the search),
``baseline_check_rounds`` (fresh baseline rounds measured when the search left nothing to confirm).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypedDict

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless
from autotune.config import LaunchInfo, PromptResult, ReferenceOutput, TrialConfig
from autotune.errors import (
    BenchmarkError,
    DrafterNotEngaged,
    LaunchError,
    ServerDied,
    ServerExited,
    ServerOOM,
    StartupTimeout,
)

# ---------------------------------------------------------------------------------------------- keys

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
BASELINE_TRIAL = "baseline_trial"
ARGV = "argv"
ENV = "env"
SERVER_EFFECTIVE = "server_effective"
STARTUP_S = "startup_s"
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

# fmt: off
TRIAL_KEYS = (
    ROLE, SEEDED, REQUEUED_FROM, CONFIG, EFFECTIVE, CONFIG_KEY, WORKER, CLAIMED, DUPLICATE_OF, FAIL_KIND, FAIL_REASON,
    INFEASIBLE, FEASIBLE, NOT_LAUNCHED, INTERRUPTED, PRUNE_REASON, SPEEDUP_UPPER, PRUNE_RULE, PRUNED_AGAINST,
    BASELINE_TRIAL, ARGV, ENV, SERVER_EFFECTIVE, STARTUP_S, LOG_PATH, LOG_TAIL, MEASURED, PROMPTS, ACCEPT_LENGTH,
    SPEEDUP, OUTPUTS, REFERENCE, LOSSLESS, LEVELS, SLO_BROKEN,
)
STUDY_KEYS = (
    SPACE_DIGEST, SPACE_NAME, BACKEND, SIMULATED, PROMPT_IDS, UNITS, LOSSLESS_FLOOR, CONFIRMATION, SEED, WORKER_SPEC,
    N_TRIALS, LEVEL_PHASE, BASELINE_CHECK_ROUNDS,
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


class ConfirmationState(TypedDict, total=False):
    """The study attr ``confirmation``: recorded after every round, so that a killed run resumes it."""

    keys: list[str | None]  # the candidates' config keys
    rounds: list[dict[str, Any]]  # {"baseline": {cuda_graph: tok/s}, "candidates": {trial number: tok/s}}
    deploy_cuda_graph: bool | None  # the fastest search baseline's setting
    results: list[dict[str, Any]]  # per candidate: tok/s, intervals (``autotune.study.race.candidate_result``)
    exclusions: list[dict[str, Any]]  # ``find_exclusions``
    best: int | None
    verdict: str
    basis: str  # confirmed | not-confirmed | search
    rests_on: str  # what the verdict rests on, in words
    note: str
    done: bool
    confidence: float  # of the verdict's intervals: the space's, or a stricter one after extra rounds
    # with load levels (``autotune.study.levels``)
    level_results: dict[str, dict[str, Any]]  # per candidate: {level: interval against the same-round baseline}
    level_verdicts: list[dict[str, Any]]  # per level: the best candidate, its interval and the level's verdict
    level_text: str  # "speculation wins up to 8 streams, loses from 32"
    level_only: list[str]  # candidates confirmed for a level's sake (``race.level_only_out``)
    # the search's baseline against confirmation's fresh ones (``autotune.study.baseline_check``)
    baseline_check: list[dict[str, Any]]
    suspect_prunes: list[dict[str, Any]]  # baseline-rule prunes that a fast search baseline may have caused
    check_rounds: list[dict[str, Any]]  # fresh baselines alone, when the search left nothing to confirm


# ---------------------------------------------------------------------------------------------- reading


class TrialRecord:
    """Typed read access to one trial's record (a ``FrozenTrial``, or the running ``optuna.Trial``)."""

    __slots__ = ("trial", "attrs")

    def __init__(self, trial: FrozenTrial | optuna.Trial) -> None:
        self.trial = trial
        self.attrs: dict[str, Any] = trial.user_attrs

    @property
    def role(self) -> str | None:
        return self.attrs.get(ROLE)

    @property
    def is_baseline(self) -> bool:
        """Baseline trials are enqueued with role=baseline (the sampler never proposes them)."""
        return self.attrs.get(ROLE) == ROLE_BASELINE or self.trial.params.get(PARAM_DRAFTER) == BASELINE_DRAFTER

    @property
    def drafter(self) -> Any:
        return self.trial.params.get(PARAM_DRAFTER)

    @property
    def cuda_graph(self) -> Any:
        return self.trial.params.get(PARAM_CUDA_GRAPH)

    @property
    def seeded(self) -> str | None:
        return self.attrs.get(SEEDED)

    @property
    def config(self) -> dict[str, Any] | None:
        return self.attrs.get(CONFIG)

    @property
    def effective(self) -> dict[str, Any] | None:
        return self.attrs.get(EFFECTIVE)

    @property
    def shown_config(self) -> dict[str, Any] | None:
        """The effective config, else the suggested one (a config the server would reject has no effective one)."""
        return self.attrs.get(EFFECTIVE) or self.attrs.get(CONFIG)

    def effective_config(self) -> TrialConfig:
        return TrialConfig.from_dict(self.attrs.get(EFFECTIVE) or {})

    @property
    def config_key(self) -> str | None:
        return self.attrs.get(CONFIG_KEY)

    @property
    def duplicate_of(self) -> int | None:
        return self.attrs.get(DUPLICATE_OF)

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
    def fail_kind(self) -> str | None:
        return self.attrs.get(FAIL_KIND)

    @property
    def fail_reason(self) -> str | None:
        return self.attrs.get(FAIL_REASON)

    @property
    def infeasible(self) -> str | None:
        return self.attrs.get(INFEASIBLE)

    @property
    def feasible(self) -> bool | None:
        return self.attrs.get(FEASIBLE)

    @property
    def prune_reason(self) -> str | None:
        return self.attrs.get(PRUNE_REASON)

    @property
    def speedup_upper(self) -> float | None:
        return self.attrs.get(SPEEDUP_UPPER)

    @property
    def prune_rule(self) -> str | None:
        """``baseline`` or ``leader`` for a trial the pruner stopped (older studies: baseline)."""
        if self.attrs.get(PRUNE_REASON) is None:
            return None
        return self.attrs.get(PRUNE_RULE, "baseline")

    @property
    def pruned_against(self) -> int | None:
        return self.attrs.get(PRUNED_AGAINST)

    @property
    def speedup(self) -> float | None:
        return self.attrs.get(SPEEDUP)

    @property
    def accept_length(self) -> float | None:
        return self.attrs.get(ACCEPT_LENGTH)

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return self.attrs.get(PROMPTS, [])

    @property
    def startup_s(self) -> float | None:
        return self.attrs.get(STARTUP_S)

    @property
    def log_path(self) -> str | None:
        return self.attrs.get(LOG_PATH)

    @property
    def argv(self) -> list[str] | None:
        return self.attrs.get(ARGV)

    @property
    def baseline_trial(self) -> int | None:
        return self.attrs.get(BASELINE_TRIAL)

    @property
    def outputs(self) -> list[str]:
        return self.attrs.get(OUTPUTS, [])

    def references(self) -> list[ReferenceOutput | None]:
        return [ReferenceOutput.from_dict(r) if r else None for r in self.attrs.get(REFERENCE, [])]

    @property
    def lossless(self) -> dict[str, Any] | None:
        return self.attrs.get(LOSSLESS)

    @property
    def levels(self) -> list[dict[str, Any]]:
        """Per-level summaries (empty without load levels)."""
        return self.attrs.get(LEVELS, [])

    def level_tok_per_s(self) -> dict[int, float]:
        return {int(x["level"]): float(x["tok_per_s"]) for x in self.levels}

    @property
    def slo_broken(self) -> list[str]:
        return self.attrs.get(SLO_BROKEN, [])

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

    def server_log(self, tail: str, path: str | None) -> None:
        """The log of a server that did not start."""
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])
        self._set(LOG_PATH, path)

    def log_tail(self, tail: str) -> None:
        self._set(LOG_TAIL, tail[-LOG_TAIL_CHARS:])

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

    def lossless(self, record: dict[str, Any]) -> None:
        self._set(LOSSLESS, record)

    def levels(self, summaries: list[dict[str, Any]]) -> None:
        self._set(LEVELS, summaries)

    def slo_broken(self, levels: list[str]) -> None:
        self._set(SLO_BROKEN, levels)


def enqueue_baseline(study: optuna.Study, cuda_graph: bool) -> None:
    study.enqueue_trial({PARAM_CUDA_GRAPH: cuda_graph}, user_attrs={ROLE: ROLE_BASELINE})


def enqueue_speculative(
    study: optuna.Study, params: dict[str, Any], *, seeded: str | None = None, requeued_from: int | None = None
) -> None:
    attrs: dict[str, Any] = {ROLE: ROLE_SPECULATIVE}
    if seeded is not None:
        attrs[SEEDED] = seeded
    if requeued_from is not None:
        attrs[REQUEUED_FROM] = requeued_from
    study.enqueue_trial(params, user_attrs=attrs)


def enqueue_retry(study: optuna.Study, lost: FrozenTrial, system_attrs: dict[str, Any]) -> None:
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


def trials(study: optuna.Study, states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=states)


def is_baseline_trial(t: FrozenTrial) -> bool:
    """Baseline trials are enqueued with user attr role=baseline (the sampler never proposes them)."""
    return TrialRecord(t).is_baseline


def find_baseline(study: optuna.Study, cuda_graph: object) -> FrozenTrial | None:
    """The measured baseline trial (not a duplicate) for a CUDA-graph setting, or None."""
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline and r.cuda_graph == cuda_graph and not r.is_duplicate and t.intermediate_values:
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


def disengaged(study: optuna.Study, config: TrialConfig, among: list[FrozenTrial] | None = None) -> FrozenTrial | None:
    """A failed trial whose drafter (``config``'s) was found not engaged."""
    for t in trials(study, (TrialState.FAIL,)) if among is None else among:
        r = TrialRecord(t)
        if t.state == TrialState.FAIL and r.fail_kind == DrafterNotEngaged.kind and r.drafter == config.drafter:
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


def find_exclusions(study: optuna.Study) -> list[dict[str, Any]]:
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
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for t in everything:
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or r.interrupted:
            continue
        cfg = r.shown_config
        if t.state == TrialState.COMPLETE and r.lossy:
            out.append(
                {
                    "trial": t.number,
                    "kind": "lossy",
                    "config": cfg,
                    "speedup": r.speedup,
                    "reason": "output differs from the baseline's where the baseline was confident: "
                    + lossless.summary_line(r.lossless),  # type: ignore[arg-type]
                }
            )
        elif t.state == TrialState.FAIL and r.fail_kind == DrafterNotEngaged.kind:
            key = f"drafter:{r.drafter}"
            if key not in seen:
                seen.add(key)
                out.append({"trial": t.number, "kind": "not-engaged", "config": cfg, "reason": r.fail_reason})
        elif (
            t.state == TrialState.FAIL
            and r.fail_kind in (*RETRIED_FAILURES, CONFIG_MISMATCH)
            and r.config_key not in measured
        ):
            key = f"config:{r.config_key}"
            if key not in seen:
                seen.add(key)
                out.append(
                    {"trial": t.number, "kind": "failed", "config": cfg, "reason": f"{r.fail_kind}: {r.fail_reason}"}
                )
    return out


# ---------------------------------------------------------------------------------------------- study attrs


def lossless_floor(study: optuna.Study) -> list[dict[str, Any]]:
    """The divergences found between baselines (and each baseline compared: ``{"checked": True}``)."""
    return list(study.user_attrs.get(LOSSLESS_FLOOR, []))


def set_lossless_floor(study: optuna.Study, floor: list[dict[str, Any]]) -> None:
    study.set_user_attr(LOSSLESS_FLOOR, floor)


def level_phase(study: optuna.Study) -> dict[str, Any]:
    """With load levels: how far the phase after the search got (``rounds`` of per-level picks, ``ladder`` done)."""
    return dict(study.user_attrs.get(LEVEL_PHASE) or {})


def set_level_phase(study: optuna.Study, state: dict[str, Any]) -> None:
    study.set_user_attr(LEVEL_PHASE, state)


def baseline_check_rounds(study: optuna.Study) -> list[dict[str, Any]]:
    """Rounds of fresh baselines alone, measured when the search left nothing to confirm (so that "the baseline
    wins" does not rest on a single baseline start); ``autotune.study.baseline_check``."""
    return list(study.user_attrs.get(BASELINE_CHECK_ROUNDS) or [])


def set_baseline_check_rounds(study: optuna.Study, rounds: list[dict[str, Any]]) -> None:
    study.set_user_attr(BASELINE_CHECK_ROUNDS, rounds)


def confirmation(study: optuna.Study) -> ConfirmationState | None:
    return study.user_attrs.get(CONFIRMATION)


def set_confirmation(study: optuna.Study, state: ConfirmationState) -> None:
    study.set_user_attr(CONFIRMATION, state)


def reopen_confirmation(study: optuna.Study) -> None:
    """Mark a recorded confirmation not done, so that it is run again (``autotune confirm``)."""
    prev = confirmation(study)
    if prev:
        set_confirmation(study, {**prev, "done": False})


def label_study(
    study: optuna.Study,
    *,
    digest: str,
    space_name: str,
    backend: str,
    simulated: bool,
    label: dict[str, Any] | None,
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
    """The seed of the search's design: the study's ``--seed``, else derived from its name (stable per study)."""
    seed = study.user_attrs.get(SEED)
    if isinstance(seed, int):
        return seed
    return int.from_bytes(hashlib.sha256(study.study_name.encode()).digest()[:4], "little")


def worker_spec(study: optuna.Study) -> dict[str, Any] | None:
    return study.user_attrs.get(WORKER_SPEC)


def set_worker_spec(study: optuna.Study, spec: dict[str, Any]) -> None:
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


def level_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """Measured speculative trials with load levels, as ``autotune.schedule.build`` reads them."""
    out = []
    for t in trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline or r.is_duplicate or not r.levels:
            continue
        out.append({"trial": t.number, "config": r.effective, "levels": r.levels, "lossy": r.lossy})
    return out


def confirmed_level_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The confirmed candidates' per-level speedups (interval points) as ``autotune.schedule.build`` reads them;
    [] without a per-level confirmation. Latency limits broken in the search still count."""
    conf = confirmation(study) or {}
    per = conf.get("level_results") or {}
    out = []
    for number, ivs in per.items():
        t = next((x for x in trials(study) if x.number == int(number)), None)
        if t is None:
            continue
        r = TrialRecord(t)
        broken = {int(x["level"]): x.get("slo_broken") for x in r.levels}
        levels = [
            {"level": int(c), "speedup": iv["point"], "slo_broken": broken.get(int(c)) or []}
            for c, iv in ivs.items()
            if iv
        ]
        out.append({"trial": t.number, "config": r.effective, "levels": levels, "lossy": r.lossy})
    return out

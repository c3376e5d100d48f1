"""The record's schema: what a study stores about each trial (Optuna user attrs), and the queries over trials.

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
| ``levels`` | each level | with load levels: ``LevelResult.summary()`` per level so far, ``speedup``, ``slo_broken`` |
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
``verdict`` / ``recommended`` (written by ``autotune dashboard`` for optuna-dashboard: the verdict, and the trial
autotune recommends with rounded figures; ``autotune.evidence.publish``), ``methods`` (a space with
``search.methods``: its method catalogue, each method's label and availability; ``autotune.study.methods.record``),
``traffic`` (a request-log space: the subset, its comparison with the log and the guards; ``autotune.traffic``),
``traffic_holdout`` (the subset's baseline tok/s against a holdout from the rest of the log, measured on the first
baseline's start: ``autotune.traffic.HoldoutCheck``), ``traffic_acceptance`` (the confirmed winner's acceptance on
the subset against the holdout, the holdout measured on the winner's one more start after confirmation:
``autotune.traffic.AcceptanceCheck``), ``greedy_lossless`` (a space whose prompts sample: the
confirmed winner's answers at temperature 0 against its baseline's references; ``autotune.study.greedy``),
``drafter_references`` (the acceptance length each drafter reaches elsewhere, as the space gives it: the report's
``acceptance-far-below`` guard; set at every open, so the space's current values).
"""

from __future__ import annotations

from optuna.trial import TrialState

from autotune.errors import BenchmarkError, LaunchError, ServerDied, ServerExited, StartupTimeout

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
#: a proposal not launched: the surrogate gave it too little chance of reaching the best measured config
#: (``search.not_worth_a_start``): {"p", "against", "tok_per_s", "predicted", "sd", "reason"}
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
#: the search stopped before its budget because its answer was settled (``autotune.study.settle``)
SEARCH_SETTLED = "search_settled"
VERDICT = "verdict"
METHODS = "methods"
#: a request-log space's subset and guards (``autotune.traffic``), as the study recorded it
TRAFFIC = "traffic"
#: the baseline's tok/s on the subset against a sample of the rest of the log (``autotune.traffic.HoldoutCheck``,
#: its per-prompt figures and the baseline trial), written once, by the first baseline that measures the holdout
TRAFFIC_HOLDOUT = "traffic_holdout"
#: the confirmed winner's accepted draft tokens a round on the subset against the holdout
#: (``autotune.traffic.AcceptanceCheck``, its per-request acceptance lengths), written after confirmation
TRAFFIC_ACCEPTANCE = "traffic_acceptance"
#: a sampling space's lossless check at temperature 0: confirmation's winner against its baseline's references
#: (``autotune.study.greedy``)
GREEDY_LOSSLESS = "greedy_lossless"
#: the drafters' reference acceptance lengths the space gives (``drafters[].reference_acceptance``), by name
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
    N_TRIALS, LEVEL_PHASE, BASELINE_CHECK_ROUNDS, VERDICT, RECOMMENDED, METHODS, TRAFFIC, TRAFFIC_HOLDOUT,
    TRAFFIC_ACCEPTANCE, GREEDY_LOSSLESS, DRAFTER_REFERENCES,
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

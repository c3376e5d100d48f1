"""One trial: Optuna's objective, from the suggestion to its outcome.

The steps (resolve, the checks that refuse a launch, launch, the config check, the prompts with the zero-acceptance
alarm and pruning, the reference answers, the lossless record, the speedup) raise when the trial ends early;
``TrialObjective.__call__`` is the one place that settles the outcome, as ``optuna.study._optimize._run_trial`` does one
level up: it records the reason, announces the trial's end (one ``trial-end`` event) and hands Optuna its vocabulary.

What a step raises            outcome   recorded
- (a value returned)          COMPLETE  speedup, lossless record, ...
- ``Infeasible``              PRUNED    ``fail_kind`` (``infeasible`` or ``oom``), ``infeasible``, constraint feasible=1
- ``Lost``                    PRUNED    ``prune_reason``, ``speedup_upper``, ``prune_rule`` (baseline|leader),
                                        ``pruned_against``
- ``SameAsPruned``            PRUNED    (a duplicate of a pruned trial; its constraint too)
- ``NotWorthAStart``          PRUNED    ``not_worth_a_start`` (the search's gate: not launched, no value)
- ``LaunchError``             FAIL      ``fail_kind``, ``fail_reason``, the server's log; the baseline's, or the third
                                        in a row before any speculative config ran, stops the study (``UserError``)
- ``NotLaunched``             FAIL      ``fail_kind`` of the earlier failures, ``not_launched``
- ``BenchmarkError``          FAIL      ``fail_kind``, ``fail_reason``, the log tail it carries
- ``DrafterNotEngaged``       FAIL      ``fail_kind``, ``fail_reason``
- ``KeyboardInterrupt``       FAIL      ``interrupted`` (it does not use the budget; the config is queued again)
- ``Requeued``                FAIL      ``interrupted``, ``fail_reason``: its baseline is measured by nobody right
                                        now (another worker was lost during it); the config is queued again
- ``UserError``               FAIL      ``interrupted``, ``fail_kind`` ``bad-input``, ``fail_reason`` (bad input found
                                        at launch, e.g. the port taken since the check); the study stops, exit 2

Parallel workers: a trial whose server config another worker is measuring waits for that measurement and copies
it (a duplicate); a speculative trial whose baseline another worker is still measuring starts its server, then
waits for the baseline before its first prompt.

Configs not launched because of what earlier trials showed (``refuse_known_failures``, called by
``TrialObjective`` before every launch): each refusal is a FAIL or PRUNED trial with its reason and no server start.

- the same server config failed twice (one retry covers transient faults), or crashed on every start (unstable);
- a family (drafter and method, under one CUDA-graph setting) that never started: ``NEVER_STARTED`` launches of
  it failed at start-up and none started; or never served: ``NEVER_SERVED`` of its configs crashed on every start
  (unstable) and none of them was measured to the end. An incompatible drafter checkpoint fails every config of
  it, and each failed start holds the GPUs until it fails;
- the drafter was not engaged (where the server's not-engaged is per drafter);
- a tree at least as large ran out of memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import lossless, objective, records
from autotune.config import LaunchInfo, LevelResult, LevelSummary, PromptResult, ReferenceOutput, TrialConfig, summarize
from autotune.errors import (
    BenchmarkError,
    DrafterNotEngaged,
    InfeasibleConfig,
    LaunchError,
    ServerOOM,
    Unstable,
    UserError,
    server_seconds,
)
from autotune.errors import crash_line as _crash_line
from autotune.errors import is_crash as _crash
from autotune.measure import run_levels, run_prompts, warmup_rule, with_fresh_starts
from autotune.records import TrialRecord, TrialWriter
from autotune.seam import Session
from autotune.study import _optuna
from autotune.study.context import Event, StudyContext, idle, trial_limit_s
from autotune.study.outcomes import (
    FAILURES,
    Infeasible,
    Lost,
    NotLaunched,
    NotWorthAStart,
    Pruned,
    Requeued,
    SameAsPruned,
)
from autotune.study.storage import study_lock
from autotune.warmup import WarmUp

WORKER = f"{socket.gethostname()}:{os.getpid()}"
#: the search's launch gate: (effective config, the trial's ``seeded``) -> why not to launch it, or None
Gate = Callable[[TrialConfig, str | None], records.Skip | None]
#: what a ``level`` event carries (the live view shows it)
LEVEL_EVENT_KEYS = ("level", "tok_per_s", "speedup", "stream_tok_per_s", "itl_p99_ms", "ttft_p99_ms", "failed")
#: this many servers in a row that did not start (before any speculative config ran) stop the study with a
#: ``UserError`` (``TrialObjective._fatal``)
MAX_CONSECUTIVE_LAUNCH_FAILURES = 3


def _record(trial: optuna.Trial) -> TrialRecord:
    """The running trial's record, read without Optuna's deep copy of its user attrs (``_optuna.live_attrs``)."""
    return TrialRecord(trial, _optuna.live_attrs(trial))


@dataclass
class _Trial:
    """One trial while it runs."""

    trial: optuna.Trial
    record: TrialWriter
    config: TrialConfig | None = None  # the effective config, once resolved
    launched: bool = False  # runner.launch was called
    results: list[PromptResult] | None = None  # the prompts measured so far (for the trial's evidence)
    levels: list[LevelResult] = field(default_factory=list)  # the load levels measured so far (level 1 first)
    start_s: float | None = None  # the current start's server seconds not in its timed figures (None: no own start)
    failed: list[records.FailedStart] = field(default_factory=list)  # its failed starts

    def lost(self, kind: str, seconds: float) -> None:
        """A start that held the machine without giving this trial its figures: on record, and billed."""
        self.failed.append(records.FailedStart(kind, round(seconds, 3)))
        self.record.failed_starts(self.failed)

    @property
    def number(self) -> int:
        return self.trial.number


# ---------------------------------------------------------------------------------------------- the objective


class TrialObjective:
    """Optuna's objective for the study of ``ctx``: tok/s over the prompt set (see the module's outcome table)."""

    def __init__(self, ctx: StudyContext, gate: Gate | None = None) -> None:
        self.ctx = ctx
        self.size_knob = ctx.backend.size_knob
        self.gate = gate

    def __call__(self, trial: optuna.Trial) -> float:
        t = _Trial(trial, TrialWriter(trial))
        try:
            value, end = self._run(t)
        except KeyboardInterrupt:
            self._interrupted(t)
            raise
        except Pruned as e:
            self._pruned(t, e)
            raise
        except Requeued as e:
            t.record.failed(None, str(e))
            self._interrupted(t)
            self._end(t, {"state": TrialState.FAIL.name, "reason": str(e)})
            raise
        except UserError as e:  # bad input found at launch (a port taken since the check): not the config's fault
            t.record.failed("bad-input", str(e))
            self._interrupted(t)
            self._end(t, {"state": TrialState.FAIL.name, "reason": f"not run: {e}"})
            raise
        except FAILURES as e:
            self._failed(t, e)
            fatal = self._fatal(t, e)
            if fatal is not None:
                raise fatal from e
            raise
        self._end(t, end)
        return value

    # -- outcomes -------------------------------------------------------------------------------------
    def _end(self, t: _Trial, data: dict[str, object]) -> None:
        self._evidence(t, data)
        r = _record(t.trial)
        # what the live view counts apart: a place in the budget used, a copy of a measured config (no start, no
        # budget), a config the launch gate kept from a start (its place used, no start), the phase it ran for
        data = {
            **data,
            "budget": not r.interrupted and not r.is_duplicate,
            "duplicate": r.is_duplicate,
            "not_launched": r.not_worth_a_start is not None,
            "seeded": r.seeded,
        }
        self.ctx.emit(Event("trial-end", t.number, data))

    def _evidence(self, t: _Trial, data: dict[str, object]) -> None:
        """The trial's log, per-prompt results and note for the dashboard (``autotune.evidence``), while it runs."""
        evidence = self.ctx.evidence
        if evidence is None:
            return
        results = t.results or _record(t.trial).prompt_results()  # a duplicate: copied
        cg = t.config.cuda_graph if t.config is not None else None
        base = None if t.config is None or t.config.is_baseline else records.find_baseline(self.ctx.study, cg)
        per_prompt = [] if base is None else [base.intermediate_values[s] for s in sorted(base.intermediate_values)]
        try:
            evidence.attach(
                t.trial,
                _optuna.live_attrs(t.trial),
                data,
                results,
                [p.id for p in self.ctx.space.benchmark.prompts],
                per_prompt,
            )
        except OSError as e:  # evidence is for review: a full disk must not lose the measurement
            self.ctx.emit(Event("note", t.number, {"message": f"trial evidence not written: {e}"}))

    def _pruned(self, t: _Trial, e: Pruned) -> None:
        if isinstance(e, Infeasible):
            if e.launch_error is not None:
                t.record.server_log(e.launch_error.log_tail, e.launch_error.log_path)
            t.record.infeasible(e.kind, e.reason)
        elif isinstance(e, Lost):
            t.record.pruned(e.reason, e.upper, e.rule, e.against)
        elif isinstance(e, NotWorthAStart):
            t.record.not_worth_a_start(e.skip)
        if e.infeasible:
            t.trial.set_constraint(records.CONSTRAINT_FEASIBLE, 1.0)
        self._end(t, e.event())

    def _failed(self, t: _Trial, e: Exception) -> None:
        t.record.failed(getattr(e, "kind", None), str(e), not_launched=isinstance(e, NotLaunched))
        if isinstance(e, LaunchError):
            t.record.server_log(e.log_tail, e.log_path)
        elif tail := getattr(e, "log_tail", ""):
            t.record.log_tail(tail)
        self._end(t, {"state": TrialState.FAIL.name, "reason": str(e)})

    def _fatal(self, t: _Trial, e: Exception) -> UserError | None:
        """A failure that stops the study: the baseline did not start (nothing can be compared), or the third
        server in a row did not start before any speculative config ran."""
        if not (isinstance(e, LaunchError) and t.launched and t.config is not None):
            return None
        if t.config.is_baseline:
            return UserError(
                f"the baseline server ({t.config.label()}) did not start: {e}\n"
                f"last lines of its log ({e.log_path}):\n{e.log_tail[-1500:]}"
            )
        limit = MAX_CONSECUTIVE_LAUNCH_FAILURES
        if records.consecutive_launch_failures(self.ctx.study) + 1 >= limit:
            return UserError(f"{limit} servers in a row failed to start; the last: {e}\nlog: {e.log_path}")
        return None

    def _interrupted(self, t: _Trial) -> None:
        """The server was stopped by the session's close(); the trial does not use the budget and its config is
        measured again when the study resumes."""
        t.record.interrupted()
        if _record(t.trial).role != records.ROLE_BASELINE:
            seeded = _record(t.trial).seeded  # a level's pick stays one (``ladder``: its phase runs it)
            records.enqueue_speculative(self.ctx.study, dict(t.trial.params), seeded=seeded, requeued_from=t.number)

    # -- the steps ------------------------------------------------------------------------------------
    def _run(self, t: _Trial) -> tuple[float, dict[str, object]]:
        ctx = self.ctx
        config = self._suggest(t.trial)
        t.record.started(config, WORKER)
        ctx.emit(Event("trial-start", t.number, {"config": config.label()}))
        try:
            eff = ctx.backend.resolve(config, ctx.space)
        except InfeasibleConfig as e:
            raise Infeasible(str(e)) from e
        t.record.resolved(eff)
        t.config = eff
        with records.reading(ctx.study):  # the checks read one snapshot; a wait for another worker reads afresh
            dup = records.find_duplicate(ctx.study, eff.key(), t.number)
            other = None if dup is not None else records.running_same_config(ctx.study, eff.key(), t.number)
            baseline = self._refusals(t, eff) if dup is None and other is None else None
        if other is not None and self._await_same_config(t, eff, other):
            dup = records.find_duplicate(ctx.study, eff.key(), t.number)
        if dup is not None:
            return self._reuse(t, dup)
        if other is not None:  # its outcome came and was no duplicate (a failure), or the wait ran out
            with records.reading(ctx.study):
                baseline = self._refusals(t, eff)
        return self._measure(t, eff, baseline)  # outside the snapshot: a wait for another worker reads afresh

    def _refusals(self, t: _Trial, eff: TrialConfig) -> FrozenTrial | None:
        """The refusal rules (raising what refuses the config), then the config's baseline if it needs one."""
        refuse_known_failures(self.ctx.study, eff, self.ctx.backend, self.size_knob)
        self._refuse_hopeless(t, eff)
        return None if eff.is_baseline else records.find_baseline(self.ctx.study, eff.cuda_graph)

    def _await_same_config(self, t: _Trial, eff: TrialConfig, other: FrozenTrial) -> bool:
        """Another worker is measuring this server config now (trial ``other``): wait for its outcome (True when
        one came; a lost worker's trial is failed by its heartbeat) rather than measure it twice."""
        self.ctx.emit(Event("note", t.number, {"message": f"same server config as running trial {other.number}"}))
        start = self.ctx.clock.now()
        while self.ctx.clock.now() - start < trial_limit_s(self.ctx):
            idle(self.ctx)
            if records.running_same_config(self.ctx.study, eff.key(), t.number) is None:
                return True
        return False

    def _await_baseline(self, t: _Trial, config: TrialConfig) -> FrozenTrial | None:
        """The baseline of ``config``'s CUDA-graph setting, waiting while another worker measures it. None when
        the study has none (a single worker always measures its baselines first)."""
        ctx = self.ctx
        start = ctx.clock.now()
        while True:
            found = records.find_baseline(ctx.study, config.cuda_graph)
            if found is not None:
                return found
            tries = _baselines_of(ctx.study, config.cuda_graph)
            if not tries:
                return None
            if any(b.state == TrialState.COMPLETE for b in tries):  # it ended between the two reads
                found = records.find_baseline(ctx.study, config.cuda_graph)
                if found is not None:
                    return found
            if not any(b.state == TrialState.RUNNING for b in tries):
                if any(b.state == TrialState.WAITING for b in tries):
                    raise Requeued(f"the baseline of cuda_graph={config.cuda_graph} is queued, not measured yet")
                last = tries[-1]
                if TrialRecord(last).interrupted or records.is_lost(last):  # its worker stopped: queue it again
                    with study_lock(ctx.study):
                        if not any(b.state == TrialState.WAITING for b in _baselines_of(ctx.study, config.cuda_graph)):
                            records.enqueue_baseline(ctx.study, config.cuda_graph)
                    raise Requeued(f"the baseline of cuda_graph={config.cuda_graph} was interrupted; queued again")
                if last.state == TrialState.FAIL:  # its server did not start: that worker stopped the study
                    raise UserError(
                        f"the baseline of cuda_graph={config.cuda_graph} (trial {last.number}) failed: "
                        f"{TrialRecord(last).fail_reason}"
                    )
                return None
            if ctx.clock.now() - start > trial_limit_s(ctx):
                raise Requeued(f"the baseline of cuda_graph={config.cuda_graph} took too long")
            idle(ctx)

    def _suggest(self, trial: optuna.Trial) -> TrialConfig:
        space = self.ctx.space
        if _record(trial).role == records.ROLE_BASELINE:
            cg = trial.suggest_categorical(records.PARAM_CUDA_GRAPH, list(space.search.cuda_graph))
            return TrialConfig.baseline(bool(cg))
        return self.ctx.backend.suggest(trial, space)

    def _reuse(self, t: _Trial, dup: FrozenTrial) -> tuple[float, dict[str, object]]:
        """A config whose server config was already measured copies that measurement (no start, no budget)."""
        t.record.duplicate(dup)
        for step, v in sorted(dup.intermediate_values.items()):
            t.trial.report(v, step)
        if dup.state == TrialState.PRUNED:
            raise SameAsPruned(dup)
        end: dict[str, object] = {
            "state": dup.state.name,
            "reason": f"same server config as trial {dup.number}",
            "tok_per_s": dup.value,
        }
        assert dup.value is not None  # a COMPLETE trial has its value
        return float(dup.value), end

    def _refuse_hopeless(self, t: _Trial, eff: TrialConfig) -> None:
        """A proposal the search's ``gate`` finds not worth a server start (``search.not_worth_a_start``)."""
        r = _record(t.trial)
        if self.gate is None or r.attrs.get(records.REQUEUED_FROM) is not None:
            return
        skip = self.gate(eff, r.seeded)
        if skip is not None:
            raise NotWorthAStart(skip)

    def _measure(self, t: _Trial, config: TrialConfig, baseline: FrozenTrial | None) -> tuple[float, dict[str, object]]:
        """Launch, check, prompts, (references,) levels. A server that crashes (killed by a signal at start-up,
        or dying while it serves) gets one fresh start that goes on from what the first measured
        (``measure.with_fresh_starts``); a second crash ends the trial as ``unstable``, with both log lines."""

        def retry(e: Exception, crashes: list[Exception]) -> None:
            t.record.crashes([_crash_line(x) for x in crashes])
            if t.start_s is not None:  # its prompts are kept; its start-up is lost
                t.lost(getattr(e, "kind", ""), t.start_s)
            self.ctx.emit(Event("note", t.number, {"message": f"server crashed ({_crash_line(e)}); one fresh start"}))

        def give_up(crashes: list[Exception]) -> Unstable:
            lines = [_crash_line(x) for x in crashes]
            t.record.crashes(lines)
            e = crashes[-1]
            return Unstable(
                f"the server crashed on {len(lines)} starts of this config: " + " | ".join(lines),
                log_tail=getattr(e, "log_tail", ""),
                log_path=getattr(e, "log_path", None),
            )

        return with_fresh_starts(
            lambda: self._measure_once(t, config, baseline), retried=_crash, on_retry=retry, give_up=give_up
        )

    def _measure_once(
        self, t: _Trial, config: TrialConfig, baseline: FrozenTrial | None
    ) -> tuple[float, dict[str, object]]:
        ctx = self.ctx
        session = self._launch(t, config)
        with contextlib.closing(session):
            if baseline is None and not config.is_baseline:  # another worker measures it: start-ups overlap
                baseline = self._await_baseline(t, config)
            if baseline is not None:
                t.record.baseline_trial(baseline.number)
            self._check_config(t, config, session.info)
            n = len(ctx.space.benchmark.prompts)
            on_prompt = functools.partial(self._after_prompt, t, config, baseline, n)
            alarm = self._alarm if not config.is_baseline and ctx.backend.checks_engagement(config) else None
            # the pruner's decision after each prompt reads the study as it was when the prompts began (another
            # worker's trial ending meanwhile is seen from the next trial on): one storage read, not one a prompt
            with records.reading(ctx.study):
                results = run_prompts(
                    session,
                    n,
                    on_prompt=on_prompt,
                    done=t.results or (),
                    warmup=warmup_rule(ctx.space),
                    on_warmup=functools.partial(self._warmed, t),
                    check_first=alarm,
                )
            if config.is_baseline:  # greedy answers: the lossless check's, sampling spaces' too (``study.winner``)
                t.record.references(self._references(session, n))
            if config.is_baseline and ctx.space.benchmark.holdout and records.traffic_holdout(ctx.study) is None:
                self._holdout(t, session, results)
            levels = None
            if ctx.space.benchmark.loaded:
                on_level = functools.partial(self._after_level, t, config, baseline)
                levels = run_levels(session, ctx.space, results, on_level=on_level, done=t.levels[1:])
        return self._complete(t, config, baseline, results, levels)

    def _level_summaries(self, levels: list[LevelResult], baseline: FrozenTrial | None) -> list[LevelSummary]:
        """Each level's figures, its speedup over the baseline's same level and the latency limits it breaks."""
        base = TrialRecord(baseline).level_tok_per_s() if baseline is not None else {}
        out = []
        for lv in levels:
            s, b = lv.summary(), base.get(lv.level)
            speedup = s.tok_per_s / b if b and s.tok_per_s > 0 else None
            out.append(
                replace(s, speedup=speedup, slo_broken=tuple(objective.slo_broken(s, self.ctx.space.objective.slo)))
            )
        return out

    def _after_level(
        self,
        t: _Trial,
        config: TrialConfig,
        baseline: FrozenTrial | None,
        lv: LevelResult,
        levels: list[LevelResult],
    ) -> None:
        """Report the level's prompts as pruning steps (prompts x levels), record every level so far, and prune
        before the last level once the objective's upper bound is below 1."""
        obj = self.ctx.objective
        for i, v in lv.per_prompt_tok_per_s().items():
            t.trial.report(v, obj.step(lv.level, i))
        t.levels = list(levels)
        summaries = self._level_summaries(levels, baseline)
        t.record.levels(summaries)
        self.ctx.emit(Event("level", t.number, {k: getattr(summaries[-1], k) for k in LEVEL_EVENT_KEYS}))
        if baseline is not None and lv.level != obj.levels[-1] and t.trial.should_prune():
            d = self.ctx.pruner.decide(self.ctx.study, _optuna.latest(t.trial))
            raise Lost(d.reason if d else "pruned", d.upper_bound if d else None)

    def _launch(self, t: _Trial, config: TrialConfig) -> Session:
        t.launched, t.start_s = True, None
        try:
            session = self.ctx.runner.launch(config)
        except LaunchError as e:
            t.lost(e.kind, server_seconds(e))
            if isinstance(e, ServerOOM):
                raise Infeasible(f"out of memory at startup: {e}", kind=ServerOOM.kind, launch_error=e) from e
            raise
        t.start_s = session.info.startup_s
        return session

    @staticmethod
    def _warmed(t: _Trial, w: WarmUp) -> None:
        t.record.warmup(w)
        if t.start_s is not None:
            t.start_s += w.seconds

    def _check_config(self, t: _Trial, config: TrialConfig, info: LaunchInfo) -> None:
        """Record the launch; a server that runs something else than what was asked is never recorded under the
        wrong config (BenchmarkError)."""
        t.record.launched(info)
        if info.effective:
            effective = self.ctx.backend.settings(info.effective)  # read, or the raw server info read now
            mismatch = self.ctx.backend.check_effective(config, effective)
            if mismatch:
                raise BenchmarkError("the server resolved a different config than launched: " + "; ".join(mismatch))
        t.record.measuring(info)
        self.ctx.emit(Event("launched", t.number, {"startup_s": info.startup_s}))

    def _after_prompt(
        self,
        t: _Trial,
        config: TrialConfig,
        baseline: FrozenTrial | None,
        n: int,
        i: int,
        r: PromptResult,
        results: list[PromptResult],
    ) -> None:
        t.trial.report(r.tok_per_s, i)
        t.record.prompts(results)
        t.results = results
        self.ctx.emit(
            Event("prompt", t.number, {"index": i, "of": n, "tok_per_s": r.tok_per_s, "accept_length": r.accept_length})
        )
        if i == 0 and not config.is_baseline and self.ctx.backend.checks_engagement(config):
            self._alarm(r)
        if baseline is not None and i < n - 1 and self.ctx.pruner.enabled:
            # one decision per prompt, with its numbers (the study's pruner is the same rule: Optuna's
            # should_prune() would compute it a second time)
            d = self.ctx.pruner.decide(self.ctx.study, _optuna.latest(t.trial))
            if d is not None and d.prune:
                self._record_speedup(t, results, baseline, self.ctx.objective)
                raise Lost(d.reason, d.upper_bound, d.rule, d.against)

    def _alarm(self, first: PromptResult) -> None:
        """Acceptance at ~1.0 after the first prompt (of the warm-up passes, where the start has them): the drafter
        does nothing (wrong algorithm, wrong target)."""
        acc = first.accept_length
        if acc is not None and acc <= self.ctx.space.pruning.zero_accept_max:
            raise DrafterNotEngaged(
                f"acceptance length {acc:.2f} after the first prompt: the drafter is not engaged; "
                f"{self.ctx.backend.not_engaged_hint}"
            )

    def _holdout(self, t: _Trial, session: Session, results: list[PromptResult]) -> None:
        """The holdout requests of a request-log space (``benchmark.holdout``) on this baseline's server after its
        timed prompts, and the subset's tok/s against theirs (``traffic.holdout_check``), recorded once for the
        study and said at once, before the search spends its budget. A request that fails leaves the check out
        (the baseline's measurement stands)."""
        from autotune.traffic import holdout_check

        ctx = self.ctx
        n = len(ctx.space.benchmark.prompts)
        try:
            rest = [session.run_prompt(n + j).tok_per_s for j in range(len(ctx.space.benchmark.holdout))]
        except BenchmarkError as e:
            ctx.emit(Event("note", t.number, {"message": f"holdout check not measured: {e}"}))
            return
        subset = [r.tok_per_s for r in results]
        check = holdout_check(subset, rest, ctx.space.verdict.min_gain)
        if check is None:
            return
        records.set_traffic_holdout(ctx.study, {"trial": t.number, "subset": subset, "rest": rest, **check.to_dict()})
        ctx.emit(Event("note", t.number, {"message": "traffic: " + check.text()}))

    def _references(self, session: Session, n: int) -> list[ReferenceOutput | None]:
        """The baseline's reference answers (top tokens per position), one non-timed request per prompt; a
        server without log-probabilities gives None for each (then the check falls back to the matching prefix)."""
        out: list[ReferenceOutput | None] = []
        for i in range(n):
            try:
                r = session.reference(i, lossless.REFERENCE_TOP_N)
            except BenchmarkError as e:  # the measurement stands; the check falls back to the matching prefix
                self.ctx.emit(Event("note", data={"message": f"no reference answer for prompt {i}: {e}"}))
                r = None
            out.append(r)
            if r is None:  # the server gives none: do not ask again for every prompt
                return out + [None] * (n - i - 1)
        return out

    def _complete(
        self,
        t: _Trial,
        config: TrialConfig,
        baseline: FrozenTrial | None,
        results: list[PromptResult],
        levels: list[LevelResult] | None = None,
    ) -> tuple[float, dict[str, object]]:
        ctx = self.ctx
        summary = summarize(results)
        t.record.measured(summary["accept_length"])
        texts = [r.text for r in results]
        if config.is_baseline:
            t.record.outputs(texts)
            if ctx.space.benchmark.greedy:
                ctx.baseline_floor(t.number, config, texts)
        else:
            self._record_speedup(t, results, baseline, ctx.objective)
            if baseline is not None and ctx.space.benchmark.greedy:
                check = ctx.lossless_record(texts, baseline)
                t.record.lossless(check)
                if not check["ok"]:
                    ctx.emit(Event("note", t.number, {"message": "lossy: " + lossless.summary_line(check)}))
        value = ctx.objective.value(results, levels or ())
        end = {
            "state": TrialState.COMPLETE.name,
            "tok_per_s": value,
            "speedup": speedup_of(results, baseline, ctx.objective),
        }
        if levels is not None:
            end = self._complete_levels(t, baseline, levels, value, end)
        return value, end

    def _complete_levels(
        self,
        t: _Trial,
        baseline: FrozenTrial | None,
        levels: list[LevelResult],
        value: float,
        end: dict[str, object],
    ) -> dict[str, object]:
        """With load levels: the speedup is the objective's over the baseline's; levels breaking a latency limit
        make the ``slo`` constraint positive (the sampler ranks the config after feasible ones)."""
        t.levels = list(levels)
        summaries = self._level_summaries(levels, baseline)
        t.record.levels(summaries)
        broken = [str(s.level) for s in summaries if s.slo_broken]
        t.record.slo_broken(broken)
        if broken:
            t.trial.set_constraint(records.CONSTRAINT_SLO, float(len(broken)))
        speedup = None
        if baseline is not None and baseline.value:
            speedup = value / float(baseline.value)
            t.record.speedup(speedup)
        return {**end, "tok_per_s": value, "speedup": speedup, "slo_broken": broken}

    @staticmethod
    def _record_speedup(
        t: _Trial, results: list[PromptResult], baseline: FrozenTrial | None, obj: objective.Objective
    ) -> None:
        s = speedup_of(results, baseline, obj)
        if s is not None:
            t.record.speedup(s)


def _baselines_of(study: optuna.Study, cuda_graph: object) -> list[FrozenTrial]:
    """Every baseline trial of a CUDA-graph setting, queued ones included (any state), oldest first."""
    return [
        t
        for t in records.trials(study)
        if TrialRecord(t).is_baseline and _optuna.params_of(t).get(records.PARAM_CUDA_GRAPH) == cuda_graph
    ]


def speedup_of(results: list[PromptResult], baseline: FrozenTrial | None, obj: objective.Objective) -> float | None:
    """A one-stream start's speedup over its baseline's prompts (``Objective.speedup``)."""
    if baseline is None or not results:
        return None
    return obj.speedup(results, TrialRecord(baseline).prompt_results())


#: failed starts of one family, none of which started, after which its configs are not launched
NEVER_STARTED = 3
#: configs of one family that crashed on every start (unstable), none of the family measured to the end, after
#: which its configs are not launched (each of them cost two starts)
NEVER_SERVED = 2


def family(cfg: TrialConfig) -> tuple[Any, ...]:
    """What fails to start together: the drafter, the method, the CUDA-graph setting (graph capture can fail where
    the same drafter starts without graphs)."""
    return cfg.drafter, cfg.knob(records.PARAM_METHOD), bool(cfg.cuda_graph)


def _family_of(r: TrialRecord) -> tuple[Any, ...]:
    return r.drafter, r.method, bool(r.cuda_graph)


def _numbers(trials: list[FrozenTrial]) -> str:
    return ", ".join(str(t.number) for t in trials)


def never_started(family_trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of one family's launched trials (``family_trials``), those that failed to start, when there are
    ``NEVER_STARTED`` of them and no start of the family ever got healthy; else []."""
    failed = []
    for t in family_trials:
        r = TrialRecord(t)
        if r.measured or r.startup_s is not None:
            return []
        if r.fail_kind in records.START_FAILURES:
            failed.append(t)
    return failed if len(failed) >= NEVER_STARTED else []


def never_served(family_trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of one family's launched trials, those whose server crashed on every start (a drafter that kills the server
    at its first drafts), when there are ``NEVER_SERVED`` of them and none of the family was measured to the end;
    else []."""
    shaky = []
    for t in family_trials:
        r = TrialRecord(t)
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and r.measured:
            return []
        if r.fail_kind == Unstable.kind:
            shaky.append(t)
    return shaky if len(shaky) >= NEVER_SERVED else []


def family_trials(study: optuna.Study, cfg: TrialConfig) -> list[FrozenTrial]:
    """The launched speculative trials of ``cfg``'s family that ended (no duplicates, no refusals)."""
    out = []
    for t in records.trials(study, (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        r = TrialRecord(t)
        if not (r.is_baseline or r.is_duplicate or r.not_launched) and _family_of(r) == family(cfg):
            out.append(t)
    return out


def refuse_known_failures(study: optuna.Study, eff: TrialConfig, backend: Any, size_knob: str | None) -> None:
    """Raise the refusal for ``eff`` when earlier trials showed how it would end (see the module)."""
    crashed = records.failed_twice(study, eff.key())
    if crashed:
        raise NotLaunched(
            f"the same server config failed in trials {crashed[0].number} and {crashed[1].number}; not launched again",
            TrialRecord(crashed[-1]).fail_kind,
        )
    shaky = records.unstable(study, eff.key())
    if shaky is not None:
        raise NotLaunched(
            f"the same server config crashed on every start in trial {shaky.number} (unstable); not launched again",
            Unstable.kind,
        )
    if eff.is_baseline:
        return
    graphs = "on" if eff.cuda_graph else "off"
    kin = family_trials(study, eff)
    dead = never_started(kin)
    if dead:
        kind = TrialRecord(dead[-1]).fail_kind
        raise NotLaunched(
            f"drafter {eff.drafter!r} (CUDA graphs {graphs}) never started: trials {_numbers(dead)} failed at "
            f"start-up ({kind}) and none of its configs started; not launched again",
            kind,
        )
    unserved = never_served(kin)
    if unserved:
        raise NotLaunched(
            f"drafter {eff.drafter!r} (CUDA graphs {graphs}) never served: its servers crashed on every start in "
            f"trials {_numbers(unserved)} (unstable) and none of its configs was measured; not launched again",
            Unstable.kind,
        )
    if not backend.not_engaged_is_per_drafter:
        return
    bad = records.disengaged(study, eff)
    if bad is not None:
        raise DrafterNotEngaged(
            f"drafter {eff.drafter!r} was not engaged in trial {bad.number} "
            f"({TrialRecord(bad).fail_reason or ''}); not launched again"
        )
    oom = records.predicted_oom(study, eff, size_knob)
    if oom is not None:
        oom_size = records.config_size(TrialRecord(oom).effective_config(), size_knob)
        size = records.config_size(eff, size_knob)
        raise Infeasible(
            f"trial {oom.number} ran out of memory at size {oom_size}; size {size} is at least as large",
            kind=ServerOOM.kind,
        )

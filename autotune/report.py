"""Study -> report: one dict (``report --json``), rendered as text and HTML elsewhere. Pure over the study."""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import acceptance, bill, lossless, objective, records, warmup
from autotune.bill import bench_seconds, confirmation_starts, warmup_seconds
from autotune.config import PromptResult, TrialConfig
from autotune.errors import DrafterNotEngaged, ServerOOM
from autotune.records import (
    ConfirmationState,
    TrialRecord,
    find_baseline,
    find_exclusions,
    is_baseline_trial,
)
from autotune.stats import log_ratios
from autotune.study import methods as _methods
from autotune.study.levels import summary_text
from autotune.study.race import headline as _headline
from autotune.verdict import Verdict, loses_on, point_verdict, search_verdict, to_settle_text

VERDICT_TEXT: dict[str, str] = {
    Verdict.SPECULATION_WINS: "speculation wins: the best config's confirmed speedup interval clears the minimum gain",
    Verdict.BASELINE_WINS: "the baseline wins: no speculative config beats it",
    Verdict.NO_WORTHWHILE_GAIN: "no worthwhile gain: the best config's confirmed speedup interval lies below the "
    "minimum gain (verdict.min_gain); whatever it gains is under the bar: deploy the baseline",
    Verdict.INCONCLUSIVE: "inconclusive: no config is proven faster than the baseline; deploy the baseline",
}
#: the confidence of the search-only verdict's clearly-loses test (confirmation's: the space's ``verdict.confidence``)
SEARCH_VERDICT_CONFIDENCE = 0.95


def _trial_row(t: FrozenTrial) -> dict[str, Any]:
    r = TrialRecord(t)
    levels_measured = [int(x["level"]) for x in r.levels]
    return {
        "number": t.number,
        "state": t.state.name,
        "role": r.role,
        "seeded": r.seeded,
        "params": dict(t.params),
        "config": r.shown_config,
        "tok_per_s": t.value if t.state == TrialState.COMPLETE else None,
        "speedup": r.speedup,
        "speedup_upper": r.speedup_upper,
        "prompts_measured": len(t.intermediate_values),
        "accept_length": r.accept_length
        if r.accept_length is not None
        else _mean([p.get("accept_length") for p in r.prompts]),
        "accept_per_pos": acceptance.summary(r.accept_positions),  # an explanation, never a ranking
        "startup_s": r.startup_s,
        "duplicate_of": r.duplicate_of,
        "prune_reason": r.prune_reason or r.infeasible,
        "prune_rule": r.prune_rule,
        "pruned_against": r.pruned_against,
        "fail_kind": r.fail_kind,
        "fail_reason": r.fail_reason,
        "lossless": r.lossless,
        "lossless_summary": lossless.summary_line(r.lossless) if r.lossless else None,
        "log_path": r.log_path,
        "argv": r.argv,
        "levels": r.levels,  # with load levels: each level's figures (LevelResult.summary + speedup, slo_broken)
        "levels_measured": levels_measured,
        "slo_broken": r.slo_broken,
        # why it ended so (every PRUNED and FAIL trial has one; a COMPLETE one only when there is something to say)
        "reason": records.outcome_reason(t) or _complete_note(r),
        "gpu_s": trial_gpu_s(t),  # its server time, as gpu_time bills it (a duplicate: none)
    }


def _complete_note(r: TrialRecord) -> str | None:
    """A COMPLETE trial's note: the load levels whose latency limits it breaks (it ranks after those within them)."""
    if not r.slo_broken:
        return None
    broken = [f"{x['level']} streams ({'; '.join(x['slo_broken'])})" for x in r.levels if x.get("slo_broken")]
    return (
        "latency limit (objective.slo) broken at "
        + (", ".join(broken) or ", ".join(r.slo_broken))
        + ": the search ranks it after configs within the limits"
    )


def objective_speedup(
    t: FrozenTrial,
    ref: FrozenTrial | None,
    weights: dict[int, float],
    n_prompts: int,
    by_category: tuple[dict[str, float], tuple[str | None, ...]] | None = None,
) -> tuple[float | None, str | None]:
    """The one speedup of a study: ``t``'s objective over ``ref``'s (a COMPLETE baseline), and what it rests on.

    COMPLETE: the ratio of the objective values (tok/s over the prompt set; with load levels the weighted geometric
    mean of the levels' aggregate tok/s, ``autotune.objective``), the figure the search, confirmation and the
    recommendation use. A trial stopped early has no objective value: the same ratio over what it measured, the
    weighted geometric mean of its measured levels' speedups (weights of those levels), or with none its prompts'
    aggregate tok/s against the reference's over the same prompts (with weights over prompt categories,
    ``by_category``: the weighted geometric mean of the per-category speedups over the categories measured); the
    basis says which."""
    if ref is None or not ref.value or TrialRecord(t).is_duplicate:
        return None, None
    if t.state == TrialState.COMPLETE:
        return (t.value / ref.value, "objective") if t.value else (None, None)
    r, b = TrialRecord(t), TrialRecord(ref)
    if by_category and by_category[0]:
        mine, theirs = ([PromptResult.from_dict(p) for p in x.prompts] for x in (r, b))
        return objective.category_basis(mine, theirs, by_category[1], by_category[0], n_prompts)
    if weights and r.levels:
        ratios = objective.speedups(r.level_tok_per_s(), b.level_tok_per_s())
        w = {c: weights.get(c, 0.0) for c in ratios if weights.get(c, 0.0) > 0}
        if w:
            total = sum(w.values())
            value = math.exp(sum(x * math.log(ratios[c]) for c, x in w.items()) / total)
            where = ", ".join(str(c) for c in sorted(w))
            return value, f"levels {where} of {len(weights)} measured (weights of those levels)"
    base = {p.get("index"): p for p in b.prompts}
    pairs = [
        (p, q)
        for p in r.prompts
        if (q := base.get(p.get("index"))) is not None and p.get("seconds") and q.get("seconds")
    ]
    if not pairs:
        return None, None
    tps = sum(p["completion_tokens"] for p, _ in pairs) / sum(p["seconds"] for p, _ in pairs)
    ref_tps = sum(q["completion_tokens"] for _, q in pairs) / sum(q["seconds"] for _, q in pairs)
    where = f"{len(pairs)} of {n_prompts} prompts" + (" at 1 stream (level 1 only)" if weights else "")
    return (tps / ref_tps if ref_tps > 0 else None), where


def _load(rows: list[dict[str, Any]], best: dict[str, Any] | None, conf: ConfirmationState) -> dict[str, Any] | None:
    """With load levels: the best trial's per-level figures with the per-level verdict of its search measurement
    ("speculation wins up to 64 streams, loses from 256"), and confirmation's per-level winners and verdicts
    (``confirmed``, ``confirmed_text``); None without levels."""
    by = {r["number"]: r for r in rows}
    row = by.get(best.get("trial")) if best else None
    if row is None:  # nothing confirmed yet: the search's best measurement of the objective
        spec = [r for r in rows if r["role"] == records.ROLE_SPECULATIVE and r["levels"] and r["tok_per_s"]]
        row = max(spec, key=lambda r: r["tok_per_s"], default=None)
    if not row or not row.get("levels"):
        return None
    levels = row["levels"]
    won = [
        {
            "level": x["level"],
            "verdict": point_verdict(x.get("speedup"), bool(x.get("slo_broken"))).value,
        }
        for x in levels
    ]
    text = summary_text(won)
    return {
        "trial": row["number"],
        "levels": levels,
        "text": text,
        "confirmed": conf.level_verdicts,
        "confirmed_text": conf.level_text,
    }


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def baselines(study: optuna.Study) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for t in records.trials(study, (TrialState.COMPLETE,)):
        r = TrialRecord(t)
        if r.is_baseline and not r.is_duplicate:
            key = "cuda_graph_on" if r.cuda_graph else "cuda_graph_off"
            out.setdefault(
                key,
                {
                    "trial": t.number,
                    "tok_per_s": t.value,
                    "cuda_graph": bool(r.cuda_graph),
                    "per_prompt_tok_per_s": [t.intermediate_values[s] for s in sorted(t.intermediate_values)],
                },
            )
    return out


def _traffic(
    info: dict[str, Any],
    holdout: dict[str, Any] | None,
    accepted: dict[str, Any] | None,
    recommended: dict[str, Any],
    by_number: dict[int, FrozenTrial],
) -> dict[str, Any]:
    """A request-log study's subset and guards, the holdout check (``traffic.holdout_check``, as recorded), the
    winner's acceptance on the subset against the holdout (``traffic.acceptance_check``, as ``study.winner``
    recorded it, measured after confirmation), and the
    recommended config's speedup by input-length third against its baseline (the search's measurements; none when
    the baseline is recommended)."""
    from autotune.traffic import by_length, length_text

    out = dict(info)
    out["holdout_check"] = holdout
    if holdout is not None:
        out["holdout_text"] = f"subset vs the rest of the log (baseline trial {holdout['trial']}): {holdout['text']}"
    elif info.get("holdout"):
        out["holdout_text"] = "subset vs the rest of the log: not measured (no baseline measured it)"
    else:
        out["holdout_text"] = (
            "subset vs the rest of the log: off (benchmark.holdout: 0, or no request outside the subset)"
        )
    from autotune.study.winner import acceptance_text

    out["acceptance_check"] = accepted
    if accepted is not None:
        out["acceptance_text"] = "subset vs the rest of the log (the winner, after confirmation): " + acceptance_text(
            accepted
        )
    elif info.get("holdout"):
        out["acceptance_text"] = (
            "the winner's acceptance on the rest of the log: not measured (no speculative winner confirmed)"
        )
    t = by_number.get(recommended.get("trial"))  # type: ignore[arg-type]
    rows: list[dict[str, Any]] = []
    if t is not None and not TrialRecord(t).is_baseline:
        b = by_number.get(TrialRecord(t).baseline_trial)  # type: ignore[arg-type]
        if b is not None:
            rows = by_length(TrialRecord(t).prompt_results(), TrialRecord(b).prompt_results())
    out["by_length"] = rows
    out["by_length_text"] = length_text(rows)
    return out


def _acceptance_guards(
    rows: list[dict[str, Any]], by_number: dict[int, FrozenTrial], references: dict[str, float]
) -> list[dict[str, str]]:
    """``acceptance-far-below`` (``traffic.acceptance_guards``) on each drafter's fastest measured trial."""
    from autotune.traffic import acceptance_guards

    fastest: dict[str, dict[str, Any]] = {}
    for r in rows:
        drafter = (r["config"] or {}).get("drafter")
        if r["role"] != records.ROLE_SPECULATIVE or not drafter or r["duplicate_of"] is not None or not r["tok_per_s"]:
            continue
        if drafter not in fastest or r["tok_per_s"] > fastest[drafter]["tok_per_s"]:
            fastest[drafter] = r
    judged = [(d, r["number"], TrialRecord(by_number[r["number"]]).prompt_results()) for d, r in fastest.items()]
    return [{"name": g.name, "text": g.text} for g in acceptance_guards(judged, references)]


def build_report(study: optuna.Study) -> dict[str, Any]:
    trials = records.trials(study)
    rows = [_trial_row(t) for t in trials]
    conf = records.confirmation(study) or ConfirmationState(keys=[])
    by_number = {t.number: t for t in trials}
    base = baselines(study)
    confirmed = _confirmed(conf, rows)
    best = _best(conf, confirmed, by_number)
    fastest = max(base.values(), key=lambda b: b["tok_per_s"] or 0.0, default=None)
    weights = objective.study_level_weights(study)
    by_category = objective.study_category_weights(study)
    n_prompts = len(records.prompt_ids(study)) or max((len(TrialRecord(t).prompts) for t in trials), default=0)
    fastest_trial = by_number.get(fastest["trial"]) if fastest else None
    for row in rows:
        t = by_number[row["number"]]
        if row["role"] != records.ROLE_SPECULATIVE:
            row["speedup_vs_fastest"], row["speedup_basis"] = None, None
            continue
        row["speedup_vs_fastest"], row["speedup_basis"] = objective_speedup(
            t, fastest_trial, weights, n_prompts, by_category
        )
        if row["speedup"] is None and row["duplicate_of"] is None:  # stopped between levels: none recorded
            own_number = TrialRecord(t).baseline_trial
            own = by_number.get(own_number) if own_number is not None else None
            row["speedup"] = objective_speedup(t, own, weights, n_prompts, by_category)[0] if own is not None else None
    if conf.done:
        v = conf.verdict or Verdict.INCONCLUSIVE
        basis = conf.basis or "confirmed"
        rests_on = conf.rests_on or basis
        exclusions = conf.exclusions or []
    else:
        v, rests_on = _unconfirmed_verdict(study)
        basis = "search"
        exclusions = find_exclusions(study)
    spec = [r for r in rows if r["role"] == records.ROLE_SPECULATIVE]
    simulated, units = records.study_labels(study)
    gpu = gpu_time(trials, conf)
    recommended = recommend(study, v, best)
    out = {
        "study": study.study_name,
        "simulated": simulated,
        "units": units,
        "baseline": base,
        "trials": rows,
        "counts": {
            s.name: sum(1 for t in trials if t.state == s)
            for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
        },
        "pruned_before_last_prompt": sum(
            1 for r in spec if r["state"] == "PRUNED" and r["prompts_measured"] > 0 and r["duplicate_of"] is None
        ),
        "pruned_by": {
            rule: sum(1 for r in spec if r["prune_rule"] == rule and r["duplicate_of"] is None)
            for rule in ("baseline", "leader")
        },
        "reasons": _reasons(trials),
        "gpu_time": gpu,
        "search_settled": _settled_text(records.search_settled(study)),
        "to_settle": to_settle_text(conf.to_settle if conf.done else None, gpu),
        "warmup": _warmups(trials, conf),
        "best_configs": _best_configs(rows, confirmed, recommended.get("trial")),
        "best": best,
        "confirmed": confirmed,
        "verdict": Verdict(v).value,
        "verdict_basis": basis,
        "verdict_rests_on": rests_on,
        "verdict_text": _verdict_text(v, exclusions, conf.suspect_prunes or []),
        "exclusions": exclusions,
        "baseline_check": conf.baseline_check or [],
        "suspect_prunes": conf.suspect_prunes or [],
        "fastest_baseline": fastest,
        "lossless": _lossless_summary(rows, records.lossless_floor(study), records.greedy_lossless(study)),
        "recommended": recommended,
        "flags": _flags(rows, records.greedy_lossless(study)),
        "acceptance_guards": _acceptance_guards(rows, by_number, records.drafter_references(study)),
        "load": _load(rows, best, conf),
        "objective": objective.describe(weights, by_category[0]),
        "interval_note": interval_note(conf),
        "comparisons": "every speculative trial is paired with the baseline measured under the same CUDA-graph "
        "setting, prompt by prompt (pruning, intervals); the headline speedup and the verdict are against the "
        "fastest baseline (what would be deployed without speculation); every speedup is the objective's "
        "(a trial stopped early: over what it measured, its basis says what)",
    }
    traffic = records.traffic(study)  # spaces measured from a request log only
    if traffic is not None:
        out["traffic"] = _traffic(
            traffic, records.traffic_holdout(study), records.traffic_acceptance(study), recommended, by_number
        )
    per_method = _methods.from_study(study, out)  # spaces with search.methods only: per-method results
    if per_method is not None:
        out["methods"] = per_method
    acceptance.attach(out)  # each best config's per-position acceptance, where reported
    return out


def _settled_text(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why the search stopped before its budget (``autotune.study.settle``), with a line to print; None: it did not."""
    if not state:
        return None
    return {
        **state,
        "text": f"search stopped after {state['trials']} of up to {state['n_trials']} trials: {state['reason']}",
    }


def interval_note(conf: ConfirmationState) -> str | None:
    """Why the confirmation's intervals are at the confidence they are at (None: nothing confirmed)."""
    level = conf.confidence
    if level is None:
        cis = [ci for r in conf.results or [] if (ci := r.get("speedup_ci"))]
        level = cis[0].get("confidence") if cis else None
    if level is None:
        return None
    return (
        f"{level * 100:.4g}% intervals: the verdict's confidence (verdict.confidence) at its first look, its error "
        "shared by the k candidates still racing after the first look's rounds (1 - (1 - verdict.confidence) / k: "
        "the pick is the best of k, so that the best of several ties is not a winner by luck); when that look left "
        "the verdict open, confirmation measured more rounds and each further look is held to that error divided "
        "again by the extra looks allowed (Bonferroni), so that looking again cannot make a winner of a config that "
        "is not faster by verdict.min_gain; every candidate's interval is at that level, and one that left the "
        "race after few rounds has a wide one. Each interval's spread starts from the start-to-start noise "
        "(pruning.start_noise, worth 3 rounds; raised to what the rounds show when that is more): its degrees of "
        "freedom are 3 + rounds - 1, so that rounds that agree by luck cannot make a tie look precise"
    )


def _reasons(trials: list[FrozenTrial]) -> dict[str, dict[str, int]]:
    """Pruned and failed trials counted by why: lost to the baseline or to the leader (by ``prune_rule``),
    infeasible, out of memory, same server config as a pruned trial; each failure kind; interrupted; no outcome."""
    out: dict[str, dict[str, int]] = {"PRUNED": {}, "FAIL": {}}
    for t in trials:
        if t.state not in (TrialState.PRUNED, TrialState.FAIL):
            continue
        r = TrialRecord(t)
        if r.interrupted:
            why = "interrupted"
        elif t.state == TrialState.PRUNED:
            if r.is_duplicate:
                why = "same server config as a pruned trial"
            elif r.prune_reason:
                why = "lost to the leader" if r.prune_rule == "leader" else "lost to the baseline"
            elif r.not_worth_a_start:
                why = "not launched (the surrogate predicts it well behind the best)"
            elif r.fail_kind == ServerOOM.kind:
                why = "out of memory"
            else:
                why = "infeasible (the server would reject or rewrite it)"
        elif records.is_lost(t):
            why = "no outcome recorded (its process stopped)"
        else:
            why = r.fail_kind or "failed"
        bucket = out[t.state.name]
        bucket[why] = bucket.get(why, 0) + 1
    return out


def _warmups(trials: list[FrozenTrial], conf: ConfirmationState) -> dict[str, Any] | None:
    """The warm-up passes of every start, search and confirmation (``autotune.warmup.summary``, with its line as
    ``text``); None when no start warmed up with passes."""
    ws = [TrialRecord(t).warmup for t in trials if not TrialRecord(t).is_duplicate]
    for rnd in [*(conf.check_rounds or []), *conf.rounds]:
        if rnd.starts is not None:
            ws += [r.warmup for r in [*rnd.starts.baseline.values(), *rnd.starts.candidates.values()]]
    s = warmup.summary(ws)
    if s is not None:
        s["text"] = warmup.describe(s)
    return s


def _start_seconds(t: FrozenTrial) -> float:
    """A trial's server time: its startup, its warm-up passes and its timed benchmark (the warm-up requests and
    reference answers not counted)."""
    return (TrialRecord(t).startup_s or 0.0) + warmup_seconds(t) + bench_seconds(t)


def trial_gpu_s(t: FrozenTrial) -> float:
    """A search trial's server time as ``gpu_time`` bills it: its start when it ran one, and its starts that failed
    (a duplicate: none, it started nothing)."""
    r = TrialRecord(t)
    if r.is_duplicate:
        return 0.0
    own = _start_seconds(t) if r.measured or r.startup_s is not None else 0.0
    return own + sum(bill.failed_starts(t))


def gpu_time(trials: list[FrozenTrial], conf: ConfirmationState) -> dict[str, Any]:
    """Server time (hardware seconds the GPUs were held) spent by the search and confirmation, and what pruning
    and deduplication saved. Pruning saved what a pruned trial did not run: its missing prompts (at its own mean
    time per prompt) and, with load levels, the levels it did not reach (at the complete trials' mean time for
    that level); a duplicate saved the start and benchmark of the trial it copies. Confirmation starts are
    estimated from their tok/s: a complete search start's benchmark work (seconds x objective) over that tok/s,
    plus the search's mean startup (the rounds record tok/s only)."""
    by_number = {t.number: t for t in trials}
    searched = spent = pruning = dedup = 0.0
    starts = 0
    complete = [t for t in trials if t.state == TrialState.COMPLETE and not TrialRecord(t).is_duplicate]
    n_prompts = max((len(TrialRecord(t).prompts) for t in complete), default=0)
    level_s: dict[int, list[float]] = {}
    for t in complete:
        for x in TrialRecord(t).levels:
            if int(x["level"]) > 1 and x.get("seconds"):
                level_s.setdefault(int(x["level"]), []).append(float(x["seconds"]))
    failed: list[float] = []  # the search's starts that failed (their server seconds until they did)
    for t in trials:
        r = TrialRecord(t)
        if r.is_duplicate:
            orig = by_number.get(r.duplicate_of) if r.duplicate_of is not None else None
            dedup += _start_seconds(orig) if orig is not None else 0.0
            continue
        failed += bill.failed_starts(t)
        if not r.measured and r.startup_s is None:
            continue
        starts += 1
        searched += _start_seconds(t)
        prompts = r.prompts
        if t.state != TrialState.PRUNED or not prompts:
            continue
        if len(prompts) < n_prompts:
            per = sum(p.get("seconds") or 0.0 for p in prompts) / len(prompts)
            pruning += per * (n_prompts - len(prompts))
        reached = {int(x["level"]) for x in r.levels}
        pruning += sum(_mean(secs) or 0.0 for c, secs in level_s.items() if c not in reached)
    searched, starts = searched + sum(failed), starts + len(failed)
    confirm = confirmation_starts(trials, conf)
    confirm_s, confirm_starts = sum(a + b for _, a, b in confirm), len(confirm)
    confirm_failed = bill.confirmation_failed_s(conf)
    spent = searched + confirm_s
    return {
        "search_s": searched,
        "search_starts": starts,
        "failed_starts": len(failed) + len(confirm_failed),  # of both: refused, timed out, out of memory, crashed
        "failed_s": sum(failed) + sum(confirm_failed),
        "confirmation_s": confirm_s,
        "confirmation_starts": confirm_starts,
        "total_s": spent,
        "saved_by_pruning_s": pruning,
        "saved_by_dedup_s": dedup,
        "note": "server time: startups, warm-up passes, timed prompts and load levels, and the starts that failed "
        "until they did (warm-up requests and reference answers not counted); confirmation as its rounds recorded "
        "it (rounds recorded without it: estimated from their tok/s)",
    }


def _best_configs(
    rows: list[dict[str, Any]], confirmed: list[dict[str, Any]], recommended: int | None = None, n: int = 5
) -> list[dict[str, Any]]:
    """The best measured speculative configs against the fastest baseline, by the objective's speedup: the
    confirmed one where confirmation measured it (more starts, fresh baselines), else the search's; the recommended
    trial first. ``speedup`` stays the search measurement's, ``confirmed_speedup`` is confirmation's."""
    by_trial = {c["trial"]: c for c in confirmed}
    spec = [
        r
        for r in rows
        if r["role"] == records.ROLE_SPECULATIVE
        and r["state"] == "COMPLETE"
        and r["duplicate_of"] is None
        and r.get("speedup_vs_fastest") is not None
    ]

    def ci_of(r: dict[str, Any]) -> dict[str, Any] | None:
        c = by_trial.get(r["number"])
        return (c.get("deploy_speedup_ci") or c.get("speedup_ci")) if c else None

    def rank(r: dict[str, Any]) -> tuple[bool, float]:
        ci = ci_of(r)
        return (r["number"] == recommended, ci["point"] if ci else r["speedup_vs_fastest"])

    spec.sort(key=rank, reverse=True)
    out = []
    for r in spec[:n]:
        ci = ci_of(r)
        out.append(
            {
                "trial": r["number"],
                "config": r["config"],
                "tok_per_s": r["tok_per_s"],
                "speedup": r["speedup_vs_fastest"],
                "speedup_ci": ci,
                "confirmed_speedup": ci["point"] if ci else None,
                "recommended": r["number"] == recommended,
                "accept_length": r["accept_length"],
            }
        )
    return out


def _confirmed(conf: ConfirmationState, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The confirmation's candidates as report rows; each trial row gets its confirmed interval."""
    by_row = {row["number"]: row for row in rows}
    out = []
    for r in conf.results or []:
        out.append(
            {
                "trial": r["trial"],
                "config": r["config"],
                "speedup_ci": r["speedup_ci"],
                "deploy_speedup_ci": r.get("deploy_speedup_ci"),
                "tok_per_s": _mean(r["tok_per_s"]),
                "baseline_tok_per_s": _mean(r["baseline_tok_per_s"]),
                "rounds": len(r["tok_per_s"]),
                "dropped": bool(r.get("dropped", False)),
            }
        )
        if r["trial"] in by_row:
            by_row[r["trial"]]["speedup_ci"] = r["speedup_ci"]
    return out


def _best(
    conf: ConfirmationState, confirmed: list[dict[str, Any]], by_number: dict[int, FrozenTrial]
) -> dict[str, Any] | None:
    """The confirmation's pick, with its headline interval (against the fastest baseline)."""
    if conf.best is None:
        return None
    r = next(c for c in confirmed if c["trial"] == conf.best)
    t = by_number[conf.best]
    headline = _headline(r)
    return {
        "trial": t.number,
        "params": dict(t.params),
        "config": r["config"],
        "tok_per_s": r["tok_per_s"],
        "speedup": headline["point"] if headline else None,
        "speedup_ci": headline,
        "same_setting_speedup_ci": r["speedup_ci"],
        "search_tok_per_s": t.value,
        "accept_length": TrialRecord(t).accept_length,
    }


def _lossless_summary(
    rows: list[dict[str, Any]], floor: list[dict[str, Any]], greedy: dict[str, Any] | None
) -> dict[str, Any]:
    """The lossless check over the study: near-tie flips, lossy trials, the tolerance and the baselines' floor; in
    a space whose prompts sample, the winner's check at temperature 0 (``study.greedy``) and which figures come
    from which measurement."""
    from autotune.study.winner import greedy_text

    checked = [r for r in rows if r.get("lossless")]
    out = {
        "numerics": sum(len(r["lossless"].get("numerics", [])) for r in checked if r["duplicate_of"] is None),
        "lossy_trials": [r["number"] for r in checked if not r["lossless"].get("ok", True)],
        "tolerance": checked[0]["lossless"].get("tolerance") if checked else None,
        "tolerance_source": checked[0]["lossless"].get("tolerance_source") if checked else None,
        "baseline_divergences": [f for f in floor if f.get("kind")],
        "baselines_compared": sum(1 for f in floor if f.get("checked")),
    }
    if greedy is not None:
        out["greedy"] = greedy
        out["greedy_text"] = "lossless check at temperature 0: " + greedy_text(greedy)
        out["figures_from"] = (
            "speedups, intervals and the verdict: measured at each prompt's own sampling (the objective); the "
            "lossless check: the same prompts at temperature 0, untimed, the recommended config on one more start "
            "against its search baseline's reference answers"
        )
    return out


def _verdict_text(v: str, exclusions: list[dict[str, Any]], suspects: list[dict[str, Any]] | None = None) -> str:
    if v == Verdict.INCONCLUSIVE and suspects and not exclusions:
        numbers = ", ".join(str(p["trial"]) for p in suspects)
        return (
            f"inconclusive: no confirmed config is proven faster than the baseline, but {len(suspects)} config(s) "
            f"(trial(s) {numbers}) were pruned against a search baseline that ran faster than confirmation's fresh "
            f"ones; deploy the baseline, or weigh them: autotune export --trial N -o F, then autotune reverify F"
        )
    if v == Verdict.INCONCLUSIVE and exclusions:
        kinds = sorted({e["kind"] for e in exclusions})
        return (
            f"inconclusive: no config is proven faster than the baseline, and {len(exclusions)} config(s) could not "
            f"be weighed ({', '.join(kinds)}); deploy the baseline, and see the exclusions"
        )
    return VERDICT_TEXT[v]


def _unconfirmed_verdict(study: optuna.Study) -> tuple[Verdict, str]:
    """Without confirmation (``verdict.search_verdict``): baseline-wins only if every measured speculative trial
    clearly lost to its baseline, at a fixed 95% and the default start noise (not the space's)."""
    spec = [
        t
        for t in records.trials(study, (TrialState.COMPLETE,))
        if not is_baseline_trial(t) and not TrialRecord(t).is_duplicate
    ]
    return search_verdict((_lost(study, t) for t in spec), len(find_exclusions(study)))


def _lost(study: optuna.Study, t: FrozenTrial) -> bool | None:
    """Whether a search trial clearly lost to its baseline over its measured prompts (None: no baseline)."""
    b = find_baseline(study, TrialRecord(t).cuda_graph)
    if b is None:
        return None
    steps = sorted(t.intermediate_values)
    logs = log_ratios([t.intermediate_values[s] for s in steps], [b.intermediate_values.get(s) for s in steps])
    return loses_on(logs, confidence=SEARCH_VERDICT_CONFIDENCE)


def recommend(study: optuna.Study, verdict: str, best: dict[str, Any] | None) -> dict[str, Any]:
    """The config to deploy: the confirmed winner, else the fastest baseline. If a baseline under another
    CUDA-graph setting is faster than the winner, that baseline is recommended instead (and said so)."""
    base = baselines(study)
    fastest = max(base.values(), key=lambda b: b["tok_per_s"] or 0.0, default=None)
    fastest_cfg = TrialConfig.baseline(fastest["cuda_graph"]).to_dict() if fastest is not None else None
    if verdict == Verdict.SPECULATION_WINS and best is not None:
        if (
            fastest is not None
            and fastest["tok_per_s"]
            and best["tok_per_s"]
            and fastest["tok_per_s"] > best["tok_per_s"]
        ):
            return {
                "config": fastest_cfg,
                "trial": fastest["trial"],
                "tok_per_s": fastest["tok_per_s"],
                "why": "speculation wins against its own baseline, but a baseline under another CUDA-graph "
                "setting is faster still",
            }
        return {
            "config": best["config"],
            "trial": best["trial"],
            "tok_per_s": best["tok_per_s"],
            "speedup_ci": best["speedup_ci"],
            "why": "confirmed speculative winner",
        }
    if fastest is None:
        return {"config": None, "trial": None, "tok_per_s": None, "why": "no baseline measured yet"}
    return {
        "config": fastest_cfg,
        "trial": fastest["trial"],
        "tok_per_s": fastest["tok_per_s"],
        "why": "no speculative config is proven faster: deploy the fastest baseline",
    }


def _flags(rows: list[dict[str, Any]], greedy: dict[str, Any] | None = None) -> list[str]:
    out = []
    if greedy is not None and greedy.get("ok") is False:
        out.append(
            f"trial {greedy['trial']} (the confirmed winner): output diverges from its baseline at temperature 0 on "
            f"the same prompts ({lossless.summary_line(greedy)}): broken drafter, kernel or config; its speedup was "
            "measured while sampling, where no answer can be checked: do not deploy it"
        )
    for r in rows:
        if r["fail_kind"] == DrafterNotEngaged.kind:
            out.append(f"trial {r['number']}: drafter not engaged: {r['fail_reason']}")
        record = r.get("lossless")
        if record and not record.get("ok", True):
            out.append(
                f"trial {r['number']}: output diverges from the baseline at temperature 0 where the baseline was "
                f"confident ({lossless.summary_line(record)}; matching prefix {record['min_prefix_fraction']:.0%}): "
                "broken drafter, kernel or config"
            )
        if r["fail_kind"] == ServerOOM.kind:
            out.append(f"trial {r['number']}: out of memory ({r['prune_reason']})")
    return out

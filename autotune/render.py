"""Report -> text for people: the terminal (rich) and optuna-dashboard's notes (``publish``). Sentences are whole
lines, never wrapped, so that they can be grepped; colour only on a terminal, into a pipe or file the same text
without escapes, 160 columns wide."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

import optuna
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune import evidence, records
from autotune.acceptance import AcceptPositions
from autotune.config import config_label
from autotune.stats import interval_text as _ci
from autotune.study import baseline_check
from autotune.traffic import ACCEPTED_PER_ROUND, BASELINE_TOK_PER_S
from autotune.verdict import Verdict

if TYPE_CHECKING:
    from autotune.report import GpuTime, Report, TrialRow


def fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def _console(out: IO[str]) -> Console:
    tty = out.isatty()
    return Console(file=out, width=None if tty else 160, force_terminal=tty, no_color=not tty, highlight=False)


def render_report(report: Report, out: IO[str], deploy: str | None = None) -> None:
    """The whole report, then the closing summary; ``deploy``: the recommended config's launch command."""
    con = _console(out)

    def line(text: str, style: str | None = None) -> None:
        con.print(Text(text, style=style or ""), soft_wrap=True)

    res = report.result
    sim = res.simulated
    line(
        f"study {res.study}"
        + (f"  [SIMULATED: scenario {sim['scenario']}, figures in simulated hardware time]" if sim else ""),
        "bold",
    )
    _baselines(con, report)
    c, pruned = report.counts, report.pruned_by
    line(
        f"trials: {c['COMPLETE']} complete, {c['PRUNED']} pruned ({report.pruned_before_last_prompt} before the end "
        f"of their benchmark: {pruned['baseline']} slower than their baseline, {pruned['leader']} slower than the "
        f"leader), {c['FAIL']} failed"
    )
    _reasons(con, report)
    if report.objective.category_weights:
        line("objective: " + report.objective.text)
    _best(con, report)
    for text in _methods_lines(report.methods):
        line(text)
    for text in positions_lines(report):
        line(text)
    _trials(con, report)
    line(
        "  (speedup: the objective's ("
        + report.objective.text
        + ") against the baseline of the same CUDA-graph setting; vs best: against the fastest baseline; "
        "~: a trial stopped early, over what it measured)"
    )
    if report.flags:
        line("")
        line("alarms:", "bold red")
        for f in report.flags:
            line(f"  - {f}", "red")
    line("")
    lo = report.lossless
    if lo.tolerance is not None:
        floor = lo.baseline_divergences
        line(
            f"lossless check: near-tie tolerance {lo.tolerance:.3g} nats ({lo.tolerance_source}); "
            f"{lo.numerics} near-tie flip(s) recorded as numerics; lossy trials: "
            f"{lo.lossy_trials or 'none'}; baselines against each other: "
            + (f"{len(floor)} divergence(s)" if floor else "identical")
        )
    for g in report.acceptance_guards:
        line(f"guard {g.name}: {g.text}", "yellow")
    if lo.greedy is not None and lo.greedy_text:
        line(lo.greedy_text, None if lo.greedy.get("ok") else "yellow")
        line(f"  ({lo.figures_from})")
    for cf in res.confirmed:
        ci = cf.speedup_ci
        dep = cf.deploy_speedup_ci
        if ci:
            line(
                f"confirmed trial {cf.trial} ({config_label(cf.config)}): speedup {_ci(ci)} against its own baseline"
                + (f", {_ci(dep)} against the fastest baseline" if dep and dep != ci else "")
                + f" ({ci.confidence * 100:.4g}% CI, {ci.n} paired repeats)"
                + (" - left the race: clearly slower than the leader" if cf.dropped else "")
            )
    if res.confirmed and report.interval_note:
        line(f"  ({INTERVAL_POINTER})")
    load = report.load
    if load:
        line(f"per level (trial {load.trial}, search measurement):")
        line("  streams     tok/s  speedup  per-stream  ITL p50/p99 ms   TTFT p50/p99 ms  accept  failed")
        for x in load.levels:
            slo = "  SLO broken: " + "; ".join(x.slo_broken) if x.slo_broken else ""
            line(
                f"  {x.level:>7} {fmt(x.tok_per_s):>9} {fmt(x.speedup, '.2f'):>8} {fmt(x.stream_tok_per_s):>11} "
                f"{fmt(x.itl_p50_ms):>6}/{fmt(x.itl_p99_ms):<7} {fmt(x.ttft_p50_ms):>8}/{fmt(x.ttft_p99_ms):<8} "
                f"{fmt(x.accept_length, '.2f'):>6} {x.failed:>7}{slo}"
            )
        line(f"  {load.text} (search)")
        for v in load.confirmed or []:
            iv = _ci(v.speedup_ci)
            line(f"  confirmed at {v.level:>4} streams: {v.verdict:<16} best trial {v.trial}  speedup {iv}")
    traffic = report.traffic
    if traffic:
        info = traffic.info
        line(
            f"traffic: {info.picked} of {info.log_requests} logged requests measured ({info.path}; "
            f"stratified by length and {info.by})"
        )
        for name, text in info.guards:
            line(f"  traffic guard {name}: {text}", "yellow")
        check = traffic.holdout_check
        line("  " + traffic.holdout_text, "yellow" if check and check.get("warning") else None)
        if traffic.acceptance_text:
            acc = traffic.acceptance_check
            line("  " + traffic.acceptance_text, "yellow" if acc and acc.get("warning") else None)
        for by in (traffic.by_length_text, traffic.by_output_length_text):
            if by:
                line(by, "yellow" if "WARNING" in by else None)
    if report.search_settled:
        line(report.search_settled.text)
    for bc in report.baseline_check:
        line(baseline_check.text(bc), "yellow" if bc.flagged else None)
    for e in res.exclusions:
        line(f"excluded trial {e.trial} ({config_label(e.config)}): {e.kind}: {e.reason}", "yellow")
    if report.warmup:
        line(f"warm-up: {report.warmup.text}")
    line("")
    render_summary(report, out, deploy, con)


_VERDICT_STYLE = {
    Verdict.SPECULATION_WINS: "bold green",
    Verdict.BASELINE_WINS: "bold",
    Verdict.NO_WORTHWHILE_GAIN: "bold",
    Verdict.INCONCLUSIVE: "bold yellow",
}


def render_summary(report: Report, out: IO[str], deploy: str | None = None, con: Console | None = None) -> None:
    """The closing summary (``summary_lines``), the verdict and the recommendation in bold."""
    con = con or _console(out)
    for text in summary_lines(report, deploy):
        strong = _VERDICT_STYLE.get(report.verdict) if text.startswith("verdict:") else None
        alarm = "bold red" if text.startswith("ALARM") else "yellow" if text.startswith("warnings:") else None
        style = strong or alarm or ("bold" if text.startswith("recommended:") else None)
        con.print(Text(text, style=style or ""), soft_wrap=True)


#: the terminal's pointer to the intervals' derivation (the whole of it: the report's ``interval_note``, shown by the
#: HTML report and the dashboard's note)
INTERVAL_POINTER = (
    "intervals at the verdict's confidence, corrected for the candidates raced and for every extra look, their "
    "spread starting from the start-to-start noise: how, in the HTML report's note on intervals"
)


def summary_lines(report: Report, deploy: str | None = None) -> list[str]:
    """The study's closing summary, at most 12 lines: the verdict and what it rests on, how to settle an open one,
    the per-level verdicts, the recommendation with its interval, what the study cost, how to deploy it."""
    res = report.result
    out = [f"verdict: {res.verdict.value} ({res.rests_on})"]
    out.append(f"  {report.verdict_text}")
    out += _alarm_lines(report)
    if report.to_settle:
        out.append(f"  {report.to_settle['text']}")
    if report.load is not None and report.load.confirmed_text:
        out.append(f"  per level: {report.load.confirmed_text}")
    rec = res.recommended
    if rec.config:
        out.append(f"recommended: trial {rec.trial}: {config_label(rec.config)}  ({rec.why})")
        ci = rec.speedup_ci
        if ci:
            out.append(f"  speedup {_ci(ci)} ({ci.confidence * 100:.4g}% CI) against the fastest baseline")
    out.append(gpu_text(report.gpu_time))
    if deploy:
        what = "the recommended config" if (rec.config or {}).get("drafter") else "it"
        out.append(f"to deploy {what} (autotune export ... for other formats):")
        out.append(f"  {deploy}")
    return out


def warning_names(report: Report) -> list[str]:
    """The names of the report's warnings (guards and the request log's checks), each once."""
    names = [g.name for g in report.acceptance_guards]
    traffic = report.traffic
    if traffic is not None:
        names += [name for name, _text in traffic.info.guards]
        for check, measured in (
            (traffic.holdout_check, BASELINE_TOK_PER_S),
            (traffic.acceptance_check, ACCEPTED_PER_ROUND),
        ):
            if check and check.get("warning"):
                names.append(measured.warning_name)
        names += [
            f"loses at some {what} length"
            for what, text in (("input", traffic.by_length_text), ("output", traffic.by_output_length_text))
            if "WARNING" in (text or "")
        ]
    return list(dict.fromkeys(names))


def _alarm_lines(report: Report) -> list[str]:
    """At most two lines: the first alarm (a drafter not engaged, lossy output, out of memory) and how many more,
    and the warnings by name; the whole of each is in ``autotune report``."""
    out = []
    if report.flags:
        more = f" (+{len(report.flags) - 1} more)" if len(report.flags) > 1 else ""
        out.append(f"ALARM{more}: {report.flags[0]}")
    names = warning_names(report)
    if names:
        out.append(f"warnings: {', '.join(names)} (autotune report says why)")
    return out


def _table(title: str, cols: tuple[str, ...], left: tuple[str, ...]) -> Table:
    """A report table: its title on the left, no outer edge; the columns in ``left`` flush left, the rest right."""
    t = Table(title=title, title_justify="left", show_edge=False)
    for col in cols:
        t.add_column(col, justify="left" if col in left else "right")
    return t


def _baselines(con: Console, report: Report) -> None:
    t = _table("baselines", ("CUDA graphs", "tok/s", "trial", "per prompt tok/s"), ("CUDA graphs",))
    for _key, b in sorted(report.result.baselines.items()):
        per = " ".join(f"{x:.0f}" for x in b.per_prompt_tok_per_s)
        t.add_row("on" if b.cuda_graph else "off", fmt(b.tok_per_s), str(b.trial), per)
    con.print(t)


def _reasons(con: Console, report: Report) -> None:
    rows = [(state, why, n) for state in ("PRUNED", "FAIL") for why, n in sorted(report.reasons[state].items())]
    if not rows:
        return
    t = _table("pruned and failed, by reason", ("state", "reason", "trials"), ("state", "reason"))
    for state, why, n in rows:
        t.add_row(state, why, str(n))
    con.print(t)


def gpu_text(g: GpuTime) -> str:
    """What the study cost in GPU time, one line."""
    failed = g.failed_starts
    lost = f"; {_duration(g.failed_s)} in {failed} start(s) that failed or were refused" if failed else ""
    return (
        f"GPU time: {_duration(g.total_s)} ({_duration(g.search_s)} search in {g.search_starts} server "
        f"starts, {_duration(g.confirmation_s)} confirmation in {g.confirmation_starts}{lost}); saved "
        f"{_duration(g.saved_by_pruning_s)} by pruning, {_duration(g.saved_by_dedup_s)} by not re-measuring "
        f"duplicates"
    )


def _best(con: Console, report: Report) -> None:
    best = report.best_configs
    if not best:
        return
    t = _table(
        "best configs (against the fastest baseline): the objective's speedup, ordered by the confirmed one where "
        "confirmed, else the search's; * recommended",
        ("#", "config", "tok/s", "search speedup", "confirmed interval", "accept"),
        ("config",),
    )
    for b in best:
        t.add_row(
            f"{b.trial}{'*' if b.recommended else ''}",
            config_label(b.config),
            fmt(b.tok_per_s),
            fmt(b.speedup, ".3f"),
            _ci(b.speedup_ci),
            fmt(b.accept_length, ".2f"),
        )
    con.print(t)


def _methods_lines(m: dict[str, Any] | None) -> list[str]:
    """Per-method results (spaces with search.methods)."""
    if not m:
        return []
    out = ["methods: " + m["text"]]
    for e in m["methods"]:
        b = e["best"]
        acc = f", accept length {e['accept_length']:.2f}" if e.get("accept_length") else ""
        shown = f"best {fmt(b['speedup'], '.2f')}x {_ci(b['speedup_ci'])} trial {b['trial']}" if b else "-"
        out.append(f"  {e['label']:<12} {shown}  ({e['budget']['text']}{acc})")
    for a in m.get("adaptive") or []:
        out.append(f"  {a['text']}")
        if a.get("levels"):  # with load levels: against the tuned static schedule per level
            tuned = "tuned static" if a.get("static_tuned") else "static"
            out.append(f"    per level, adaptive vs the {tuned} schedule's pick there:")
            out += [f"      {lv['text']}" for lv in a["levels"]]
    weights = m.get("category_weights") or {}
    if weights and m.get("categories"):
        out.append("  categories weighted: " + ", ".join(f"{c} {w:.3g}" for c, w in weights.items()))
    for method, cats in (m.get("categories") or {}).items():
        out.append(
            f"  {method} by category (search figures, its best config's start): "
            + ", ".join(f"{c} {fmt(v, '.2f')}x" for c, v in cats.items())
        )
    return out


def _trials(con: Console, report: Report) -> None:
    cols = ("#", "state", "config", "tok/s", "speedup", "vs best", "measured", "accept", "note")
    t = _table("trials", cols, ("state", "config", "note"))
    for c in t.columns:
        c.overflow = "fold"
    t.columns[-1].min_width, t.columns[-1].max_width = 30, 44  # the note
    n_levels = len(report.objective.weights or {})
    colour = {"COMPLETE": "", "PRUNED": "dim", "FAIL": "red"}
    for r in report.trials:
        t.add_row(
            str(r.number),
            r.state,
            config_label(r.config),
            fmt(r.tok_per_s),
            fmt(r.speedup, ".2f") + ("~" if r.state != "COMPLETE" and r.speedup is not None else ""),
            fmt(r.speedup_vs_fastest, ".2f")
            + ("~" if r.state != "COMPLETE" and r.speedup_vs_fastest is not None else ""),
            measured(r, n_levels),
            fmt(r.accept_length, ".2f"),
            trial_note(r),
            style=colour.get(r.state, ""),
        )
    con.print(t)


def trial_note(r: TrialRow) -> str:
    """A trial row's note: why it was pruned or failed (every such row has one), a copy, a lossless finding."""
    if r.duplicate_of is not None:
        return f"= #{r.duplicate_of}"
    parts = []
    if r.state == "PRUNED" and r.prune_reason and r.speedup_upper is not None:
        who = "lost to the leader" if r.prune_rule == "leader" else "lost to the baseline"
        against = f" #{r.pruned_against}" if r.pruned_against is not None else ""
        parts.append(f"{who}{against} (upper bound {r.speedup_upper:.3f})")
    elif r.reason:
        parts.append(_clip(r.reason, 70))
    elif r.state in ("PRUNED", "FAIL"):
        parts.append(_clip(r.prune_reason or r.fail_reason or r.fail_kind or "no reason", 70))
    if r.lossless and r.lossless_summary not in (None, "identical"):
        parts.append(r.lossless_summary)
    return "; ".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def measured(r: TrialRow, n_levels: int) -> str:
    """What a trial measured: its prompts; with load levels the levels it reached (a pruned one: fewer)."""
    if not n_levels:
        return str(r.prompts_measured)
    levels = r.levels_measured
    return f"{len(levels)}/{n_levels} levels" if levels else f"{r.prompts_measured} prompts"


def position_rows(report: Report) -> list[tuple[str, int, AcceptPositions]]:
    """The per-position acceptance to show (who, trial, counts) where the server reports it: each method's best config
    in a space with ``search.methods``, else the best configs; an explanation of the acceptance, never a ranking."""
    methods = (report.methods or {}).get("methods") or []
    if methods:
        best = [(e["label"], e["best"]["trial"]) for e in methods if e.get("best")]
        picked = [(who, n, row.accept_per_pos if (row := report.row(n)) else None) for who, n in best]
    else:
        picked = [(config_label(b.config), b.trial, b.accept_per_pos) for b in report.best_configs]
    return [(who, trial, pos) for who, trial, pos in picked if pos]


def positions_lines(report: Report) -> list[str]:
    """``position_rows`` as text."""
    rows = position_rows(report)
    if not rows:
        return []
    out = ["per-position acceptance (P(first i draft tokens accepted), i = 1..K; explains acceptance, never ranks):"]
    for who, trial, pos in rows:
        rates = " ".join(f"{x:.2f}" for x in pos.rates)
        prof = " ".join(f"{x:.2f}" for x in pos.profile or [])
        depth = f"; expected accepted at depth 1..{len(pos.profile)}: {prof}" if pos.profile else ""
        out.append(f"  {who} (trial {trial}, {pos.drafts} drafts): {rates}{depth}")
    return out


# ---------------------------------------------------------------------------------------------- the dashboard's note


def study_note(study: optuna.Study, report: Report) -> str:
    """The study's note (Markdown, at the top of its dashboard page): the verdict, the trial autotune recommends and
    how that differs from optuna-dashboard's "Best Trial", what the objective value is, the pruned and failed."""
    res = report.result
    sim = res.simulated
    lines = [f"## autotune study `{res.study}`"]
    if sim:
        lines.append(
            f"**SIMULATED** (scenario {sim.get('scenario')}, time scale {sim.get('time_scale')}): every figure is "
            "in simulated hardware time; no GPU was measured."
        )
    lines.append(f"**Verdict: {res.verdict.value}** ({res.rests_on or res.basis}): {report.verdict_text}")
    rec = res.recommended
    rec_trial = rec.trial
    if rec_trial is not None:
        ci = rec.speedup_ci
        lines.append(
            f"**autotune recommends trial {rec_trial}**: `{config_label(rec.config)}` ({rec.why})"
            + (f"; confirmed speedup against the fastest baseline {_ci(ci)} ({ci.confidence * 100:.4g}%)" if ci else "")
        )
    try:  # what optuna-dashboard shows as "Best Trial": the highest objective value of one start
        best: optuna.trial.FrozenTrial | None = study.best_trial
    except ValueError:
        best = None
    if best is not None:
        value = fmt(best.value)
        is_base = records.TrialRecord(best).is_baseline
        if best.number == rec_trial:
            lines.append(
                f'optuna-dashboard\'s "Best Trial" (trial {best.number}, objective {value}) is the recommended one.'
            )
        else:
            why = (
                "a baseline: the objective value is tok/s, and without speculation this start was the fastest"
                if is_base
                else "the highest objective value of a single search start, where a start's figure is often its "
                "luckiest; autotune picks by the speedup confirmed against fresh baseline starts"
            )
            lines.append(
                f'optuna-dashboard\'s "Best Trial" is trial {best.number} (objective {value}): {why}. It cannot be '
                f"made to agree (Optuna ranks complete trials by one search start's value, baselines included): "
                f"**deploy trial {rec_trial}**, not the dashboard's best."
                if rec_trial is not None
                else f'optuna-dashboard\'s "Best Trial" is trial {best.number} (objective {value}): {why}.'
            )
    units = res.units or "tok/s"
    objective = report.objective.text
    lines.append(
        f"**Objective value** (`tok_per_s`, {units}): {objective}. Every speedup autotune shows (tables, plots, the "
        "recommendation) is a ratio of it."
    )
    if report.interval_note and res.confirmed:
        lines.append(f"**Intervals:** {report.interval_note}.")
    lines = ["\n\n".join(lines)]
    bad = [r for r in report.trials if r.state in ("PRUNED", "FAIL")]
    if bad:
        lines += ["", "### Pruned and failed trials", "| trial | state | reason |", "|---:|---|---|"]
        for r in bad:
            reason = (r.reason or "no reason recorded").replace("|", "/").replace("\n", " ")
            lines.append(f"| {r.number} | {r.state} | {reason} |")
    return "\n".join(lines) + "\n"


def publish(study: optuna.Study, report: Report, *, attrs: bool = False) -> None:
    """What optuna-dashboard shows about the study: its note, and a note for each pruned or failed trial that has
    none; with ``attrs`` also the study user attrs ``verdict`` and ``recommended`` (written without the dashboard
    installed too)."""
    try:
        from optuna_dashboard import save_note
        from optuna_dashboard._note import get_note_from_system_attrs, save_note_with_version
    except ImportError:
        save_note = None
    if save_note is not None:
        save_note(study, study_note(study, report))
        system = study._storage.get_study_system_attrs(study._study_id)
        prompt_ids = records.prompt_ids(study)
        rows = {r.number: r for r in report.trials}
        for t in study.get_trials(deepcopy=False):
            row = rows.get(t.number)
            if row is None or row.state not in ("PRUNED", "FAIL"):
                continue
            if get_note_from_system_attrs(system, t._trial_id)["body"]:
                continue
            outcome = {"state": t.state.name, "reason": row.reason}
            body = evidence.trial_note(t.number, records.TrialRecord(t).attrs, outcome, prompt_ids, t.params)
            save_note_with_version(study._storage, study._study_id, t._trial_id, 1, body)
    if attrs:
        rec = report.recommended
        ci = rec.speedup_ci
        records.set_outcome(
            study,
            report.verdict.value,
            {
                "trial": rec.trial,
                "config": config_label(rec.config),
                "why": rec.why,
                "tok_per_s": None if rec.tok_per_s is None else round(rec.tok_per_s, 1),
                "speedup": None if not ci else round(ci.point, 3),
                "speedup_ci": None if not ci else [round(ci.low, 3), round(ci.high, 3)],
            },
        )

"""The HTML report: verdict, baselines, confirmed intervals, the trial table and the review plots
(``autotune.plots``), in one self-contained file (plotly.js inlined once, no request to any network: it opens
offline)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune._io import atomic_write
from autotune.config import config_label
from autotune.render import fmt, measured, position_rows
from autotune.report import COMPARISONS, Report
from autotune.stats import Interval
from autotune.study import baseline_check


def _e(x: Any) -> str:
    return html.escape("-" if x is None else str(x))


def _range(ci: Interval | Mapping[str, float]) -> str:
    """An interval's ends and the confidence it was taken at: ``[1.829, 2.012] 95%`` (typed, or as methods hold it)."""
    d = ci.to_dict() if isinstance(ci, Interval) else ci
    return f"[{fmt(d.get('low'), '.3f')}, {fmt(d.get('high'), '.3f')}] {fmt((d.get('confidence') or 0) * 100, '.4g')}%"


def write_html_report(study: optuna.Study, report: Report, path: Path) -> None:
    parts = [
        *_head(report),
        *_verdict(report),
        *_baselines(report),
        *_confirmation(report),
        *_greedy(report),
        *(
            f"<p class='warn' id='guard-{_e(g.name)}'>guard {_e(g.name)}: {_e(g.text)}</p>"
            for g in report.acceptance_guards
        ),
        *_methods(report),
        *_levels(report),
        *_traffic(report),
        *_positions(report),
        *_alarms(report),
        *_trials(report),
        *_plots(study, report),
        "</body></html>",
    ]
    atomic_write(path, "".join(parts))  # workers sharing a study may write the same report at the same moment


def _head(report: Report) -> list[str]:
    sim = report.result.simulated
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>autotune: {_e(report.study)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}.PRUNED{color:#888}"
        ".FAIL{color:#b00}.verdict{font-size:1.3em;padding:.6em;background:#f4f4f4;border-left:6px solid #36c}"
        ".sim{background:#fff3cd;padding:.5em}</style></head><body>",
        f"<h1>autotune study <code>{_e(report.study)}</code></h1>",
    ]
    if sim:
        parts.append(
            f"<p class='sim'>SIMULATED study (scenario {_e(sim.get('scenario'))}, time scale "
            f"{_e(sim.get('time_scale'))}): figures are in simulated hardware time.</p>"
        )
    return parts


def _verdict(report: Report) -> list[str]:
    """The verdict, the configs it could not weigh, and the recommended deployment."""
    res = report.result
    parts = [
        f"<p class='verdict' id='verdict'><b>{_e(res.verdict.value)}</b> ({_e(res.rests_on)}): "
        f"{_e(report.verdict_text)}</p>"
    ]
    if report.to_settle:
        parts.append(f"<p class='to-settle' id='to-settle'>{_e(report.to_settle['text'])}</p>")
    if report.objective.category_weights:  # what the study maximised, when its weights name categories
        parts.append(f"<p class='objective' id='objective'>objective: {_e(report.objective.text)}</p>")
    if report.search_settled:
        parts.append(f"<p class='settled' id='search-settled'>{_e(report.search_settled.text)}</p>")
    if report.warmup:
        parts.append(f"<p class='warmup' id='warmup'>Warm-up: {_e(report.warmup.text)}</p>")
    for e in res.exclusions:
        parts.append(
            f"<p class='excluded'>excluded trial {_e(e.trial)} ({_e(config_label(e.config))}): "
            f"{_e(e.kind)}: {_e(e.reason)}</p>"
        )
    rec = res.recommended
    parts.append(f"<p>Recommended deployment: <code>{_e(config_label(rec.config))}</code> ({_e(rec.why)})</p>")
    return parts


def _baselines(report: Report) -> list[str]:
    parts = ["<h2>Baselines</h2><ul>"]
    for k, b in sorted(report.result.baselines.items()):
        parts.append(f"<li>{_e(k)}: {fmt(b.tok_per_s)} tok/s (trial {b.trial})</li>")
    parts.append("</ul>")
    for c in report.baseline_check:  # the search's baseline start against confirmation's fresh ones
        cls = "excluded" if c.flagged else "check"
        parts.append(f"<p class='{cls}' id='baseline-check-{_e(c.cuda_graph)}'>{_e(baseline_check.text(c))}</p>")
    parts.append(f"<p>{_e(COMPARISONS)}.</p>")
    return parts


def _confirmation(report: Report) -> list[str]:
    if not report.result.confirmed:
        return []
    parts = [
        "<h2>Confirmation</h2><table><tr><th>trial</th><th>config</th><th>tok/s</th>"
        "<th>speedup</th><th>CI</th><th>rounds</th></tr>"
    ]
    for c in report.result.confirmed:
        ci = c.speedup_ci
        parts.append(
            f"<tr><td>{c.trial}</td><td>{_e(config_label(c.config))}</td><td>{fmt(c.mean_tok_per_s)}</td>"
            f"<td>{fmt(ci and ci.point, '.3f')}</td><td>{_range(ci or {})}</td>"
            f"<td>{ci.n if ci else ''}{' (left the race)' if c.dropped else ''}</td></tr>"
        )
    parts.append("</table>")
    if report.interval_note:
        parts.append(f"<p class='note' id='interval-note'>{_e(report.interval_note)}.</p>")
    return parts


def _methods(report: Report) -> list[str]:
    """Per-method results (spaces with search.methods)."""
    m = report.methods
    if not m:
        return []
    parts = [
        f"<h2>Methods</h2><p id='methods-text'>{_e(m['text'])}</p>",
        "<table id='methods'><tr><th>method</th><th>best speedup</th><th>interval</th><th>trial</th>"
        "<th>configs measured</th><th>share of the search</th><th>accept len</th></tr>",
    ]
    for e in m["methods"]:
        b = e.get("best") or {}
        ci = b.get("speedup_ci")
        budget = e.get("budget") or {}
        share = " · ".join(
            f"{fmt(100 * budget[k], '.0f')}% of {what}"
            for k, what in (("trials_share", "trials"), ("gpu_share", "server time"))
            if budget.get(k) is not None
        )
        parts.append(
            f"<tr><td>{_e(e['label'])}</td><td>{fmt(b.get('speedup'), '.3f')}</td>"
            f"<td>{_range(ci) if ci else _e(e.get('unavailable') or '-')}</td><td>{_e(b.get('trial', ''))}</td>"
            f"<td>{e.get('configs_measured', e['measured'])}</td><td>{_e(share or '-')}</td>"
            f"<td>{fmt(e.get('accept_length'), '.2f')}</td></tr>"
        )
    parts.append("</table>")
    for a in m.get("adaptive") or []:
        parts.append(f"<p class='adaptive'>{_e(a['text'])}</p>")
        if a.get("levels"):  # with load levels: against the tuned static schedule per level
            items = "".join(f"<li>{_e(lv['text'])}</li>" for lv in a["levels"])
            tuned = "tuned static" if a.get("static_tuned") else "static"
            parts.append(f"<p>per level, adaptive vs the {tuned} schedule's pick there:</p><ul>{items}</ul>")
    cats = m.get("categories") or {}
    names = sorted({c for row in cats.values() for c in row})
    if names:
        weights = m.get("category_weights") or {}
        head = "".join(f"<th>{_e(c)}{f' (weight {weights.get(c, 0.0):.3g})' if weights else ''}</th>" for c in names)
        labels = {e["method"]: e["label"] for e in m["methods"]}
        parts.append(
            "<p>Each prompt category's speedup (geometric mean over its prompts, against the trial's own "
            "baseline) of each method's best config: search figures from that config's start, beside the confirmed "
            "intervals above (a category's figure is one start's, not an interval).</p>"
            f"<table id='categories'><tr><th>method</th>{head}</tr>"
        )
        for method, row in cats.items():
            cells = "".join(f"<td>{fmt(row.get(c), '.3f')}</td>" for c in names)
            parts.append(f"<tr><td>{_e(labels.get(method, method))}</td>{cells}</tr>")
        parts.append("</table>")
    return parts


def _levels(report: Report) -> list[str]:
    """With load levels: per level, the search's figures and the confirmation's winner, interval and verdict."""
    load = report.load
    if load is None or not load.levels:
        return []
    confirmed = {v.level: v for v in load.confirmed or []}
    parts = [
        f"<h2>Load levels</h2><p>Search (trial {_e(load.trial)}): {_e(load.text)}"
        + (f"; confirmed: {_e(load.confirmed_text)}" if load.confirmed_text else "")
        + "</p><table><tr><th>streams</th><th>tok/s</th><th>per stream</th><th>speedup</th><th>ITL p99 ms</th>"
        "<th>TTFT p99 ms</th><th>failed</th><th>confirmed winner</th><th>CI</th><th>verdict</th></tr>"
    ]
    for x in load.levels:
        c = x.level
        v = confirmed.get(c)
        ci = v.speedup_ci if v is not None else None
        ci_text = f"{fmt(ci.point, '.3f')} {_range(ci)}" if ci else "-"
        broken = " (latency limit broken: see below)" if x.slo_broken else ""
        parts.append(
            f"<tr id='level-{c}'><td>{c}</td><td>{fmt(x.tok_per_s)}</td>"
            f"<td>{fmt(x.stream_tok_per_s)}</td><td>{fmt(x.speedup, '.3f')}{broken}</td>"
            f"<td>{fmt(x.itl_p99_ms)}</td><td>{fmt(x.ttft_p99_ms, '.0f')}</td>"
            f"<td>{_e(x.failed)}</td><td>{_e(v and v.trial)}</td><td>{ci_text}</td>"
            f"<td>{_e(v and v.verdict)}</td></tr>"
        )
    parts.append("</table>")
    for x in load.levels:
        if x.slo_broken:
            parts.append(
                f"<p class='slo' id='slo-{x.level}'>At {x.level} streams trial {_e(load.trial)} "
                f"breaks the latency limit (objective.slo): {_e('; '.join(x.slo_broken))}. The search ranks a "
                "config breaking a limit after every config within the limits; a level schedule does not use it "
                "there.</p>"
            )
    return parts


def _greedy(report: Report) -> list[str]:
    """A sampling space's lossless check at temperature 0, and which figures come from which measurement."""
    lo = report.lossless
    if lo.greedy is None or not lo.greedy_text:
        return []
    warn = "" if lo.greedy.get("ok") else " class='warn'"
    return [f"<p id='greedy-lossless'{warn}>{_e(lo.greedy_text)} ({_e(lo.figures_from)})</p>"]


def _traffic(report: Report) -> list[str]:
    """A request-log study: what was measured of the log, the guards, the recommended config by input length."""
    t = report.traffic
    if not t:
        return []
    info = t.info
    parts = [
        "<h2>Traffic</h2>",
        f"<p id='traffic'>{_e(info.picked)} of {_e(info.log_requests)} logged requests measured "
        f"(<code>{_e(info.path)}</code>; stratified by length and {_e(info.by)}).</p>",
    ]
    parts += [f"<p class='warn' id='guard-{_e(n)}'>traffic guard {_e(n)}: {_e(x)}</p>" for n, x in info.guards]
    check = t.holdout_check
    warn = " class='warn'" if check and check.get("warning") else ""
    parts.append(f"<p id='holdout'{warn}>{_e(t.holdout_text)}</p>")
    if t.acceptance_text:
        acc = t.acceptance_check
        warn = " class='warn'" if acc and acc.get("warning") else ""
        parts.append(f"<p id='holdout-acceptance'{warn}>{_e(t.acceptance_text)}</p>")
    for side, rows, text, table in (
        ("input", t.by_length, t.by_length_text, "by-length"),
        ("output", t.by_output_length, t.by_output_length_text, "by-output-length"),
    ):
        if not rows:
            continue
        parts.append(
            f"<table id='{table}'><tr><th>{side} length</th><th>tokens</th><th>prompts</th><th>baseline tok/s</th>"
            "<th>tok/s</th><th>speedup</th></tr>"
        )
        for r in rows:
            lo, hi = r.tokens
            parts.append(
                f"<tr><td>{_e(r.bucket)}</td><td>{_e(lo)}-{_e(hi)}</td>"
                f"<td>{_e(r.prompts)}</td><td>{fmt(r.baseline_tok_per_s)}</td><td>{fmt(r.tok_per_s)}</td>"
                f"<td>{fmt(r.speedup, '.2f')}</td></tr>"
            )
        parts.append(f"</table><p>{_e(text)}</p>")
    return parts


def _alarms(report: Report) -> list[str]:
    if not report.flags:
        return []
    return ["<h2>Alarms</h2><ul>" + "".join(f"<li>{_e(f)}</li>" for f in report.flags) + "</ul>"]


def _trials(report: Report) -> list[str]:
    objective = report.objective.text
    n_levels = len(report.objective.weights or {})
    parts = [
        "<h2>Trials</h2>"
        + (
            f"<p>speedup: the objective's ({_e(objective)}); vs best: against the fastest baseline; ~: a trial "
            "stopped early, over what it measured.</p>"
            if objective
            else ""
        )
        + "<table id='trials'><tr><th>#</th><th>state</th><th>config</th><th>tok/s</th>"
        "<th>speedup</th><th>vs best</th><th>measured</th><th>accept len</th><th>startup s</th><th>note</th></tr>"
    ]
    for r in report.trials:
        same = f"same as #{r.duplicate_of}" if r.duplicate_of is not None else ""
        note = r.reason or r.prune_reason or r.fail_reason or same
        if r.state != "COMPLETE" and r.speedup_basis:
            note = f"{note} [speedup over {r.speedup_basis}]" if note else f"speedup over {r.speedup_basis}"
        early = "~" if r.state != "COMPLETE" else ""
        vs = r.speedup_vs_fastest
        parts.append(
            f"<tr class='{_e(r.state)}' id='trial-{r.number}'><td>{r.number}</td><td>{_e(r.state)}</td>"
            f"<td>{_e(config_label(r.config))}</td><td>{fmt(r.tok_per_s)}</td>"
            f"<td>{fmt(r.speedup, '.3f')}{early if r.speedup is not None else ''}</td>"
            f"<td>{fmt(vs, '.3f')}{early if vs is not None else ''}</td>"
            f"<td>{_e(measured(r, n_levels))}</td><td>{fmt(r.accept_length, '.2f')}</td>"
            f"<td>{fmt(r.startup_s, '.0f')}</td><td>{_e(note)}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _plots(study: optuna.Study, report: Report) -> list[str]:
    """The review plots (``autotune.plots``); plotly.js is inlined with the first one only."""
    from autotune.plots import figures

    parts: list[str] = []
    first = True
    for key, title, fig in figures(study, report):
        parts.append(f"<h2>{_e(title)}</h2>")
        if fig is None:
            parts.append(f"<p class='noplot' id='plot-{key}'>not available: nothing to draw yet</p>")
            continue
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs=first, div_id=f"plot-{key}", config={"displaylogo": False})
        )
        first = False
    return parts


def _positions(report: Report) -> list[str]:
    """Per-position acceptance (``render.position_rows``)."""
    rows = position_rows(report)
    if not rows:
        return []
    k = max(len(pos.rates) for _, _, pos in rows)
    head = "".join(f"<th>{i}</th>" for i in range(1, k + 1))
    parts = [
        "<h2>Per-position acceptance</h2><p>P(first i draft tokens accepted) for each position i, and below it the "
        "expected accepted draft tokens at depth k (the sum of the first k). It explains a config's acceptance; the "
        "ranking is measured throughput.</p>",
        f"<table><tr><th>config</th><th>trial</th><th>drafts</th><th></th>{head}</tr>",
    ]
    for who, trial, pos in rows:
        rates = "".join(f"<td>{x:.3f}</td>" for x in pos.rates)
        prof = "".join(f"<td>{x:.2f}</td>" for x in pos.profile or [])
        parts.append(
            f"<tr><td rowspan='2'>{_e(who)}</td><td rowspan='2'>{trial}</td>"
            f"<td rowspan='2'>{pos.drafts}</td><td>P(first i)</td>{rates}</tr>"
            f"<tr><td>E[accepted | depth k]</td>{prof}</tr>"
        )
    parts.append("</table>")
    return parts

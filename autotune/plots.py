"""The HTML report's plots (plotly figures, SVG only: no WebGL), each read at a glance by a reviewer:

- ``history``: tok/s of every trial against the baselines, over the study's GPU time
- ``prompts``: per-prompt tok/s of the confirmed candidates against the fastest baseline
- ``acceptance``: acceptance length against tok/s, per speculative trial
- ``knobs``: knob by knob (one slice per knob: its value against tok/s)
- ``intervals``: the confirmation intervals (speedup against the fastest baseline), with 1.0 marked
- ``timeline``: the server starts, start-up against benchmark time

Times are the measured hardware's (a simulated study's: simulated hardware time, and every title says so).
Pure over the study's trials and the report dict; ``figures`` returns ``(key, title, figure or None)``.
"""

from __future__ import annotations

from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from autotune import records
from autotune.records import TrialRecord
from autotune.render import config_label

COLOURS = {"COMPLETE": "#3366cc", "PRUNED": "#aaaaaa", "FAIL": "#cc3333", "baseline": "#222222"}
PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00")


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=kw.pop("height", 420), margin={"t": 60}, **kw)
    return fig


def _seconds(t: FrozenTrial) -> tuple[float, float]:
    """(startup, benchmark) hardware seconds of one server start."""
    r = TrialRecord(t)
    return (r.startup_s or 0.0), sum(p.get("seconds") or 0.0 for p in r.prompts)


def _starts(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that started a server, in order (duplicates and configs refused before launch did not)."""
    out = []
    for t in sorted(records.trials(study), key=lambda t: t.number):
        r = TrialRecord(t)
        if not r.is_duplicate and (r.measured or r.startup_s is not None):
            out.append(t)
    return out


def _tok_per_s(t: FrozenTrial) -> float | None:
    """COMPLETE: the objective; PRUNED: tok/s over the prompts it measured."""
    if t.state == TrialState.COMPLETE:
        return t.value
    ps = TrialRecord(t).prompts
    secs = sum(p.get("seconds") or 0.0 for p in ps)
    return sum(p.get("completion_tokens") or 0 for p in ps) / secs if ps and secs > 0 else None


def history(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    starts = _starts(study)
    if not starts:
        return None
    fig = go.Figure()
    clock, xs = 0.0, {}
    for t in starts:
        a, b = _seconds(t)
        clock += a + b
        xs[t.number] = clock / 3600
    for state in ("COMPLETE", "PRUNED", "FAIL"):
        pts = [t for t in starts if t.state.name == state and not TrialRecord(t).is_baseline]
        pts = [(t, _tok_per_s(t)) for t in pts]
        pts = [(t, v) for t, v in pts if v is not None]
        if not pts:
            continue
        fig.add_trace(
            go.Scatter(
                x=[xs[t.number] for t, _ in pts],
                y=[v for _, v in pts],
                mode="markers",
                name=f"{state.lower()} trials",
                marker={"color": COLOURS[state], "size": 9},
                text=[f"#{t.number} {config_label(TrialRecord(t).shown_config)}" for t, _ in pts],
                hovertemplate="%{text}<br>%{y:.1f} tok/s<extra></extra>",
            )
        )
    for _key, b in sorted(report["baseline"].items()):
        fig.add_hline(
            y=b["tok_per_s"],
            line_dash="dash" if b["cuda_graph"] else "dot",
            line_color=COLOURS["baseline"],
            annotation_text=f"baseline, graphs {'on' if b['cuda_graph'] else 'off'}: {b['tok_per_s']:.1f}",
        )
    return _layout(
        fig,
        f"tok/s of every trial against the baseline{sim}",
        xaxis_title=f"GPU time at the trial's end (h){sim}",
        yaxis_title=units,
    )


def per_prompt(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    fastest = report.get("fastest_baseline")
    confirmed = report.get("confirmed") or []
    if not fastest or not confirmed:
        return None
    ids = records.prompt_ids(study) or [str(i) for i in range(len(fastest["per_prompt_tok_per_s"]))]
    by_number = {t.number: t for t in records.trials(study)}
    fig = go.Figure()
    base = fastest["per_prompt_tok_per_s"]
    fig.add_trace(
        go.Bar(
            x=ids[: len(base)], y=base, name=f"baseline (trial {fastest['trial']})", marker_color=COLOURS["baseline"]
        )
    )
    for i, c in enumerate(confirmed):
        t = by_number.get(c["trial"])
        if t is None:
            continue
        ys = [t.intermediate_values[s] for s in sorted(t.intermediate_values)]
        fig.add_trace(
            go.Bar(
                x=ids[: len(ys)],
                y=ys,
                name=f"#{c['trial']} {config_label(c['config'])}",
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    return _layout(
        fig,
        f"per-prompt tok/s: confirmed candidates against the fastest baseline{sim}",
        barmode="group",
        yaxis_title=units,
        xaxis_title="prompt",
        legend={"orientation": "h", "y": -0.25},
        height=480,
    )


def acceptance(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    rows = [
        r
        for r in report["trials"]
        if r["role"] == records.ROLE_SPECULATIVE and r["accept_length"] is not None and r["duplicate_of"] is None
    ]
    by_number = {t.number: t for t in records.trials(study)}
    pts = [(r, _tok_per_s(by_number[r["number"]])) for r in rows]
    pts = [(r, v) for r, v in pts if v is not None]
    if not pts:
        return None
    fig = go.Figure()
    drafters = sorted({(r["config"] or {}).get("drafter") or "?" for r, _ in pts})
    for i, d in enumerate(drafters):
        mine = [(r, v) for r, v in pts if ((r["config"] or {}).get("drafter") or "?") == d]
        fig.add_trace(
            go.Scatter(
                x=[r["accept_length"] for r, _ in mine],
                y=[v for _, v in mine],
                mode="markers",
                name=d,
                marker={
                    "color": PALETTE[i % len(PALETTE)],
                    "size": 9,
                    "symbol": ["circle" if r["state"] == "COMPLETE" else "circle-open" for r, _ in mine],
                },
                text=[f"#{r['number']} {config_label(r['config'])} ({r['state'].lower()})" for r, _ in mine],
                hovertemplate="%{text}<br>accept %{x:.2f}, %{y:.1f} tok/s<extra></extra>",
            )
        )
    fastest = report.get("fastest_baseline")
    if fastest:
        fig.add_hline(
            y=fastest["tok_per_s"], line_dash="dash", line_color=COLOURS["baseline"], annotation_text="fastest baseline"
        )
    return _layout(
        fig,
        f"acceptance length against tok/s (open: pruned){sim}",
        xaxis_title="mean acceptance length",
        yaxis_title=units,
    )


def knobs(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    rows = [
        r
        for r in report["trials"]
        if r["role"] == records.ROLE_SPECULATIVE
        and r["state"] == "COMPLETE"
        and r["config"]
        and r["duplicate_of"] is None
    ]
    if not rows:
        return None
    names = ["drafter", "cuda_graph"] + sorted(
        {k for r in rows for k in r["config"] if k not in ("drafter", "cuda_graph")}
    )
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, subplot_titles=names)
    for i, name in enumerate(names, start=1):
        xs = [str(r["config"].get(name)) if name in ("drafter", "cuda_graph") else r["config"].get(name) for r in rows]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[r["tok_per_s"] for r in rows],
                mode="markers",
                showlegend=False,
                marker={"color": [r["tok_per_s"] for r in rows], "colorscale": "Viridis", "size": 8},
                text=[f"#{r['number']} {config_label(r['config'])}" for r in rows],
                hovertemplate="%{text}<br>%{y:.1f} tok/s<extra></extra>",
            ),
            row=1,
            col=i,
        )
    fig.update_yaxes(title_text=units, row=1, col=1)
    return _layout(fig, f"knob by knob: each measured config's tok/s against the knob's value{sim}")


def intervals(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    conf = [c for c in report.get("confirmed") or [] if c.get("deploy_speedup_ci") or c.get("speedup_ci")]
    if not conf:
        return None
    fig = go.Figure()
    cis = [c.get("deploy_speedup_ci") or c["speedup_ci"] for c in conf]
    labels = [
        f"#{c['trial']} {config_label(c['config'])}" + (" - out of the race" if c.get("dropped") else "") for c in conf
    ]
    fig.add_trace(
        go.Scatter(
            x=[ci["point"] for ci in cis],
            y=labels,
            mode="markers",
            marker={"size": 11, "color": COLOURS["COMPLETE"]},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [ci["high"] - ci["point"] for ci in cis],
                "arrayminus": [ci["point"] - ci["low"] for ci in cis],
            },
            showlegend=False,
            hovertemplate="%{y}<br>speedup %{x:.3f}<extra></extra>",
        )
    )
    fig.add_vline(x=1.0, line_dash="dash", line_color=COLOURS["baseline"], annotation_text="baseline")
    fig.update_yaxes(automargin=True)
    conf_level = cis[0].get("confidence") or 0.95
    return _layout(
        fig,
        f"confirmation: speedup against the fastest baseline, {conf_level:.0%} intervals{sim}",
        xaxis_title="speedup",
        height=max(260, 80 + 50 * len(conf)),
        margin_l=20,
    )


def timeline(study: optuna.Study, report: dict[str, Any], units: str, sim: str) -> go.Figure | None:
    starts = _starts(study)
    if not starts:
        return None
    labels, up, bench, base = [], [], [], []
    clock = 0.0
    for t in starts:
        a, b = _seconds(t)
        labels.append(f"#{t.number} {t.state.name.lower()}")
        base.append(clock / 60)
        up.append(a / 60)
        bench.append(b / 60)
        clock += a + b
    fig = go.Figure()
    fig.add_trace(go.Bar(y=labels, x=up, base=base, orientation="h", name="start-up", marker_color="#ff9900"))
    fig.add_trace(
        go.Bar(
            y=labels,
            x=bench,
            base=[b + u for b, u in zip(base, up, strict=True)],
            orientation="h",
            name="benchmark",
            marker_color=COLOURS["COMPLETE"],
        )
    )
    fig.update_yaxes(autorange="reversed")
    return _layout(
        fig,
        f"server starts: start-up against benchmark time{sim}",
        barmode="overlay",
        xaxis_title=f"GPU time (min){sim}",
        height=max(300, 60 + 18 * len(starts)),
    )


PLOTS = (
    ("history", "tok/s of every trial over time", history),
    ("prompts", "Per-prompt tok/s of the confirmed candidates", per_prompt),
    ("acceptance", "Acceptance length against tok/s", acceptance),
    ("knobs", "Knob by knob", knobs),
    ("intervals", "Confirmation intervals", intervals),
    ("timeline", "Timeline of server starts", timeline),
)


def figures(study: optuna.Study, report: dict[str, Any]) -> list[tuple[str, str, go.Figure | None]]:
    sim = " [simulated hardware time]" if report.get("simulated") else ""
    units = report.get("units") or "tok/s"
    return [(key, title, fn(study, report, units, sim)) for key, title, fn in PLOTS]

"""The HTML report's plots (plotly figures, SVG only: no WebGL), each read at a glance by a reviewer (``PLOTS``).
Times are the measured hardware's (a simulated study's: simulated hardware time, and every title says so)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from autotune import records
from autotune.bill import bench_seconds, confirmation_starts, warmup_seconds
from autotune.config import config_label
from autotune.records import TrialRecord
from autotune.stats import Interval

if TYPE_CHECKING:
    from autotune.report import Report

COLOURS = {"COMPLETE": "#3366cc", "PRUNED": "#aaaaaa", "FAIL": "#cc3333", "baseline": "#222222"}
PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00")


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=kw.pop("height", 420), margin={"t": 60}, **kw)
    return fig


def _seconds(t: FrozenTrial) -> tuple[float, float]:
    """(startup, benchmark) hardware seconds of one server start (its warm-up passes, prompts and load levels)."""
    return (TrialRecord(t).startup_s or 0.0), warmup_seconds(t) + bench_seconds(t)


def _starts(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that started a server, in order (duplicates and configs refused before launch did not)."""
    out = []
    for t in sorted(records.trials(study), key=lambda t: t.number):
        r = TrialRecord(t)
        if not r.is_duplicate and (r.measured or r.startup_s is not None):
            out.append(t)
    return out


def _value(t: FrozenTrial, report: Report) -> float | None:
    """A trial in the objective's unit: COMPLETE, its objective value; stopped early (PRUNED), the fastest
    baseline's objective times the trial's speedup over what it measured (``study.result.objective_speedup``), so
    that a pruned point on a load study is aggregate tok/s like the complete ones, not one stream's."""
    if t.state == TrialState.COMPLETE:
        return t.value
    row = report.row(t.number)
    fastest = report.result.fastest_baseline
    if row is None or not fastest or row.speedup_vs_fastest is None or fastest.tok_per_s is None:
        return None
    return fastest.tok_per_s * row.speedup_vs_fastest


def _estimated(report: Report) -> str:
    return "levels measured" if report.objective.weights else "prompts measured"


def history(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
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
        trials = [t for t in starts if t.state.name == state and not TrialRecord(t).is_baseline]
        pts = [(t, v) for t in trials if (v := _value(t, report)) is not None]
        if not pts:
            continue
        fig.add_trace(
            go.Scatter(
                x=[xs[t.number] for t, _ in pts],
                y=[v for _, v in pts],
                mode="markers",
                name=f"{state.lower()} trials"
                + (f" (estimated from the {_estimated(report)})" if state == "PRUNED" else ""),
                marker={"color": COLOURS[state], "size": 9},
                text=[f"#{t.number} {config_label(TrialRecord(t).shown_config)}" for t, _ in pts],
                hovertemplate="%{text}<br>%{y:.1f} tok/s<extra></extra>",
            )
        )
    for _key, base in sorted(report.result.baselines.items()):
        fig.add_hline(
            y=base.tok_per_s,
            line_dash="dash" if base.cuda_graph else "dot",
            line_color=COLOURS["baseline"],
            annotation_text=f"baseline, graphs {'on' if base.cuda_graph else 'off'}: {base.tok_per_s:.1f}",
        )
    return _layout(
        fig,
        f"the objective of every trial against the baseline{sim}",
        xaxis_title=f"GPU time at the trial's end (h){sim}",
        yaxis_title=units + (" (the objective)" if report.objective.weights else ""),
    )


def per_prompt(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
    """Each prompt's tok/s, one stream (with load levels: level 1 only, and the title says so)."""
    fastest = report.result.fastest_baseline
    confirmed = report.result.confirmed
    if not fastest or not confirmed:
        return None
    loaded = bool(report.objective.weights)
    ids = records.prompt_ids(study) or [str(i) for i in range(len(fastest.per_prompt_tok_per_s))]
    n = len(ids)
    by_number = {t.number: t for t in records.trials(study)}
    fig = go.Figure()
    base = list(fastest.per_prompt_tok_per_s[:n])  # with load levels the later steps are the levels' streams
    fig.add_trace(
        go.Bar(x=ids[: len(base)], y=base, name=f"baseline (trial {fastest.trial})", marker_color=COLOURS["baseline"])
    )
    for i, c in enumerate(confirmed):
        t = by_number[c.trial]
        ys = [t.intermediate_values[s] for s in sorted(t.intermediate_values) if s < n]
        fig.add_trace(
            go.Bar(
                x=ids[: len(ys)],
                y=ys,
                name=f"#{c.trial} {config_label(c.config)}",
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    where = ", load level 1 only (one stream; other levels: the load-level table)" if loaded else ""
    return _layout(
        fig,
        f"per-prompt tok/s{where}{sim}",
        barmode="group",
        yaxis_title=units + (" (one stream)" if loaded else ""),
        xaxis_title="prompt",
        legend={"orientation": "h", "y": -0.25},
        height=480,
    )


def acceptance(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
    rows = [r for r in report.trials if r.speculative and r.accept_length is not None and r.duplicate_of is None]
    by_number = {t.number: t for t in records.trials(study)}
    pts = [(r, v) for r in rows if (v := _value(by_number[r.number], report)) is not None]
    if not pts:
        return None
    fig = go.Figure()
    drafters = sorted({(r.config or {}).get("drafter") or "?" for r, _ in pts})
    for i, d in enumerate(drafters):
        mine = [(r, v) for r, v in pts if ((r.config or {}).get("drafter") or "?") == d]
        fig.add_trace(
            go.Scatter(
                x=[r.accept_length for r, _ in mine],
                y=[v for _, v in mine],
                mode="markers",
                name=d,
                marker={
                    "color": PALETTE[i % len(PALETTE)],
                    "size": 9,
                    "symbol": ["circle" if r.state == "COMPLETE" else "circle-open" for r, _ in mine],
                },
                text=[f"#{r.number} {config_label(r.config)} ({r.state.lower()})" for r, _ in mine],
                hovertemplate="%{text}<br>accept %{x:.2f}, %{y:.1f} tok/s<extra></extra>",
            )
        )
    fastest = report.result.fastest_baseline
    if fastest:
        fig.add_hline(
            y=fastest.tok_per_s, line_dash="dash", line_color=COLOURS["baseline"], annotation_text="fastest baseline"
        )
    return _layout(
        fig,
        f"acceptance length against tok/s (open: pruned){sim}",
        xaxis_title="mean acceptance length",
        yaxis_title=units,
    )


def knobs(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
    """Knob by knob: each measured config's objective against the knob's value; pruned configs as open markers
    (in the same unit: estimated from what they measured)."""
    by_number = {t.number: t for t in records.trials(study)}
    rows = [
        r
        for r in report.trials
        if r.speculative and r.state in ("COMPLETE", "PRUNED") and r.config and r.duplicate_of is None
    ]
    pts = [(r, v) for r in rows if (v := _value(by_number[r.number], report)) is not None]
    if not pts:
        return None
    names = ["drafter", "cuda_graph"] + sorted(
        {k for r, _ in pts for k in r.config or {} if k not in ("drafter", "cuda_graph")}
    )
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, subplot_titles=names)
    top = max(v for _, v in pts)
    for i, name in enumerate(names, start=1):
        for state, symbol in (("COMPLETE", "circle"), ("PRUNED", "circle-open")):
            mine = [(r, v) for r, v in pts if r.state == state]
            if not mine:
                continue
            xs = [
                str((r.config or {}).get(name)) if name in ("drafter", "cuda_graph") else (r.config or {}).get(name)
                for r, _ in mine
            ]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[v for _, v in mine],
                    mode="markers",
                    name="complete" if state == "COMPLETE" else f"pruned (estimated from the {_estimated(report)})",
                    legendgroup=state,
                    showlegend=i == 1,
                    marker={
                        "color": [v for _, v in mine],
                        "colorscale": "Viridis",
                        "cmin": 0,
                        "cmax": top,
                        "size": 8,
                        "symbol": symbol,
                        "line": {"width": 1.5},
                    },
                    text=[f"#{r.number} {config_label(r.config)} ({state.lower()})" for r, _ in mine],
                    hovertemplate="%{text}<br>%{y:.1f} tok/s<extra></extra>",
                ),
                row=1,
                col=i,
            )
    fig.update_yaxes(title_text=units, row=1, col=1)
    return _layout(
        fig,
        f"knob by knob: each measured config's objective against the knob's value (open: pruned){sim}",
        legend={"orientation": "h", "y": -0.2},
    )


def interval_axis(cis: list[Interval], racing: list[bool]) -> tuple[float, float]:
    """The speedup axis: 1.0, every point and the intervals of the candidates still racing at the end, padded;
    a wider interval (a candidate out after few rounds: [0.167, 5.294]) is clipped at the edge, not allowed to
    squash the others into slivers."""
    core = [ci for ci, on in zip(cis, racing, strict=True) if on] or cis
    lo = min([1.0, *(ci.point for ci in cis), *(ci.low for ci in core)])
    hi = max([1.0, *(ci.point for ci in cis), *(ci.high for ci in core)])
    pad = max(0.15 * (hi - lo), 0.02)
    return lo - pad, hi + pad


def intervals(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
    conf = [(c, h) for c in report.result.confirmed if (h := c.headline)]
    if not conf:
        return None
    fig = go.Figure()
    cis = [h for _, h in conf]
    x0, x1 = interval_axis(cis, [not c.dropped for c, _ in conf])
    clipped = [ci.low < x0 or ci.high > x1 for ci in cis]
    labels = [
        f"#{c.trial} {config_label(c.config)}"
        + (" - out of the race" if c.dropped else "")
        + (" (interval clipped)" if cut else "")
        for (c, _), cut in zip(conf, clipped, strict=True)
    ]
    fig.add_trace(
        go.Scatter(
            x=[ci.point for ci in cis],
            y=labels,
            mode="markers",
            marker={"size": 11, "color": COLOURS["COMPLETE"]},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [min(ci.high, x1) - ci.point for ci in cis],
                "arrayminus": [ci.point - max(ci.low, x0) for ci in cis],
            },
            showlegend=False,
            customdata=[[ci.low, ci.high] for ci in cis],
            hovertemplate="%{y}<br>speedup %{x:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]<extra></extra>",
        )
    )
    for ci, label, cut in zip(cis, labels, clipped, strict=True):
        if not cut:
            continue
        ends = ([f"\u25c0 {ci.low:.3f}"] if ci.low < x0 else []) + ([f"{ci.high:.3f} \u25b6"] if ci.high > x1 else [])
        for text in ends:
            left = text.startswith("\u25c0")
            fig.add_annotation(
                x=x0 if left else x1,
                y=label,
                text=text,
                showarrow=False,
                xanchor="left" if left else "right",
                yshift=12,
                font={"size": 11, "color": COLOURS["FAIL"]},
            )
    fig.add_vline(x=1.0, line_dash="dash", line_color=COLOURS["baseline"], annotation_text="baseline")
    fig.update_xaxes(range=[x0, x1])
    fig.update_yaxes(automargin=True)
    conf_level = cis[0].confidence or 0.95
    return _layout(
        fig,
        f"confirmation: speedup against the fastest baseline, {conf_level * 100:.4g}% intervals{sim}"
        + (
            "<br><sup>the verdict's confidence, stricter for each extra look (Bonferroni): see the note above; "
            "a clipped interval's ends are printed at the edge</sup>"
        ),
        xaxis_title="speedup (the objective's)",
        height=max(300, 100 + 50 * len(conf)),
        margin_l=20,
        margin_t=80,
    )


def timeline(study: optuna.Study, report: Report, units: str, sim: str) -> go.Figure | None:
    """Every server start in order: the search's (measured) then confirmation's (estimated from their tok/s)."""
    starts = _starts(study)
    if not starts:
        return None
    search = [(f"#{t.number} {t.state.name.lower()}", *_seconds(t)) for t in starts]
    conf = records.confirmation(study) or records.ConfirmationState(keys=[])
    confirm = confirmation_starts(records.trials(study), conf)
    clock, base = 0.0, []
    for _label, a, b in [*search, *confirm]:
        base.append(clock / 60)
        clock += a + b
    labels, up, n = [x[0] for x in search], [a / 60 for _, a, _ in search], len(search)
    fig = go.Figure()
    fig.add_trace(go.Bar(y=labels, x=up, base=base[:n], orientation="h", name="start-up", marker_color="#ff9900"))
    fig.add_trace(
        go.Bar(
            y=labels,
            x=[b / 60 for _, _, b in search],
            base=[b + u for b, u in zip(base[:n], up, strict=True)],
            orientation="h",
            name="benchmark",
            marker_color=COLOURS["COMPLETE"],
        )
    )
    if confirm:
        fig.add_trace(
            go.Bar(
                y=[label for label, _, _ in confirm],
                x=[a / 60 + b / 60 for _, a, b in confirm],
                base=base[n:],
                orientation="h",
                name="confirmation start (as recorded; older rounds estimated from their tok/s)",
                marker_color="#109618",
            )
        )
    fig.update_yaxes(autorange="reversed")
    return _layout(
        fig,
        f"server starts: search (start-up, benchmark) then confirmation{sim}",
        barmode="overlay",
        xaxis_title=f"GPU time (min){sim}",
        height=max(300, 60 + 18 * (len(starts) + len(confirm))),
    )


PLOTS = (
    ("history", "tok/s of every trial over time", history),
    ("prompts", "Per-prompt tok/s of the confirmed candidates", per_prompt),
    ("acceptance", "Acceptance length against tok/s", acceptance),
    ("knobs", "Knob by knob", knobs),
    ("intervals", "Confirmation intervals", intervals),
    ("timeline", "Timeline of server starts", timeline),
)


def figures(study: optuna.Study, report: Report) -> list[tuple[str, str, go.Figure | None]]:
    sim = " [simulated hardware time]" if report.result.simulated else ""
    units = report.result.units or "tok/s"
    return [(key, title, fn(study, report, units, sim)) for key, title, fn in PLOTS]

"""Per-load-level speculation schedules: from the measured per-level figures to the draft length each level should
use. Pure (plain dicts in, plain data out). Each server's own form of a schedule is its backend's
(``Backend.schedule_launch``); which knob is the draft length and which stay fixed too (``Backend.schedule_knob``,
``schedule_static_knobs``).

The static part (drafter, CUDA graphs, topk) is the recommended config's; at each level the draft length is the
best measured config sharing that static part (highest speedup over the baseline's same level, within the latency
limits there; within 1% of it, the shortest draft). A level where none clears ``1 + min_gain`` turns speculation
off there and at every level above it (the gain shrinks with load).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.backends import backend_class
from autotune.records import LevelRow

#: at a level, configs within this share of the best speedup count as tied; the shortest draft among them is taken
#: (vLLM PR #49163's rule: ties within 1% go to the smaller K)
TIE = 0.01


def _static(config: Mapping[str, Any], static_knobs: tuple[str, ...]) -> tuple[Any, ...]:
    return (config.get("drafter"), config.get("cuda_graph"), *(config.get(k) for k in static_knobs))


def build(
    rows: Sequence[LevelRow],
    levels: Sequence[int],
    recommended: Mapping[str, Any] | None,
    *,
    backend: str,
    min_gain: float,
) -> dict[str, Any]:
    """``rows``: measured speculative trials' per-level speedups (``records.level_rows``);
    ``backend``: the study's backend name (its ``schedule_knob`` is the draft length).
    Returns ``{"static": {...}, "levels": [{"level", "draft", "trial", "config", "speedup"}, ...], "on_up_to"}``;
    ``draft`` 0 = speculation off at that level. ValueError for a backend without a draft-length knob."""
    cls = backend_class(backend)
    knob, static_knobs = cls.schedule_knob, cls.schedule_static_knobs
    if knob is None:
        raise ValueError(f"{cls.display_name or backend} has no draft-length knob: no per-level schedule")
    static = dict(recommended or {})
    ok = [(r, r.config) for r in rows if not r.lossy and r.levels and r.config]
    if not static.get("drafter") and ok:  # the baseline was recommended: the static part of the best at level 1
        static = dict(max(ok, key=lambda rc: _speedup(rc[0], levels[0]) or 0.0)[1])
    key = _static(static, static_knobs)
    same = [(r, cfg) for r, cfg in ok if _static(cfg, static_knobs) == key]
    out: list[dict[str, Any]] = []
    off = False
    for c in levels:
        scored = [(s, r, cfg) for r, cfg in same if (s := _speedup(r, c, within_slo=True)) is not None]
        best = max(scored, key=lambda x: x[0], default=None)
        if best is not None:  # ties within TIE go to the shorter draft (less compute, safer as load grows)
            close = [x for x in scored if x[0] >= best[0] * (1.0 - TIE)]
            best = min(close, key=lambda x: (int(x[2].get(knob) or 0), -x[0]))
        if off or best is None or best[0] < 1.0 + min_gain:
            off = True
            out.append({"level": c, "draft": 0, "trial": None, "config": None, "speedup": best[0] if best else None})
            continue
        s, r, cfg = best
        out.append({"level": c, "draft": int(cfg.get(knob) or 0), "trial": r.trial, "config": dict(cfg), "speedup": s})
    on = [x["level"] for x in out if x["draft"] > 0]
    static_out = {k: static.get(k) for k in ("drafter", "cuda_graph", *static_knobs) if static.get(k) is not None}
    return {"static": static_out, "draft_knob": knob, "levels": out, "on_up_to": max(on) if on else None}


def _speedup(row: LevelRow, c: int, within_slo: bool = False) -> float | None:
    """The row's speedup at level ``c`` (None: not measured, or with ``within_slo`` a latency limit broken there)."""
    x = next((x for x in row.levels if x.level == c), None)
    v = x.speedup if x else None
    return None if v is None or (within_slo and x and x.slo_broken) else float(v)


def render_text(schedule: Mapping[str, Any]) -> str:
    lines = [f"schedule (static: {json.dumps(schedule['static'], sort_keys=True)}; draft = {schedule['draft_knob']}):"]
    for x in schedule["levels"]:
        s = f"{x['speedup']:.3f}x" if x.get("speedup") is not None else "-"
        what = f"draft {x['draft']} (trial {x['trial']})" if x["draft"] else "off"
        lines.append(f"  {x['level']:>5} streams: {what:<22} {s}")
    return "\n".join(lines)


def batch_ranges(schedule: Mapping[str, Any]) -> list[list[int]]:
    """``[[start, end, K], ...]`` batch-size ranges: level i covers batch sizes above level i-1 up to level i
    (the engines' per-batch-size forms: vLLM's ``num_speculative_tokens_per_batch_size``, SGLang's adaptive
    config keys); batch sizes above the highest level are not covered (never
    measured). Adjacent ranges with the same K are merged."""
    out: list[list[int]] = []
    prev = 0
    for x in schedule["levels"]:
        c, k = int(x["level"]), int(x["draft"])
        if out and out[-1][2] == k:
            out[-1][1] = c
        else:
            out.append([prev + 1, c, k])
        prev = c
    return out

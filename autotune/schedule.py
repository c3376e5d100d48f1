"""Per-load-level speculation schedules: from the measured per-level figures to the draft length each level should
use, and that schedule in each engine's own format. Pure (plain dicts in, plain data out).

The static part (drafter, CUDA graphs, topk) is the recommended config's; at each level the draft length is the
best measured config sharing that static part (highest speedup over the baseline's same level, within the latency
limits there; within 1% of it, the shortest draft). A level where none clears ``1 + min_gain`` turns speculation
off there and at every level above it (the gain shrinks with load).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: the knob that is the draft length, per backend (SGLang: draft steps; llama.cpp: the longest draft)
DRAFT_KNOB = {"sglang": "num_steps", "vllm": "num_speculative_tokens", "llamacpp": "draft_n_max"}
#: at a level, configs within this share of the best speedup count as tied; the shortest draft among them is taken
#: (vLLM PR #49163's rule: ties within 1% go to the smaller K)
TIE = 0.01
#: knobs that stay fixed across levels (besides drafter and CUDA graphs)
STATIC_KNOBS = ("topk", "spec_type", "method")


def _static(config: Mapping[str, Any]) -> tuple[Any, ...]:
    return (config.get("drafter"), config.get("cuda_graph"), *(config.get(k) for k in STATIC_KNOBS))


def build(
    rows: Sequence[Mapping[str, Any]],
    levels: Sequence[int],
    recommended: Mapping[str, Any] | None,
    *,
    backend: str,
    min_gain: float,
) -> dict[str, Any]:
    """``rows``: measured speculative trials as ``{"trial", "config", "levels": [level summaries], "lossy"}``.
    Returns ``{"static": {...}, "levels": [{"level", "draft", "trial", "config", "speedup"}, ...], "on_up_to"}``;
    ``draft`` 0 = speculation off at that level."""
    knob = DRAFT_KNOB.get(backend, "num_steps")
    static = dict(recommended or {})
    ok = [r for r in rows if not r.get("lossy") and r.get("levels") and r.get("config")]
    if not static.get("drafter") and ok:  # the baseline was recommended: the static part of the best at level 1
        static = dict(max(ok, key=lambda r: _speedup(r, levels[0]) or 0.0)["config"])
    key = _static(static)
    same = [r for r in ok if _static(r["config"]) == key]
    out: list[dict[str, Any]] = []
    off = False
    for c in levels:
        scored = [(s, r) for r in same if (s := _speedup(r, c)) is not None and not _broken(r, c)]
        best = max(scored, key=lambda x: x[0], default=None)
        if best is not None:  # ties within TIE go to the shorter draft (less compute, safer as load grows)
            close = [x for x in scored if x[0] >= best[0] * (1.0 - TIE)]
            best = min(close, key=lambda x: (int(x[1]["config"].get(knob) or 0), -x[0]))
        if off or best is None or best[0] < 1.0 + min_gain:
            off = True
            out.append({"level": c, "draft": 0, "trial": None, "config": None, "speedup": best[0] if best else None})
            continue
        s, r = best
        out.append(
            {
                "level": c,
                "draft": int(r["config"].get(knob) or 0),
                "trial": r.get("trial"),
                "config": dict(r["config"]),
                "speedup": s,
            }
        )
    on = [x["level"] for x in out if x["draft"] > 0]
    static_out = {k: static.get(k) for k in ("drafter", "cuda_graph", *STATIC_KNOBS) if static.get(k) is not None}
    return {"static": static_out, "draft_knob": knob, "levels": out, "on_up_to": max(on) if on else None}


def _level(row: Mapping[str, Any], c: int) -> Mapping[str, Any] | None:
    return next((x for x in row.get("levels", []) if int(x.get("level", -1)) == c), None)


def _speedup(row: Mapping[str, Any], c: int) -> float | None:
    x = _level(row, c)
    v = x.get("speedup") if x else None
    return float(v) if v is not None else None


def _broken(row: Mapping[str, Any], c: int) -> bool:
    x = _level(row, c)
    return bool(x and x.get("slo_broken"))


def batch_ranges(schedule: Mapping[str, Any]) -> list[list[int]]:
    """``[[start, end, K], ...]`` batch-size ranges: level i covers batch sizes above level i-1 up to level i
    (vLLM's ``num_speculative_tokens_per_batch_size``); batch sizes above the highest level are not covered
    (never measured). Adjacent ranges with the same K are merged."""
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


def vllm_config(schedule: Mapping[str, Any], *, method: str, model: str) -> dict[str, Any]:
    """vLLM's ``--speculative-config``: the static drafter and, per batch-size range, the draft length."""
    ks = [int(x["draft"]) for x in schedule["levels"]]
    return {
        "method": method,
        "model": model,
        "num_speculative_tokens": max(ks) if ks else 0,
        "num_speculative_tokens_per_batch_size": batch_ranges(schedule),
    }


def sglang_adaptive(schedule: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's ``--speculative-adaptive-config`` file: one entry per batch-size range of ``batch_ranges``, keyed by
    the range's first batch size (an integer string), ``{"candidate_steps": [K]}`` with the schedule's draft length
    there (0: no speculation). Format as SGLang 0.5.23 reads it (``speculative/adaptive_spec_params.py``,
    ``_load_adaptive_config``: at least one integer-string key, each ``candidate_steps`` a non-empty list of
    non-negative ints). SGLang routes a decode batch (padded up to a captured CUDA-graph size) to the entry with the
    largest key not above it, and within an entry moves between its candidate steps by the acceptance it observes
    (an EMA); one candidate per entry pins the measured draft length. Batches above the highest level use the last
    entry."""
    return {str(start): {"candidate_steps": [int(k)]} for start, _end, k in batch_ranges(schedule)}


def sglang_initial_steps(schedule: Mapping[str, Any]) -> int:
    """The ``--speculative-num-steps`` to launch an adaptive SGLang server with: the first level's draft length (SGLang
    refuses a value that is in no entry's ``candidate_steps``)."""
    return int(schedule["levels"][0]["draft"])


def render_text(schedule: Mapping[str, Any]) -> str:
    lines = [f"schedule (static: {json.dumps(schedule['static'], sort_keys=True)}; draft = {schedule['draft_knob']}):"]
    for x in schedule["levels"]:
        s = f"{x['speedup']:.3f}x" if x.get("speedup") is not None else "-"
        what = f"draft {x['draft']} (trial {x['trial']})" if x["draft"] else "off"
        lines.append(f"  {x['level']:>5} streams: {what:<22} {s}")
    return "\n".join(lines)

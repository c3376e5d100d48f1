"""The Prometheus text exposition format (a server's ``/metrics``): series keyed canonically, summed by metric."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

__all__ = [
    "_LABEL",
    "_SAMPLE",
    "_parse_labels",
    "metric_by_label",
    "metric_total",
    "parse_prometheus",
    "per_position_deltas",
    "series_key",
]

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _parse_labels(text: str) -> list[tuple[str, str]]:
    labels: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            break
        value = m.group(2).replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")
        labels.append((m.group(1), value))
        pos = m.end()
    return sorted(labels)


def series_key(name: str, labels: Mapping[str, str] | None = None) -> str:
    """Canonical key of one series: ``name`` or ``name{a="x",b="y"}`` with labels sorted."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {series key: value}. Comments and malformed lines are skipped.

    Keys are canonical (``series_key``): the metric name alone, or with its labels sorted. ``NaN`` and
    ``+Inf`` parse as floats.
    """
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict(_parse_labels(m.group("labels") or ""))
        out[series_key(m.group("name"), labels)] = value
    return out


def metric_total(metrics: Mapping[str, float], name: str) -> float | None:
    """Sum of every series of metric ``name`` (all label sets); None when the metric is absent."""
    total = 0.0
    found = False
    for key, value in metrics.items():
        if key == name or (key.startswith(name) and key[len(name) :].startswith("{")):
            if math.isfinite(value):
                total += value
                found = True
    return total if found else None


def metric_by_label(metrics: Mapping[str, float], name: str, label: str) -> dict[str, float]:
    """Metric ``name`` summed per value of ``label`` over its other labels (e.g. a per-position counter over every
    engine): {label value: total}; series without ``label`` are left out, so is a non-finite value."""
    out: dict[str, float] = {}
    prefix = name + "{"
    for key, value in metrics.items():
        if not key.startswith(prefix) or not key.endswith("}") or not math.isfinite(value):
            continue
        labels = dict(_parse_labels(key[len(prefix) : -1]))
        if label in labels:
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def per_position_deltas(
    before: Mapping[str, float], after: Mapping[str, float], per_pos: str, drafts: str, label: str = "position"
) -> tuple[int, tuple[int, ...]] | None:
    """(drafts, accepted at each position) between two scrapes, from a counter per draft position (``per_pos``,
    label ``label`` = 0, 1, ...: drafts whose first i+1 tokens were accepted; vLLM's and llama-server's) and the
    drafts counter (verification steps); None when no draft was made, a counter is missing or a delta is negative
    (a restarted server)."""
    a, b = metric_total(after, drafts), metric_total(before, drafts)
    now = metric_by_label(after, per_pos, label)
    if a is None or not now:
        return None
    n = a - (b or 0.0)
    if n <= 0:
        return None
    then = metric_by_label(before, per_pos, label)
    try:
        depth = sorted(int(k) for k in now)
    except ValueError:
        return None
    if depth != list(range(len(depth))):
        return None
    accepted = tuple(now[str(i)] - then.get(str(i), 0.0) for i in depth)
    if any(x < 0 for x in accepted):
        return None
    return int(round(n)), tuple(int(round(x)) for x in accepted)

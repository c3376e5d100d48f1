"""Per-method results of a study whose space searches ``search.methods`` (pure, except ``from_study``'s reads).

What a report says per method: the best config of each method with its interval (the confirmed one where the
confirmation raced it, else its search figure), the acceptance of its measured trials as the explanation (never the
ranking: the ranking is measured throughput against the fastest baseline), the adaptive mode beside the tuned
static config it competes with, each prompt category's speedup per method, and one sentence naming the winner:
"n-gram wins on this prompt set: 1.31x [1.24, 1.38]; EAGLE-3 1.12x; MTP not available for this target".

The catalogue of the space's methods (labels, adaptive, why one is not available) and the prompts' categories are
recorded once per study as the study user attr ``methods`` (``record``, at seeding): the report reads the study
alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from autotune.backends.base import Backend
    from autotune.records import MethodCatalogue, MethodEntry
    from autotune.space import Space

__all__ = ["METHOD_TIE", "MIN_OWN_EVIDENCE", "TUNED_MIN_CONFIGS", "catalogue", "from_study", "record", "summarize"]

#: in a space with ``search.methods``, a method is judged on its own evidence only, and only once it has this many
#: measured configs of its own: the surrogate models it alone from then (``surrogate.MethodSurrogate``; before, a
#: wide prior), the launch gate and the leader prune leave its configs alone until then (``search.not_worth_a_start``,
#: ``pruner.BaselinePruner(leader_after=)``), the search does not stop settled before every available method has
#: them (``search.settled``), and the design gives each method at least enough configs to reach them after its server
#: defaults (``search.design_configs``). On #46's studies one method's data launched or pruned another's configs: an
#: n-gram config predicted 428 tok/s (truly 1,124, the best ~1,135) was not launched, a settled stop left n-gram
#: configs 0.9-1.8% better than its pick unmeasured
MIN_OWN_EVIDENCE = 3

#: two methods tie when each one's best was confirmed and their confirmed speedups are within this of each other:
#: confirmation's intervals (about +-5% after its rounds) cannot tell them apart, the race stops separating configs
#: within 1% (``confirm.RACE_TIE``), and 2% is how far from the best a recommendation may be and still be right.
#: The report then names every tied method ("EAGLE-3 and adaptive EAGLE-3 tie on this prompt set (within 2%:
#: either)"), the recommendation still one config: on #46's generated landscapes most wrong-method runs were such
#: pairs, their truths 0.996-0.999 of each other
METHOD_TIE = 0.02

#: a static method is "tuned" in a comparison only with at least this many configs measured (a config measured: a
#: trial that ran at least one timed prompt, complete or stopped early; no duplicate, nothing refused a start);
#: below it the comparison says how many configs it rests on: 2 of the 4 method studies of #46 set adaptive beside
#: an EAGLE-3 side of one config and read as adaptive matching tuned static EAGLE-3, which the grid contradicts
TUNED_MIN_CONFIGS = 3


def catalogue(space: Space, backend: Backend) -> MethodCatalogue | None:
    """The space's methods as a report needs them (None: the space has no ``search.methods``)."""
    if not space.search.methods:
        return None
    methods: dict[str, MethodEntry] = {}
    for name in space.search.methods:
        m = backend.methods[name]
        methods[name] = {
            "label": m.label,
            "adaptive": m.adaptive,
            "adapts": m.adapts,
            "unavailable": backend.method_unavailable(space, name),
        }
    return {"methods": methods, "categories": [p.category for p in space.benchmark.prompts]}


def record(study: optuna.Study, space: Space, backend: Backend) -> None:
    """Store ``catalogue`` on the study once (a method space only)."""
    from autotune import records

    info = catalogue(space, backend)
    if info is not None:
        records.set_method_catalogue(study, info)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _ci_text(ci: Mapping[str, Any] | None) -> str:
    return f" [{ci['low']:.2f}, {ci['high']:.2f}]" if ci else ""


def _geo(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(
    info: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    confirmed: Sequence[Mapping[str, Any]],
    best: Mapping[str, Any] | None,
    verdict: str,
    per_prompt: Mapping[int, Sequence[float | None]] | None = None,
    category_weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Per-method results from a report's trial rows (``speedup_vs_fastest``, ``accept_length``), its confirmed
    candidates and pick (``best``), its verdict, and ``per_prompt``: trial number -> per-prompt speedup over its
    baseline (for the category table), and the objective's ``category_weights`` when it weighs categories (the
    best of each method is then the best by that weighted objective)."""
    cat = info.get("methods") or {}
    confirmed_by = {c["trial"]: c for c in confirmed}
    speculative = [r for r in rows if r.get("role") == "speculative" and (r.get("config") or {}).get("method")]
    counted = [r for r in speculative if r.get("duplicate_of") is None]
    all_trials = len(counted)
    all_gpu = sum(float(r.get("gpu_s") or 0.0) for r in counted)
    out: list[dict[str, Any]] = []
    for name, m in cat.items():
        mine = [r for r in speculative if r["config"].get("method") == name]
        own = [r for r in mine if r.get("duplicate_of") is None]
        measured = [r for r in own if r.get("state") == "COMPLETE"]
        configs = [r for r in own if r.get("state") in ("COMPLETE", "PRUNED") and (r.get("prompts_measured") or 0) > 0]
        accepts = [r["accept_length"] for r in measured if r.get("accept_length") is not None]
        gpu_s = sum(float(r.get("gpu_s") or 0.0) for r in own)
        entry: dict[str, Any] = {
            "method": name,
            "label": m["label"],
            "adaptive": bool(m.get("adaptive")),
            "adapts": m.get("adapts"),
            "unavailable": m.get("unavailable"),
            "trials": len(own),
            "measured": len(measured),
            "configs_measured": len(configs),
            "tuned": len(configs) >= TUNED_MIN_CONFIGS,
            # its share of the search's speculative trials (duplicates use none) and of their server time
            "budget": {
                "trials": len(own),
                "trials_share": len(own) / all_trials if all_trials else None,
                "gpu_s": gpu_s,
                "gpu_share": gpu_s / all_gpu if all_gpu else None,
            },
            "accept_length": sum(accepts) / len(accepts) if accepts else None,
            "best": None,
        }
        entry["budget"]["text"] = _budget_text(entry)
        ours = [confirmed_by[r["number"]] for r in mine if r["number"] in confirmed_by]
        ours = [c for c in ours if (c.get("deploy_speedup_ci") or c.get("speedup_ci"))]
        if ours:
            c = max(ours, key=lambda c: (c.get("deploy_speedup_ci") or c["speedup_ci"])["point"])
            ci = c.get("deploy_speedup_ci") or c["speedup_ci"]
            row = next(r for r in mine if r["number"] == c["trial"])
            entry["best"] = {
                "trial": c["trial"],
                "config": c["config"],
                "speedup": ci["point"],
                "speedup_ci": ci,
                "confirmed": True,
                "accept_length": row.get("accept_length"),
            }
        else:
            fast = [r for r in measured if r.get("speedup_vs_fastest") is not None]
            pruned = not fast
            if pruned:  # only pruned trials: their figure over the prompts measured before they lost
                fast = [r for r in mine if r.get("duplicate_of") is None and r.get("speedup") is not None]
            if fast:
                key = "speedup" if pruned else "speedup_vs_fastest"
                r = max(fast, key=lambda r: r[key])
                entry["best"] = {
                    "trial": r["number"],
                    "config": r["config"],
                    "speedup": r[key],
                    "speedup_ci": None,
                    "confirmed": False,
                    "pruned": pruned,
                    "accept_length": r.get("accept_length"),
                }
        out.append(entry)
    winner = None
    if verdict == "speculation-wins" and best is not None:
        winner = (best.get("config") or {}).get("method")
    tied = _tied(out, winner)
    summary = {
        "methods": out,
        "winner": winner,
        "tied": tied,
        "text": _text(out, winner, tied),
        "adaptive": _adaptive_rows(out),
        "categories": _categories(out, info.get("categories") or [], per_prompt or {}),
    }
    if category_weights:  # the objective weighs categories (absent: as before)
        summary["category_weights"] = dict(category_weights)
    return summary


def _tied(out: list[dict[str, Any]], winner: str | None) -> list[str]:
    """The winner and every other method whose confirmed best is within ``METHOD_TIE`` of the winner's confirmed
    best (the winner first, the rest by speedup); empty when no other method ties or the winner's best was not
    confirmed."""
    w = next((e for e in out if e["method"] == winner), None)
    if w is None or w["best"] is None or not w["best"]["confirmed"]:
        return []
    top = float(w["best"]["speedup"])
    others = [
        e
        for e in out
        if e is not w
        and e["best"] is not None
        and e["best"]["confirmed"]
        and abs(float(e["best"]["speedup"]) - top) <= METHOD_TIE * max(top, float(e["best"]["speedup"]))
    ]
    if not others:
        return []
    return [w["method"]] + [e["method"] for e in sorted(others, key=lambda e: -float(e["best"]["speedup"]))]


def _text(out: list[dict[str, Any]], winner: str | None, tied: Sequence[str] = ()) -> str:
    ranked = sorted((e for e in out if e["best"] is not None), key=lambda e: e["best"]["speedup"], reverse=True)
    parts = []
    for e in ranked:
        b = e["best"]
        head = f"{e['label']} {_fmt(b['speedup'])}{_ci_text(b['speedup_ci'])}"
        if not b["confirmed"]:
            head += " (pruned in the search)" if b.get("pruned") else " (search, not confirmed)"
        parts.append(head)
    for e in out:
        if e["best"] is None:
            why = e["unavailable"] or ("nothing measured" if e["trials"] else "not tried")
            short = why.split(":")[0] if e["unavailable"] else why
            parts.append(f"{e['label']}: {short}")
    if winner is not None:
        w = next(e for e in out if e["method"] == winner)
        first = f"{w['label']} wins on this prompt set: "
        if tied:
            labels = [next(e["label"] for e in out if e["method"] == m) for m in tied]
            names = ", ".join(labels[:-1]) + " and " + labels[-1]
            first = f"{names} tie on this prompt set (within {METHOD_TIE:.0%}: either; {w['label']} recommended): "
        rest = [p for p in parts if not p.startswith(w["label"] + " ")]
        mine = next((p for p in parts if p.startswith(w["label"] + " ")), w["label"])
        return first + mine[len(w["label"]) + 1 :] + ("; " + "; ".join(rest) if rest else "")
    return "no method wins on this prompt set: " + "; ".join(parts)


def _adaptive_rows(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each adaptive method's best beside the tuned static config it competes with: the best static config of the
    method it adapts (adaptive MTP: MTP's), else of the same drafter, else the best static config of any method."""
    rows = []
    static = [e for e in out if not e["adaptive"] and e["best"] is not None]
    for e in out:
        if not e["adaptive"] or e["best"] is None:
            continue
        drafter = e["best"]["config"].get("drafter")
        if e.get("adapts"):
            same = [s for s in static if s["method"] == e["adapts"]]
        else:
            same = [s for s in static if s["best"]["config"].get("drafter") == drafter]
        pool = same or static
        if not pool:
            continue
        s = max(pool, key=lambda s: s["best"]["speedup"])
        a, b = e["best"], s["best"]
        tuned = bool(s.get("tuned"))
        rows.append(
            {
                "adaptive": a,
                "static": b,
                "static_method": s["method"],
                "static_configs": s.get("configs_measured"),
                "static_tuned": tuned,
                "text": f"{e['label']} {_fmt(a['speedup'])}{_ci_text(a['speedup_ci'])} "
                f"({_configs(e.get('configs_measured'))}) vs {'tuned static' if tuned else 'static'} "
                f"{_fmt(b['speedup'])}{_ci_text(b['speedup_ci'])} ({s['label']}, "
                f"{_configs(s.get('configs_measured'))}"
                + ("" if tuned else f": fewer than {TUNED_MIN_CONFIGS}, not a tuned static config")
                + ")",
            }
        )
    return rows


def _configs(n: int | None) -> str:
    n = int(n or 0)
    return f"{n} config{'' if n == 1 else 's'} measured"


def _budget_text(e: Mapping[str, Any]) -> str:
    """A method's measured configs and its share of the search: ``3 configs measured; 7 trials (18% of the
    search's), 0.52 h of server time (21%)``."""
    b = e.get("budget") or {}
    share = b.get("trials_share")
    gshare = b.get("gpu_share")
    return (
        f"{_configs(e.get('configs_measured'))}; {b.get('trials', e.get('trials', 0))} trials"
        + (f" ({share:.0%} of the search's)" if share is not None else "")
        + f", {float(b.get('gpu_s') or 0.0) / 3600:.2f} h of server time"
        + (f" ({gshare:.0%})" if gshare is not None else "")
    )


def _categories(
    out: list[dict[str, Any]], categories: Sequence[str | None], per_prompt: Mapping[int, Sequence[float | None]]
) -> dict[str, dict[str, float | None]]:
    """Each prompt category's speedup (geometric mean over its prompts, against the trial's own baseline) of each
    method's best config; empty without categories."""
    if not any(categories):
        return {}
    table: dict[str, dict[str, float | None]] = {}
    names = sorted({c for c in categories if c})
    for e in out:
        if e["best"] is None:
            continue
        ratios = per_prompt.get(e["best"]["trial"]) or []
        table[e["method"]] = {
            c: _geo([r for i, r in enumerate(ratios) if i < len(categories) and categories[i] == c and r])
            for c in names
        }
    return table


def from_study(study: optuna.Study, report: Mapping[str, Any]) -> dict[str, Any] | None:
    """``summarize`` for a study's report (None: not a method space)."""
    from autotune import records

    info = records.method_catalogue(study)
    if not info:
        return None
    from autotune.records import TrialRecord

    per_prompt: dict[int, list[float | None]] = {}
    by_number = {t.number: t for t in records.trials(study)}
    for row in report["trials"]:
        if row.get("role") != "speculative" or row.get("duplicate_of") is not None:
            continue
        t = by_number.get(row["number"])
        if t is None:
            continue
        r = TrialRecord(t)
        base = records.find_baseline(study, r.cuda_graph)
        if base is None:
            continue
        mine = {p.index: p.tok_per_s for p in r.prompt_results()}
        theirs = {p.index: p.tok_per_s for p in TrialRecord(base).prompt_results()}
        n = len(info.get("categories") or [])
        per_prompt[t.number] = [(a / b) if (a := mine.get(i)) and (b := theirs.get(i)) else None for i in range(n)]
    weights = (report.get("objective") or {}).get("category_weights")
    return summarize(
        info, report["trials"], report["confirmed"], report.get("best"), report["verdict"], per_prompt, weights
    )

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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from autotune.stats import START_NOISE, Interval, speedup_interval, start_prior
from autotune.study.levels import level_intervals, level_prior
from autotune.study.race import measured_prior, paired_logs

if TYPE_CHECKING:
    import optuna

    from autotune.backends.base import Backend
    from autotune.config import Config, KnobValue
    from autotune.records import LevelIntervals, MethodCatalogue, MethodEntry, Round
    from autotune.space import Space

#: trial a, trial b -> the interval of a's tok/s over b's within confirmation's rounds, or None
Versus = Callable[[int, int], Interval | None]


class LevelRow(TypedDict, total=False):
    """A trial row's figures at one load level (``LevelSummary.to_dict``), the fields read here."""

    level: int | None
    speedup: float | None
    slo_broken: list[str] | None


class Row(TypedDict, total=False):
    """A report's trial row (``report.TrialRow.to_json``), the fields read here."""

    number: int
    role: str | None
    state: str
    config: Config | None
    duplicate_of: int | None
    gpu_s: float | None
    prompts_measured: int | None
    accept_length: float | None
    speedup: float | None
    speedup_vs_fastest: float | None
    lossless: Mapping[str, object] | None
    levels: list[LevelRow]


class ConfirmedRow(TypedDict):
    """A confirmed candidate as the report holds it (``CandidateResult.summary``), the fields read here."""

    trial: int
    config: Config
    speedup_ci: dict[str, float] | None
    deploy_speedup_ci: dict[str, float] | None


class Best(TypedDict):
    """A method's best config: confirmed (its interval), else its search figure (``pruned``: only pruned trials
    had one; ``lossy``: no lossless config was measured)."""

    trial: int
    config: Config
    speedup: float
    speedup_ci: dict[str, float] | None
    confirmed: bool
    pruned: NotRequired[bool]
    accept_length: float | None
    lossy: NotRequired[bool]
    versus_winner: NotRequired[dict[str, float]]  # the interval of its tok/s over the winner's (``_tied``)


class Budget(TypedDict):
    """A method's share of the search's speculative trials and of their server time."""

    trials: int
    trials_share: float | None
    gpu_s: float
    gpu_share: float | None
    text: NotRequired[str]


class MethodResult(TypedDict):
    method: str
    label: str
    adaptive: bool
    adapts: str | None
    unavailable: str | None
    trials: int
    measured: int
    configs_measured: int
    tuned: bool
    budget: Budget
    accept_length: float | None
    best: Best | None


class LevelPick(TypedDict):
    trial: int
    speedup: float
    speedup_ci: dict[str, float] | None


class LevelComparison(TypedDict):
    """One load level: the adaptive best against the tuned static schedule's pick there."""

    level: int
    adaptive: LevelPick
    static: LevelPick
    versus: dict[str, float] | None
    text: str


class AdaptiveRow(TypedDict):
    """An adaptive method's best beside the static config it competes with (``levels``: with load levels)."""

    adaptive: Best
    static: Best
    static_method: str
    static_configs: int
    static_tuned: bool
    text: str
    levels: NotRequired[list[LevelComparison]]


class MethodSummary(TypedDict):
    """``summarize``: per method, the winner, the methods tied with it, in words, adaptive against static, and
    each prompt category's speedup per method."""

    methods: list[MethodResult]
    winner: str | None
    tied: list[str]
    text: str
    adaptive: list[AdaptiveRow]
    categories: dict[str, dict[str, float | None]]
    category_weights: NotRequired[dict[str, float]]


__all__ = [
    "METHOD_TIE",
    "MIN_OWN_EVIDENCE",
    "TUNED_MIN_CONFIGS",
    "Versus",
    "catalogue",
    "from_study",
    "paired_versus",
    "record",
    "summarize",
]

#: in a space with ``search.methods``, a method is judged on its own evidence only, and only once it has this many
#: measured configs of its own: the surrogate models it alone from then (``surrogate.MethodSurrogate``; before, a
#: wide prior), the launch gate and the leader prune leave its configs alone until then (``search.not_worth_a_start``,
#: ``pruner.BaselinePruner(leader_after=)``), the search does not stop settled before every available method has
#: them (``search.settled``), and the design gives each method at least enough configs to reach them after its server
#: defaults (``search.design_configs``). On #46's studies one method's data launched or pruned another's configs: an
#: n-gram config predicted 428 tok/s (truly 1,124, the best ~1,135) was not launched, a settled stop left n-gram
#: configs 0.9-1.8% better than its pick unmeasured
MIN_OWN_EVIDENCE = 3

#: two methods tie when each one's best was confirmed and either their confirmed speedups are within this of each
#: other (2% is how far from the best a recommendation may be and still be right; the race stops separating configs
#: within 1%, ``confirm.RACE_TIE``) or confirmation did not tell them apart: the two-sided interval, at the verdict's
#: confidence, of the other's tok/s over the winner's within each round (same fresh conditions, the start-to-start
#: noise as its prior, ``race.measured_prior``) reaches 1. The race drops a config at 80% one-sided
#: (``verdict.race_confidence``), enough to stop spending starts on it but not to say which method is faster: on
#: #46's generated landscapes most wrong-method runs were pairs whose truths were 0.998-0.999 of each other, one of
#: them dropped by the race after 4 rounds that put it 2.9% behind. The report then names every tied method
#: ("EAGLE-3 and adaptive tie on this prompt set (not told apart: adaptive 0.97x [0.93, 1.02] of EAGLE-3; ...)"),
#: the recommendation still one config
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
    return {
        "methods": methods,
        "categories": [p.category for p in space.benchmark.prompts],
        # what a tie between methods is judged with (``_tied``): the confirmation's prior and the verdict's confidence
        "start_noise": space.pruning.start_noise,
        "confidence": space.verdict.confidence,
    }


def record(study: optuna.Study, space: Space, backend: Backend) -> None:
    """Store ``catalogue`` on the study once (a method space only)."""
    from autotune import records

    info = catalogue(space, backend)
    if info is not None:
        records.set_method_catalogue(study, info)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _ci_text(ci: Interval | Mapping[str, float] | None) -> str:
    d = ci.to_dict() if isinstance(ci, Interval) else ci  # typed, or as the summary holds it
    return f" [{d['low']:.2f}, {d['high']:.2f}]" if d else ""


def _geo(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(
    info: MethodCatalogue,
    rows: Sequence[Row],
    confirmed: Sequence[ConfirmedRow],
    best: Row | None,
    verdict: str,
    per_prompt: Mapping[int, Sequence[float | None]] | None = None,
    category_weights: Mapping[str, float] | None = None,
    versus: Versus | None = None,
    rounds: Sequence[Round] = (),
) -> MethodSummary:
    """Per-method results from a report's trial rows (``speedup_vs_fastest``, ``accept_length``), its confirmed
    candidates and pick (``best``), its verdict, and ``per_prompt``: trial number -> per-prompt speedup over its
    baseline (for the category table), and the objective's ``category_weights`` when it weighs categories (the
    best of each method is then the best by that weighted objective), and ``versus``: trial a, trial b -> the
    interval of a's tok/s over b's within the confirmation's rounds (``paired_versus``; None: no tie by it), and
    confirmation's ``rounds`` (with load levels: each adaptive method against the tuned static schedule per level,
    ``_adaptive_levels``)."""
    cat = info.get("methods") or {}
    confirmed_by = {c["trial"]: c for c in confirmed}
    speculative = [r for r in rows if r.get("role") == "speculative" and (r.get("config") or {}).get("method")]
    counted = [r for r in speculative if r.get("duplicate_of") is None]
    all_trials = len(counted)
    all_gpu = sum(float(r.get("gpu_s") or 0.0) for r in counted)
    out: list[MethodResult] = []
    for name, m in cat.items():
        mine = [r for r in speculative if (r.get("config") or {}).get("method") == name]
        own = [r for r in mine if r.get("duplicate_of") is None]
        measured = [r for r in own if r.get("state") == "COMPLETE"]
        configs = [r for r in own if r.get("state") in ("COMPLETE", "PRUNED") and (r.get("prompts_measured") or 0) > 0]
        accepts = [a for r in measured if (a := r.get("accept_length")) is not None]
        gpu_s = sum(float(r.get("gpu_s") or 0.0) for r in own)
        entry: MethodResult = {
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
        headlines = [(ci, c) for c in ours if (ci := c.get("deploy_speedup_ci") or c.get("speedup_ci"))]
        if headlines:
            ci, c = max(headlines, key=lambda h: h[0]["point"])
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
            # a lossy config is no method's best while a lossless one was measured: it is not deployable (#46's
            # H100 run showed ngram-mod at a lossy config's 1.25x beside its lossless 1.43x)
            for lossy in (False, True):
                fast = [r for r in measured if r.get("speedup_vs_fastest") is not None and _lossy(r) is lossy]
                pruned = not fast
                if pruned:  # only pruned trials: their figure over the prompts measured before they lost
                    fast = [
                        r
                        for r in mine
                        if r.get("state") == "PRUNED"
                        and r.get("duplicate_of") is None
                        and r.get("speedup") is not None
                        and _lossy(r) is lossy
                    ]
                scored = [
                    (v, r)
                    for r in fast
                    if (v := r.get("speedup") if pruned else r.get("speedup_vs_fastest")) is not None
                ]
                if scored:
                    v, r = max(scored, key=lambda p: p[0])
                    best_here: Best = {
                        "trial": r["number"],
                        "config": r.get("config") or {},
                        "speedup": v,
                        "speedup_ci": None,
                        "confirmed": False,
                        "pruned": pruned,
                        "accept_length": r.get("accept_length"),
                    }
                    if lossy:
                        best_here["lossy"] = True
                    entry["best"] = best_here
                    break
        out.append(entry)
    winner = None
    if verdict == "speculation-wins" and best is not None:
        method = (best.get("config") or {}).get("method")
        winner = None if method is None else str(method)
    tied = _tied(out, winner, versus)
    summary: MethodSummary = {
        "methods": out,
        "winner": winner,
        "tied": tied,
        "text": _text(out, winner, tied),
        "adaptive": _adaptive_levels(_adaptive_rows(out), rows, rounds, info),
        "categories": _categories(out, info.get("categories") or [], per_prompt or {}),
    }
    if category_weights:  # the objective weighs categories (absent: as before)
        summary["category_weights"] = dict(category_weights)
    return summary


def _lossy(row: Row) -> bool:
    """Whether a trial row's answers left the baseline's where the baseline was confident (``lossless.ok`` False)."""
    return (row.get("lossless") or {}).get("ok") is False


def _tied(out: list[MethodResult], winner: str | None, versus: Versus | None = None) -> list[str]:
    """The winner and every other method whose confirmed best is within ``METHOD_TIE`` of the winner's confirmed
    best or that confirmation did not tell apart from it (``versus``' interval reaches 1; kept on the other's best
    as ``versus_winner``), the winner first, the rest by speedup; empty when no other method ties or the winner's
    best was not confirmed."""
    w = next((e for e in out if e["method"] == winner), None)
    wb = None if w is None else w["best"]
    if w is None or wb is None or not wb["confirmed"]:
        return []
    top = float(wb["speedup"])
    others: list[tuple[MethodResult, Best]] = []
    for e in out:
        b = e["best"]
        if e is w or b is None or not b["confirmed"]:
            continue
        mine = float(b["speedup"])
        iv = versus(b["trial"], wb["trial"]) if versus is not None else None
        if iv is not None:
            b["versus_winner"] = iv.to_dict()
        if abs(mine - top) <= METHOD_TIE * max(top, mine) or (iv is not None and iv.high >= 1.0):
            others.append((e, b))
    if not others:
        return []
    return [w["method"]] + [e["method"] for e, _ in sorted(others, key=lambda p: -float(p[1]["speedup"]))]


def _text(out: list[MethodResult], winner: str | None, tied: Sequence[str] = ()) -> str:
    ranked = sorted(((e, b) for e in out if (b := e["best"]) is not None), key=lambda p: p[1]["speedup"], reverse=True)
    parts = []
    for e, b in ranked:
        head = f"{e['label']} {_fmt(b['speedup'])}{_ci_text(b['speedup_ci'])}"
        if b.get("lossy"):
            head += " (lossy: every config measured changed the answers)"
        elif not b["confirmed"]:
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
            apart = [
                f"{e['label']} {_fmt(iv['point'])}{_ci_text(iv)} of {w['label']}"
                for e in out
                if e["method"] in tied[1:]
                and (b := e["best"]) is not None
                and (iv := b.get("versus_winner"))
                and iv["high"] >= 1.0
            ]
            why = f"not told apart, {', '.join(apart)}" if apart else f"within {METHOD_TIE:.0%}"
            first = f"{names} tie on this prompt set ({why}: either; {w['label']} recommended): "
        rest = [p for p in parts if not p.startswith(w["label"] + " ")]
        mine = next((p for p in parts if p.startswith(w["label"] + " ")), w["label"])
        return first + mine[len(w["label"]) + 1 :] + ("; " + "; ".join(rest) if rest else "")
    return "no method wins on this prompt set: " + "; ".join(parts)


def _adaptive_rows(out: list[MethodResult]) -> list[AdaptiveRow]:
    """Each adaptive method's best beside the tuned static config it competes with: the best static config of the
    method it adapts (adaptive MTP: MTP's), else of the same drafter, else the best static config of any method."""
    rows: list[AdaptiveRow] = []
    static = [(e, b) for e in out if not e["adaptive"] and (b := e["best"]) is not None]
    for e in out:
        a = e["best"]
        if not e["adaptive"] or a is None:
            continue
        drafter = a["config"].get("drafter")
        if e.get("adapts"):
            same = [(s, b) for s, b in static if s["method"] == e["adapts"]]
        else:
            same = [(s, b) for s, b in static if b["config"].get("drafter") == drafter]
        pool = same or static
        if not pool:
            continue
        s, b = max(pool, key=lambda p: p[1]["speedup"])
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


def _adaptive_levels(
    adaptive: list[AdaptiveRow], rows: Sequence[Row], rounds: Sequence[Round], info: MethodCatalogue
) -> list[AdaptiveRow]:
    """With load levels (#46): each adaptive row gets ``levels``, one entry per level: the adaptive best config
    (one config: the engine adapts it to the load itself) against the tuned static schedule's pick there (the
    static method's measured config fastest at that level within the latency limits, what a per-level schedule
    would run), each with its interval against the same round's fresh baseline where confirmation measured it in 2
    rounds or more (else its search figure), and the paired interval of adaptive over static within each round
    where both were. Unchanged without levels."""
    by_level: dict[int, dict[int, LevelRow]] = {}
    graph: dict[int, bool] = {}
    method: dict[int, KnobValue | None] = {}
    for r in rows:
        if r.get("role") != "speculative" or r.get("state") != "COMPLETE" or r.get("duplicate_of") is not None:
            continue
        if _lossy(r) or not r.get("levels"):
            continue
        by_level[r["number"]] = {int(c): lv for lv in r["levels"] if (c := lv.get("level")) is not None}
        graph[r["number"]] = bool((r.get("config") or {}).get("cuda_graph"))
        method[r["number"]] = (r.get("config") or {}).get("method")
    levels = sorted({c for lv in by_level.values() for c in lv})
    if not levels or not adaptive:
        return adaptive
    confidence = float(info.get("confidence", 0.95))
    prior = start_prior(float(info.get("start_noise", START_NOISE)))
    against_baseline: dict[int, LevelIntervals] = {}

    def vs_baseline(n: int, level: int) -> Interval | None:
        if n not in against_baseline:  # every level of one trial at once (``levels.level_intervals``)
            against_baseline[n] = level_intervals(n, graph[n], list(rounds), levels, confidence=confidence, prior=prior)
        return against_baseline[n].get(level)

    def paired(a: int, b: int, level: int) -> Interval | None:
        logs = paired_logs(rounds, a, b, level)
        p = level_prior(list(rounds), level, prior)
        return speedup_interval(logs, confidence, p) if len(logs) >= 2 else None

    def usable(n: int, level: int) -> float | None:
        lv = by_level.get(n, {}).get(level)
        if lv is None or lv.get("slo_broken"):
            return None
        v = lv.get("speedup")
        return float(v) if v else None

    out: list[AdaptiveRow] = []
    for row in adaptive:
        a = int(row["adaptive"]["trial"])
        static = [n for n in by_level if method[n] == row["static_method"]]
        per_level: list[LevelComparison] = []
        for c in levels:
            mine = usable(a, c)
            scored = [(v, n) for n in static if (v := usable(n, c)) is not None]
            if mine is None or not scored:
                continue
            v, s = max(scored)
            a_ci, s_ci, ratio = vs_baseline(a, c), vs_baseline(s, c), paired(a, s, c)
            a_pt = a_ci.point if a_ci else mine
            s_pt = s_ci.point if s_ci else v
            text = (
                f"{c} streams: adaptive {_fmt(a_pt)}{_ci_text(a_ci)}{'' if a_ci else ' (search)'} vs static "
                f"{_fmt(s_pt)}{_ci_text(s_ci)}{'' if s_ci else ' (search)'} (trial {s})"
                + (f"; adaptive over static {_fmt(ratio.point)}{_ci_text(ratio)}" if ratio else "")
            )
            per_level.append(
                {
                    "level": c,
                    "adaptive": {"trial": a, "speedup": a_pt, "speedup_ci": None if a_ci is None else a_ci.to_dict()},
                    "static": {"trial": s, "speedup": s_pt, "speedup_ci": None if s_ci is None else s_ci.to_dict()},
                    "versus": None if ratio is None else ratio.to_dict(),
                    "text": text,
                }
            )
        out.append(AdaptiveRow(**row, levels=per_level) if per_level else row)
    return out


def _configs(n: int | None) -> str:
    n = int(n or 0)
    return f"{n} config{'' if n == 1 else 's'} measured"


def _budget_text(e: MethodResult) -> str:
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
    out: list[MethodResult], categories: Sequence[str | None], per_prompt: Mapping[int, Sequence[float | None]]
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


def from_study(study: optuna.Study, report: Mapping[str, Any], rounds: Sequence[Round] = ()) -> dict[str, Any] | None:
    """``summarize`` for a study's report and confirmation's ``rounds`` (None: not a method space)."""
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
    versus = paired_versus(rounds, float(info.get("start_noise", START_NOISE)), float(info.get("confidence", 0.95)))
    return dict(  # as the report holds it
        summarize(
            info,
            report["trials"],
            report["confirmed"],
            report.get("best"),
            report["verdict"],
            per_prompt,
            weights,
            versus,
            rounds,
        )
    )


def paired_versus(rounds: Sequence[Round], start_noise: float, confidence: float) -> Versus:
    """``Versus`` over confirmation's ``rounds``: the two-sided interval at ``confidence`` of a's tok/s over b's
    within each round both were measured in, its spread from the start-to-start noise ``start_noise`` (worth
    ``stats.START_PRIOR_DF`` rounds, raised to what the rounds show: ``race.measured_prior``), as the candidates'
    own intervals are; None with fewer than 2 such rounds."""
    prior = measured_prior(list(rounds), start_prior(start_noise))

    def versus(a: int, b: int) -> Interval | None:
        logs = paired_logs(rounds, a, b)
        return speedup_interval(logs, confidence, prior) if len(logs) >= 2 else None

    return versus

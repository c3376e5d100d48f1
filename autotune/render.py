"""Report dict -> text for people (the JSON form is the report dict itself)."""

from __future__ import annotations

from typing import IO, Any


def _fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def config_label(cfg: dict[str, Any] | None) -> str:
    """``aq-medai num_steps=4,topk=1,... graphs off`` or ``baseline (graphs on)``."""
    cfg = cfg or {}
    graphs = "on" if cfg.get("cuda_graph", True) else "off"
    if cfg.get("drafter") in (None, "none"):
        return f"baseline (graphs {graphs})"
    knobs = ",".join(f"{k}={v}" for k, v in cfg.items() if k not in ("drafter", "cuda_graph"))
    return f"{cfg['drafter']} {knobs} graphs {graphs}"


def render_report(report: dict[str, Any], out: IO[str]) -> None:
    w = out.write
    sim = report.get("simulated")
    w(
        f"study {report['study']}"
        + (f"  [SIMULATED: scenario {sim['scenario']}, figures in simulated hardware time]" if sim else "")
        + "\n"
    )
    for key, b in sorted(report["baseline"].items()):
        w(f"baseline ({key.replace('_', ' ')}): {_fmt(b['tok_per_s'])} tok/s (trial {b['trial']})\n")
    c = report["counts"]
    w(
        f"trials: {c['COMPLETE']} complete, {c['PRUNED']} pruned ({report['pruned_before_last_prompt']} before their "
        f"last prompt), {c['FAIL']} failed\n\n"
    )
    rows = report["trials"]
    labels = [config_label(r["config"]) for r in rows]
    width = max([len("config"), *map(len, labels)])
    w(
        f"{'#':>4} {'state':<9} {'config':<{width}} {'tok/s':>8} {'speedup':>8} {'vs best':>8} {'prompts':>7} "
        f"{'accept':>6}\n"
    )
    for r, label in zip(rows, labels, strict=True):
        note = ""
        if r.get("duplicate_of") is not None:
            note = f"  = #{r['duplicate_of']}"
        elif r.get("fail_kind"):
            note = f"  {r['fail_kind']}"
        elif r.get("lossless") and r.get("lossless_summary") != "identical":
            note = f"  {r['lossless_summary']}"
        w(
            f"{r['number']:>4} {r['state']:<9} {label:<{width}} {_fmt(r['tok_per_s']):>8} "
            f"{_fmt(r['speedup'], '.2f'):>8} {_fmt(r.get('speedup_vs_fastest'), '.2f'):>8} "
            f"{r['prompts_measured']:>7} {_fmt(r['accept_length'], '.2f'):>6}{note}\n"
        )
    w("  (speedup: against the baseline of the same CUDA-graph setting; vs best: against the fastest baseline)\n")
    if report["flags"]:
        w("\nalarms:\n")
        for f in report["flags"]:
            w(f"  - {f}\n")
    w("\n")
    lo = report.get("lossless") or {}
    if lo.get("tolerance") is not None:
        floor = lo.get("baseline_divergences") or []
        w(
            f"lossless check: near-tie tolerance {lo['tolerance']:.3g} nats ({lo.get('tolerance_source')}); "
            f"{lo.get('numerics', 0)} near-tie flip(s) recorded as numerics; lossy trials: "
            f"{lo.get('lossy_trials') or 'none'}; baselines against each other: "
            + (f"{len(floor)} divergence(s)" if floor else "identical")
            + "\n"
        )
    for cf in report.get("confirmed", []):
        ci = cf["speedup_ci"]
        dep = cf.get("deploy_speedup_ci")
        label = config_label(cf.get("config"))
        if ci:
            w(
                f"confirmed trial {cf['trial']} ({label}): speedup {ci['point']:.3f} "
                f"[{ci['low']:.3f}, {ci['high']:.3f}] against its own baseline"
                + (
                    f", {dep['point']:.3f} [{dep['low']:.3f}, {dep['high']:.3f}] against the fastest baseline"
                    if dep and dep != ci
                    else ""
                )
                + f" ({ci['confidence']:.0%} CI, {ci['n']} paired repeats)"
                + (" - left the race: clearly slower than the leader" if cf.get("dropped") else "")
                + "\n"
            )
    load = report.get("load")
    if load:
        w(f"per level (trial {load['trial']}, search measurement):\n")
        w("  streams     tok/s  speedup  per-stream  ITL p50/p99 ms   TTFT p50/p99 ms  accept  failed\n")
        for x in load["levels"]:
            slo = "  SLO broken: " + "; ".join(x["slo_broken"]) if x.get("slo_broken") else ""
            w(
                f"  {x['level']:>7} {_fmt(x.get('tok_per_s')):>9} {_fmt(x.get('speedup'), '.2f'):>8} "
                f"{_fmt(x.get('stream_tok_per_s')):>11} "
                f"{_fmt(x.get('itl_p50_ms')):>6}/{_fmt(x.get('itl_p99_ms')):<7} "
                f"{_fmt(x.get('ttft_p50_ms')):>8}/{_fmt(x.get('ttft_p99_ms')):<8} "
                f"{_fmt(x.get('accept_length'), '.2f'):>6} {x.get('failed', 0):>7}{slo}\n"
            )
        w(f"  {load['text']} (search)\n")
        for v in load.get("confirmed") or []:
            ci = v.get("speedup_ci")
            iv = f"{ci['point']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else "-"
            w(f"  confirmed at {v['level']:>4} streams: {v['verdict']:<16} best trial {v['trial']}  speedup {iv}\n")
        if load.get("confirmed_text"):
            w(f"  per level: {load['confirmed_text']}\n")
    for e in report.get("exclusions", []):
        w(f"excluded trial {e['trial']} ({config_label(e.get('config'))}): {e['kind']}: {e['reason']}\n")
    w(f"verdict: {report['verdict']} ({report.get('verdict_rests_on', report['verdict_basis'])})\n")
    w(f"  {report['verdict_text']}\n")
    rec = report["recommended"]
    if rec.get("config"):
        w(f"recommended: {rec['config']}  ({rec['why']})\n")

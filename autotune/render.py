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
    w(f"{'#':>4} {'state':<9} {'config':<58} {'tok/s':>8} {'speedup':>8} {'prompts':>7} {'accept':>6}\n")
    for r in report["trials"]:
        label = config_label(r["config"])
        note = ""
        if r.get("duplicate_of") is not None:
            note = f"  = #{r['duplicate_of']}"
        elif r.get("fail_kind"):
            note = f"  {r['fail_kind']}"
        w(
            f"{r['number']:>4} {r['state']:<9} {label[:58]:<58} {_fmt(r['tok_per_s']):>8} "
            f"{_fmt(r['speedup'], '.2f'):>8} "
            f"{r['prompts_measured']:>7} {_fmt(r['accept_length'], '.2f'):>6}{note}\n"
        )
    if report["flags"]:
        w("\nalarms:\n")
        for f in report["flags"]:
            w(f"  - {f}\n")
    w("\n")
    for cf in report.get("confirmed", []):
        ci = cf["speedup_ci"]
        if ci:
            w(
                f"confirmed trial {cf['trial']}: speedup {ci['point']:.3f} "
                f"[{ci['low']:.3f}, {ci['high']:.3f}] ({ci['confidence']:.0%} CI, {ci['n']} paired repeats)"
                + (" - left the race: clearly slower than the leader" if cf.get("dropped") else "")
                + "\n"
            )
    w(f"verdict: {report['verdict']} ({report['verdict_basis']}): {report['verdict_text']}\n")
    rec = report["recommended"]
    if rec.get("config"):
        w(f"recommended: {rec['config']}  ({rec['why']})\n")

"""Print a markdown write-up of a GPU harness run (for its folder under docs/gpu-runs/) from the harness's output.

    python3 scripts/gpu/writeup.py RESULTS_DIR [RESULTS_DIR ...] [--title TITLE]

Each RESULTS_DIR is what one ``scripts/gpu/run.sh`` command left in $OUT (a ``results.tar.gz`` in it is read too):
machine.txt, harness.json, build.log, sweep.json, report.json, study.json, export.txt, space.yaml. Give the folders of
several commands (build, sweep, study); for a file found in more than one, the last folder given wins, except
harness.json, whose stages are merged (the newest record of each stage). Reads JSON only: no autotune import.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NAMES = ("machine.txt", "harness.json", "sweep.json", "report.json", "study.json", "export.txt", "space.yaml")


def gather(dirs: Sequence[str]) -> dict[str, Any]:
    """{name: text} of the files the writeup reads; harness.json merged over the folders."""
    files: dict[str, str] = {}
    harness: dict[str, Any] = {"stages": {}, "history": []}
    for d in dirs:
        found: dict[str, str] = {}
        p = Path(d)
        tgz = p / "results.tar.gz"
        if tgz.is_file():
            with tarfile.open(tgz) as tf:
                for m in tf.getmembers():
                    name = Path(m.name).name
                    if m.isfile() and name in NAMES:
                        f = tf.extractfile(m)
                        if f is not None:
                            found[name] = io.TextIOWrapper(f, encoding="utf-8", errors="replace").read()
        for name in NAMES:
            q = p / name
            if q.is_file():
                found[name] = q.read_text(encoding="utf-8", errors="replace")
        if "harness.json" in found:
            try:
                h = json.loads(found.pop("harness.json"))
            except ValueError:
                h = {}
            for stage, rec in (h.get("stages") or {}).items():
                old = harness["stages"].get(stage)
                if old is None or str(rec.get("at", "")) >= str(old.get("at", "")):
                    harness["stages"][stage] = rec
            harness["history"] += h.get("history") or []
        files.update(found)
    files["harness.json"] = json.dumps(harness)
    return files


def _json(files: dict[str, str], name: str) -> Any:
    try:
        return json.loads(files[name]) if name in files else None
    except ValueError:
        return None


def _f(x: Any, spec: str = ".1f") -> str:
    try:
        return "-" if x is None else format(float(x), spec)
    except (TypeError, ValueError):
        return str(x)


def _label(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return "-"
    g = "graphs on" if cfg.get("cuda_graph") else "graphs off"
    if cfg.get("drafter") in (None, "none"):
        return f"baseline ({g})"
    extras = [
        f"{k}={cfg[k]}"
        for k, default in (("draft_n_min", 0), ("draft_p_min", 0.0), ("spec_type", "draft-simple"))
        if k in cfg and cfg[k] != default
    ]
    return f"{cfg['drafter']} n_max={cfg.get('draft_n_max')}{' ' + ' '.join(extras) if extras else ''} ({g})"


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if not a or not b:
        return False
    keys = ("drafter", "cuda_graph", "draft_n_max", "draft_n_min", "draft_p_min", "spec_type")
    norm = {None: None, "none": None}
    for k in keys:
        x, y = a.get(k), b.get(k)
        if k == "drafter":
            x, y = norm.get(x, x), norm.get(y, y)
        if x is None or y is None:
            if k in ("drafter", "cuda_graph") and x != y:
                return False
            continue
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if abs(float(x) - float(y)) > 1e-9:
                return False
        elif x != y:
            return False
    return True


def winner_vs_sweep(best: dict[str, Any], rows: list[dict[str, Any]], sweep_best: dict[str, Any] | None) -> list[str]:
    """The study's pick against the sweep: the sweep's mean for the same config (else the nearest draft_n_max of the
    same drafter and graph setting) over the sweep's best mean (both from the sweep), and the pick's confirmed tok/s
    over the sweep's best mean (two sessions)."""
    if not sweep_best or not sweep_best.get("tok_per_s_mean"):
        return ["Winner vs the sweep: no sweep results."]
    cfg = best.get("config") or {}
    row = next((r for r in rows if _same(r.get("config"), cfg) and r.get("tok_per_s_mean")), None)
    note = ""
    if row is None:
        same = [
            r
            for r in rows
            if r.get("tok_per_s_mean")
            and (r.get("config") or {}).get("drafter") == cfg.get("drafter")
            and (r.get("config") or {}).get("cuda_graph") == cfg.get("cuda_graph")
            and (r.get("config") or {}).get("draft_n_max") is not None
        ]
        if same and cfg.get("draft_n_max") is not None:
            row = min(same, key=lambda r: abs(r["config"]["draft_n_max"] - cfg["draft_n_max"]))
            note = f" (not in the sweep: nearest measured {_label(row['config'])})"
    out = []
    sb = sweep_best["tok_per_s_mean"]
    if row is not None:
        out.append(
            f"Winner vs the sweep: the sweep measured the study's pick{note} at {_f(row['tok_per_s_mean'])} tok/s "
            f"(n={row.get('n')}); the sweep's best mean is {_label(sweep_best.get('config'))} at {_f(sb)} tok/s: "
            f"ratio **{row['tok_per_s_mean'] / sb:.3f}** (both from the sweep)."
        )
    else:
        out.append(
            f"Winner vs the sweep: the sweep has no config of the pick's drafter and graph setting; its best "
            f"mean is {_label(sweep_best.get('config'))} at {_f(sb)} tok/s."
        )
    if best.get("tok_per_s"):
        out.append(
            f"The pick's confirmed {_f(best['tok_per_s'])} tok/s over the sweep's best mean: "
            f"{best['tok_per_s'] / sb:.3f} (different sessions: includes drift between them)."
        )
    return out


def machine_section(files: dict[str, str]) -> list[str]:
    text = files.get("machine.txt", "")
    facts = dict((m.group(1), m.group(2).strip()) for m in re.finditer(r"^([a-z][a-z ()]*): (.*)$", text, re.M))
    gpu = facts.get("gpu", "?")
    parts = [p.strip() for p in gpu.split(",")]
    name = parts[0] if parts else gpu
    driver = parts[1] if len(parts) > 1 else "?"
    mem = parts[2] if len(parts) > 2 else "?"
    cc = parts[3] if len(parts) > 3 else "?"
    return [
        f"- Machine: {name} ({mem}, compute capability {cc}), driver {driver}, CUDA {facts.get('cuda (driver)', '?')} "
        f"(driver), nvcc {facts.get('nvcc', '?')}; {facts.get('cpu', '?')} CPU threads, {facts.get('memory', '?')}; "
        f"{facts.get('kernel', '?')}.",
    ]


def build_section(h: dict[str, Any]) -> list[str]:
    b = h.get("stages", {}).get("build")
    if not b:
        return ["- Build: not recorded."]
    if b.get("status") == "given":
        return [f"- Build: a given llama-server ({b.get('binary')})."]
    flags = " ".join(b.get("cmake_flags") or [])
    return [
        f"- Build: llama-server from the llama.cpp vendored in llama-cpp-python 0.3.36 ({b.get('version', '?')}), "
        f"status {b.get('status')}: {_f(b.get('seconds'), '.0f')} s in all (configure {b.get('configure_s')} s, "
        f"compile {b.get('compile_s')} s with {b.get('jobs', '?')} jobs), CUDA arch {b.get('cuda_arch') or '-'}, "
        f"cuBLAS from {b.get('cublas') or '-'}.",
        f"  cmake flags: `{flags}`",
    ]


def models_section(h: dict[str, Any]) -> list[str]:
    m = h.get("stages", {}).get("models")
    if not m:
        return ["- Models: not recorded."]
    spec = m.get("spec") or {}
    sizes = m.get("bytes") or {}
    width, layers = spec.get("width"), spec.get("layers")
    heads, kv, ffn = spec.get("heads"), spec.get("kv_heads"), spec.get("ffn")
    gb = {k: v / 1e9 for k, v in sizes.items()} if isinstance(sizes, dict) else {}
    return [
        "- Models (random llama-architecture GGUF, scripts/llamacpp_models.py, "
        f"{str(spec.get('dtype', '?')).upper()}): "
        f"target width {width}, {layers} layers, {heads} heads / {kv} KV heads, FFN {ffn} "
        f"({_f(gb.get('target.gguf'), '.2f')} GB); draft-good = its first {spec.get('draft_layers')} layers "
        f"(the others' output projections scaled by eps {spec.get('eps')}; {_f(gb.get('draft-good.gguf'), '.2f')} GB); "
        f"draft-bad = draft-good with noise {spec.get('bad_noise')} x on its output head; logit scale "
        f"{spec.get('logit_scale')}. Written in {_f(m.get('seconds'), '.0f')} s.",
    ]


def sweep_section(sweep: dict[str, Any] | None) -> list[str]:
    if not sweep:
        return ["No sweep results (sweep.json) were found."]
    plan = sweep.get("plan", {})
    s = sweep.get("summary", {})
    starts = sweep.get("starts", [])
    ok = [x for x in starts if not x.get("error")]
    lines = [
        f"{len(ok)} server starts ({len(starts) - len(ok)} failed) of {plan.get('starts_planned')} planned, "
        f"status {sweep.get('status')}: {plan.get('repeats')} passes (odd passes in reverse order), a fresh server per "
        f"start, {len(plan.get('prompts', []))} prompts x {plan.get('max_tokens')} tokens at temperature "
        f"{plan.get('temperature')}, {plan.get('warmup_requests')} warm-up request; the argv, environment and "
        "client of a study (ProcessRunner, run_prompt).",
        "",
        "| config | starts | mean tok/s | sd | speedup vs fastest baseline | accept length | start-up s | "
        "text = baseline's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    best_key = (s.get("best") or {}).get("key")
    for r in s.get("rows", []):
        if not r.get("n") and not r.get("failed"):
            continue
        name = _label(r.get("config")) + (" **best**" if r.get("key") == best_key else "")
        if r.get("failed"):
            name += f" ({r['failed']} failed)"
        lines.append(
            f"| {name} | {r.get('n')} | {_f(r.get('tok_per_s_mean'))} | {_f(r.get('tok_per_s_sd'))} | "
            f"{_f(r.get('speedup'), '.3f')} | {_f(r.get('accept_length_mean'), '.2f')} | {_f(r.get('startup_s_mean'))} "
            f"| {_f(r.get('prefix_match_min'), '.2f')} |"
        )
    lines += [
        "",
        "text = baseline's: the smallest share, over the prompts, of the first baseline start's text (same graph "
        "setting) that the config's first-pass text repeats from its start (1.00: identical).",
    ]
    return lines


def study_section(report: dict[str, Any] | None, sweep: dict[str, Any] | None, export: str | None) -> list[str]:
    if not report:
        return ["No study report (report.json) was found."]
    counts = report.get("counts") or {}
    lines = [
        f"Verdict: **{report.get('verdict')}** (basis: {report.get('verdict_basis')}"
        + (f", rests on {report['verdict_rests_on']}" if report.get("verdict_rests_on") else "")
        + f"): {report.get('verdict_text')}.",
        f"Trials: {counts.get('COMPLETE', 0)} complete, {counts.get('PRUNED', 0)} pruned, {counts.get('FAIL', 0)} "
        f"failed, {counts.get('RUNNING', 0)} running.",
    ]
    fb = report.get("fastest_baseline")
    if fb:
        lines.append(
            f"Fastest baseline in the study: graphs {'on' if fb.get('cuda_graph') else 'off'}, "
            f"{_f(fb.get('tok_per_s'))} tok/s (trial {fb.get('trial')})."
        )
    best = report.get("best")
    sweep_rows = ((sweep or {}).get("summary") or {}).get("rows", [])
    sweep_best = ((sweep or {}).get("summary") or {}).get("best")
    if best:
        ci = best.get("speedup_ci") or {}
        what = "Winner" if report.get("verdict") == "speculation-wins" else "Best confirmed config (not deployed)"
        lines.append(
            f"{what}: {_label(best.get('config'))} (trial {best.get('trial')}): {_f(best.get('tok_per_s'))} tok/s "
            f"in confirmation, speedup {_f(ci.get('point'), '.3f')} [{_f(ci.get('low'), '.3f')}, "
            f"{_f(ci.get('high'), '.3f')}] ({_f(ci.get('confidence'), '.2f')} interval, n={ci.get('n')}) vs the "
            f"fastest baseline; accept length {_f(best.get('accept_length'), '.2f')}."
        )
        lines += winner_vs_sweep(best, sweep_rows, sweep_best)
    else:
        lines.append("Winner: none (no confirmed speculative config).")
    rec = report.get("recommended") or {}
    if rec:
        lines.append(f"Recommended deployment: {_label(rec.get('config'))} ({rec.get('why', '')}).")
    conf = report.get("confirmed") or []
    if conf:
        lines += [
            "",
            "| confirmed trial | config | tok/s | baseline tok/s | speedup [CI] | rounds | dropped |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in conf:
            ci = c.get("deploy_speedup_ci") or c.get("speedup_ci") or {}
            lines.append(
                f"| {c.get('trial')} | {_label(c.get('config'))} | {_f(c.get('tok_per_s'))} | "
                f"{_f(c.get('baseline_tok_per_s'))} | {_f(ci.get('point'), '.3f')} [{_f(ci.get('low'), '.3f')}, "
                f"{_f(ci.get('high'), '.3f')}] | {c.get('rounds')} | {'yes' if c.get('dropped') else ''} |"
            )
    trials = report.get("trials") or []
    if trials:
        lines += [
            "",
            "| trial | state | config | tok/s | speedup | accept | lossless | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in trials:
            note = (
                t.get("prune_reason")
                or t.get("fail_reason")
                or (f"same as #{t['duplicate_of']}" if t.get("duplicate_of") is not None else "")
            )
            lossless = t.get("lossless_summary") or ""
            if not lossless and t.get("lossless"):
                lossless = json.dumps(t["lossless"])[:160]
            lines.append(
                f"| {t.get('number')} | {t.get('state')} | {_label(t.get('config'))} | {_f(t.get('tok_per_s'))} | "
                f"{_f(t.get('speedup'), '.3f')} | {_f(t.get('accept_length'), '.2f')} | {lossless} | "
                f"{str(note)[:120].replace('|', '/')} |"
            )
    lines += ["", "Divergences (the report's `lossless` records, as recorded):", ""]
    ll = report.get("lossless")
    if ll:
        lines.append(f"- summary: `{json.dumps(ll, default=str)[:1500]}`")
    n = 0
    for t in trials:
        rec_l = t.get("lossless")
        if rec_l:
            n += 1
            lines.append(
                f"- trial {t.get('number')} ({_label(t.get('config'))}): "
                f"{t.get('lossless_summary') or ''} `{json.dumps(rec_l, default=str)[:600]}`"
            )
    if not ll and not n:
        lines.append("- none recorded.")
    if export:
        lines += ["", "Exported deployment (`autotune export --format command`):", "", "```", export.strip(), "```"]
    return lines


def commands_section(h: dict[str, Any], sweep: dict[str, Any] | None) -> list[str]:
    st = h.get("stages", {})
    cmds = [
        "scripts/gpu/pack.sh   # here, where pip works: .gpu/llama.cpp-src.tar.xz, .gpu/wheels",
        "scripts/gpu/run.sh setup build models   # there, carrying .gpu/llama.cpp-src.tar.xz and .gpu/wheels",
        "scripts/gpu/run.sh sweep",
        "scripts/gpu/run.sh study",
    ]
    inner = []
    if st.get("build", {}).get("cmake_flags"):
        inner.append("cmake -S .gpu/build/src/llama.cpp -B .gpu/build/cmake " + " ".join(st["build"]["cmake_flags"]))
        inner.append(f"cmake --build .gpu/build/cmake --target llama-server -j{st['build'].get('jobs', '$(nproc)')}")
    for stage, key in (
        ("models", "command"),
        ("sweep", "command"),
        ("study", "command"),
        ("study", "report_command"),
        ("study", "export_command"),
    ):
        c = st.get(stage, {}).get(key)
        if c:
            inner.append(c)
    lines = ["```", *cmds, "```", "", "which ran:", "", "```", *inner, "```"]
    if sweep and sweep.get("starts"):
        argv = next((x.get("argv") for x in sweep["starts"] if x.get("argv") and x["config"].get("drafter")), None)
        if argv:
            lines += ["", "A speculative server's argv (from the sweep):", "", "```", " ".join(argv), "```"]
    return lines


def writeup(files: dict[str, str], title: str) -> str:
    h = _json(files, "harness.json") or {}
    sweep = _json(files, "sweep.json")
    report = _json(files, "report.json")
    out = [f"## {title}", ""]
    out += machine_section(files)
    out += build_section(h)
    out += models_section(h)
    out += ["", "### Manual sweep", ""]
    out += sweep_section(sweep)
    out += ["", "### autotune study (default settings)", ""]
    out += study_section(report, sweep, files.get("export.txt"))
    out += ["", "### Commands", ""]
    out += commands_section(h, sweep)
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="folders with the harness's output ($OUT of each command)")
    ap.add_argument("--title", default="Real GPU (H200, llama.cpp CUDA)")
    a = ap.parse_args(argv)
    missing = [d for d in a.dirs if not Path(d).is_dir()]
    if missing:
        print(f"writeup.py: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    sys.stdout.write(writeup(gather(a.dirs), a.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

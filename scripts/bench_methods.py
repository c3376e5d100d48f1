"""Method-choice benchmark: does ``spaces/methods.yaml`` name the right speculative method on three simulated truths?

Truths (the simulator's scenarios; docs/simulator.md "Methods beyond EAGLE"):

- ``code-edit``: ``llama31-8b-h100-methods`` with the code-edit prompts (tests/sim/prompts/code_edit.yaml): n-gram wins.
- ``chat``: the same scenario with the chat prompts (tests/sim/prompts/chat.yaml): EAGLE-3 wins.
- ``mtp``: ``deepseek-v3-mtp-h200`` (a target with an MTP layer) with the chat prompts: MTP wins. The space's EAGLE-3
  head is that scenario's (``eagle3-dsv3``) and the draft-model method is left out (the scenario has no small draft
  model); everything else is ``spaces/methods.yaml`` as shipped.

Each (truth, seed) runs ``autotune study VARIANT --simulate --in-process --seed S --json`` and reads the report's
``methods.winner`` (the confirmed pick's method when the verdict is speculation-wins) and its GPU time (search plus
confirmation, the simulated hardware's seconds).

    python scripts/bench_methods.py        # 20 seeds per truth, --jobs 2, section "Methods" of docs/benchmarks.md
    python scripts/bench_methods.py --seeds 2 --no-docs
    python scripts/bench_methods.py --resume runs/   # each finished run kept; a rerun skips those done

With ``--resume DIR`` every finished run is kept in DIR as soon as it ends (``bench_common.KeptRuns``, as
``bench_load.py --cache``), runs already there are not run again, and the table is made of the kept runs for the
truths and seeds asked: a run cut short (a time limit, another machine) is continued by the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import KeptRuns  # noqa: E402

SPACE = ROOT / "spaces" / "methods.yaml"
PROMPTS = ROOT / "tests" / "sim" / "prompts"
TRUTHS = {
    "code-edit": {"scenario": "llama31-8b-h100-methods", "prompts": "code_edit.yaml", "expect": "ngram"},
    "chat": {"scenario": "llama31-8b-h100-methods", "prompts": "chat.yaml", "expect": "eagle3"},
    "mtp": {"scenario": "deepseek-v3-mtp-h200", "prompts": "chat.yaml", "expect": "mtp"},
}
SECTION = "## Methods"


def variant(truth: str, folder: Path) -> Path:
    """``spaces/methods.yaml`` for one truth, written into ``folder``."""
    t = TRUTHS[truth]
    doc = yaml.safe_load(SPACE.read_text(encoding="utf-8"))
    doc["name"] = f"methods-{truth}"
    doc["benchmark"]["prompts_file"] = str(PROMPTS / t["prompts"])
    doc["simulate"]["scenario"] = t["scenario"]
    if t["scenario"] == "deepseek-v3-mtp-h200":
        doc["server"]["model_path"] = "deepseek-ai/DeepSeek-V3"
        doc["drafters"] = [{"name": "eagle3-dsv3", "path": "/models/eagle3-dsv3", "algorithm": "EAGLE3"}]
        methods = doc["search"]["methods"]
        methods.pop("standalone", None)
        for m in methods.values():
            if "drafters" in m:
                m["drafters"] = ["eagle3-dsv3"]
    path = folder / f"methods-{truth}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def run_one(truth: str, seed: int, work: Path) -> dict:
    folder = work / f"{truth}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    space = variant(truth, folder)
    argv = [sys.executable, "-m", "autotune", "study", str(space), "--simulate", "--in-process", "--seed", str(seed)]
    argv += ["--studies-dir", str(folder / "studies"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    out = {"truth": truth, "seed": seed, "rc": done.returncode, "expect": TRUTHS[truth]["expect"]}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        out["error"] = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return out
    m = report.get("methods") or {}
    out.update(
        winner=m.get("winner"),
        text=m.get("text"),
        verdict=report.get("verdict"),
        gpu_s=(report.get("gpu_time") or {}).get("total_s"),
        adaptive=[a["text"] for a in m.get("adaptive") or []],
    )
    out["hit"] = out["winner"] == out["expect"]
    print(json.dumps({k: out.get(k) for k in ("truth", "seed", "winner", "hit", "gpu_s")}), flush=True)
    return out


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def markdown(results: list[dict], seeds: int, jobs: int = 2, where: str | None = None) -> str:
    lines = [
        SECTION,
        "",
        f"`python scripts/bench_methods.py` ({seeds} seeds per truth, in-process simulator, `--jobs {jobs}`"
        + (f"; {where}" if where else "")
        + "): does "
        "`spaces/methods.yaml` (EAGLE-3 head, MTP, n-gram, a Llama-3.2-1B draft model, SGLang's adaptive mode) name "
        "the right method? The winner is the method of the confirmed pick when the verdict is speculation-wins. GPU "
        "time: search plus confirmation per study, the simulated hardware's time.",
        "",
        "| truth | expected winner | hits | median GPU time per study | winners seen |",
        "|---|---|---|---|---|",
    ]
    for truth, t in TRUTHS.items():
        rs = [r for r in results if r["truth"] == truth]
        hits = sum(1 for r in rs if r.get("hit"))
        gpu = [r["gpu_s"] for r in rs if r.get("gpu_s") is not None]
        med = f"{statistics.median(gpu) / 3600:.2f} h" if gpu else "-"
        seen: dict[str, int] = {}
        for r in rs:
            seen[str(r.get("winner"))] = seen.get(str(r.get("winner")), 0) + 1
        shown = ", ".join(f"{k} {v}" for k, v in sorted(seen.items(), key=lambda kv: -kv[1]))
        lines.append(f"| {truth} | {t['expect']} | {hits}/{len(rs)} | {med} | {shown} |")
    lines.append("")
    example = {truth: next((r for r in results if r["truth"] == truth and r.get("text")), None) for truth in TRUTHS}
    lines.append("One seed's verdict per truth:")
    lines.append("")
    for truth, r in example.items():
        if r:
            extra = f" Adaptive: {'; '.join(r['adaptive'])}." if r.get("adaptive") else ""
            lines.append(f"- {truth} (seed {r['seed']}): {r['text']}.{extra}")
    lines.append("")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    doc = path.read_text(encoding="utf-8")
    if SECTION in doc:
        head, _, tail = doc.partition(SECTION)
        nxt = tail.find("\n## ")
        doc = head + text.rstrip("\n") + "\n\n" + (tail[nxt + 1 :] if nxt >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--truths", nargs="*", default=list(TRUTHS), choices=list(TRUTHS))
    ap.add_argument("--out", type=Path, default=None, help="write every run's result as JSON here")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="a folder: each finished run is kept there; a rerun skips the runs kept",
    )
    ap.add_argument("--where", default=None, help="the machine the runs ran on (default: this one)")
    args = ap.parse_args()
    wanted = [(truth, seed) for truth in args.truths for seed in range(args.seeds)]
    kept = KeptRuns(args.resume) if args.resume else None
    done: dict[tuple[str, int], dict] = {}
    for job in wanted if kept else []:
        r = kept.get(job)
        if r is not None:
            done[job] = r

    def one(job: tuple[str, int], tmp: Path) -> dict:
        r = run_one(job[0], job[1], tmp)
        if kept and not r.get("error"):
            kept.keep(job, r)
        return r

    with tempfile.TemporaryDirectory(prefix="bench-methods-") as tmp:
        todo = [j for j in wanted if j not in done]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            fresh = list(pool.map(lambda j: one(j, Path(tmp)), todo))
    by_job = {**done, **{(r["truth"], r["seed"]): r for r in fresh}}
    results = [by_job[j] for j in wanted]
    for r in results:
        if r.get("error"):
            print(json.dumps({k: r.get(k) for k in ("truth", "seed", "rc", "error")}))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    text = markdown(results, args.seeds, args.jobs, args.where or machine())
    print(text)
    if not args.no_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

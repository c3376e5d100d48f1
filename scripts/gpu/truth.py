"""A small truth for a method study: each method's best config and the baseline measured again, interleaved.

    python3 scripts/gpu/truth.py SPACE.yaml REPORT.json --out DIR [--passes 3] [--budget-s 400] [--state PATH]

REPORT.json is the method study's ``autotune report --json``: its ``methods`` section names each method's best
config, ``fastest_baseline`` the baseline to measure against and ``recommended`` the study's pick. Each pass
starts every one of those configs once on a fresh server (``autotune.measure.measure_fresh``, autotune's own
``ProcessRunner``, warm-up and prompts, as confirmation measures), the baseline first; odd passes run the list
backwards, so a linear drift of the machine's speed cancels over two passes. Per method: the geometric-mean speedup
over the baseline of the same pass, with the t-interval confirmation uses (``stats.speedup_interval`` with the
start prior); and the study's pick against each other method's best, paired per pass the same way. The truth's
winner is the method with the fastest mean tok/s.

``truth.json`` is rewritten after every start, and a second run with the same plan and ``--state`` resumes it. No
server is started when the next start would not end within ``--budget-s`` (estimated from the starts so far).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autotune import stats  # noqa: E402
from autotune.backends import get_backend  # noqa: E402
from autotune.config import TrialConfig  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.measure import measure_fresh  # noqa: E402
from autotune.process import ProcessRunner  # noqa: E402
from autotune.space import load_space  # noqa: E402

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[truth +{time.monotonic() - T0:.0f}s] {msg}", file=sys.stderr, flush=True)


def plan_configs(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, config) to measure: "baseline", then each method's best config; the pick is one of them (else
    added as "pick")."""
    base = (report.get("fastest_baseline") or {}).get("config") or {"drafter": None, "cuda_graph": True}
    out: list[tuple[str, dict[str, Any]]] = [("baseline", dict(base))]
    for entry in (report.get("methods") or {}).get("methods") or []:
        best = entry.get("best")
        if best and best.get("config"):
            out.append((entry["method"], dict(best["config"])))
    pick = (report.get("recommended") or {}).get("config")
    if pick and not any(TrialConfig.from_dict(pick).key() == TrialConfig.from_dict(c).key() for _, c in out):
        out.append(("pick", dict(pick)))
    return out


def order(n_configs: int, passes: int) -> list[tuple[int, int]]:
    """(pass, config index) in run order: the baseline first in every pass, the rest forwards, then backwards."""
    out = []
    for p in range(passes):
        rest = list(range(1, n_configs))
        if p % 2:
            rest.reverse()
        out += [(p, 0)] + [(p, i) for i in rest]
    return out


def summarize(names: list[str], starts: list[dict[str, Any]], pick: str | None) -> dict[str, Any]:
    """Per config its tok/s per pass and mean; per method its paired speedup over the pass's baseline; the pick
    against each other method's best."""
    by: dict[tuple[int, str], float] = {(s["pass"], s["name"]): s["tok_per_s"] for s in starts if s.get("tok_per_s")}
    passes = sorted({p for p, _ in by})
    prior = stats.start_prior()

    def paired(a: str, b: str) -> dict[str, Any] | None:
        logs = [math.log(by[(p, a)] / by[(p, b)]) for p in passes if (p, a) in by and (p, b) in by]
        if len(logs) < 2:
            return {"point": math.exp(logs[0]), "n": 1} if logs else None
        iv = stats.speedup_interval(logs, 0.95, prior=prior)
        return {"point": iv.point, "low": iv.low, "high": iv.high, "n": iv.n, "df": iv.df}

    configs = {}
    for name in names:
        vals = [by[(p, name)] for p in passes if (p, name) in by]
        configs[name] = {
            "tok_per_s": vals,
            "mean": math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None,
            "speedup": paired(name, "baseline") if name != "baseline" else None,
        }
    ranked = sorted((n for n in names if n != "baseline" and configs[n]["mean"]), key=lambda n: -configs[n]["mean"])
    out: dict[str, Any] = {"configs": configs, "ranking": ranked, "winner": ranked[0] if ranked else None}
    if pick is not None and pick in configs:
        out["pick"] = pick
        out["pick_vs"] = {n: paired(pick, n) for n in names if n not in ("baseline", pick)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("space")
    ap.add_argument("report", help="the method study's `autotune report --json`")
    ap.add_argument("--out", required=True)
    ap.add_argument("--state", help="the resumable copy of truth.json (default: OUT/truth.json)")
    ap.add_argument("--log-dir", help="server logs (default: next to --state, truth-logs/)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=400.0)
    a = ap.parse_args(argv)

    def _term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _term)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    state = Path(a.state) if a.state else out / "truth.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    space = load_space(a.space)
    backend = get_backend(space.server.backend)
    report = json.loads(Path(a.report).read_text())
    configs = plan_configs(report)
    names = [n for n, _ in configs]
    rec = (report.get("recommended") or {}).get("config")
    pick = None
    if rec:
        key = TrialConfig.from_dict(rec).key()
        pick = next((n for n, c in configs if TrialConfig.from_dict(c).key() == key), None)
    plan = {"configs": configs, "passes": a.passes, "prompts": [p.id for p in space.benchmark.prompts]}
    starts: list[dict[str, Any]] = []
    if state.exists():
        prev = json.loads(state.read_text())
        if prev.get("plan") == json.loads(json.dumps(plan)):
            starts = [s for s in prev.get("starts", []) if s.get("tok_per_s")]
            log(f"resuming: {len(starts)} start(s) kept")
    doc: dict[str, Any] = {"kind": "autotune-gpu-method-truth", "space": a.space, "plan": plan, "starts": starts}

    def save(status: str) -> None:
        doc["status"] = status
        doc["summary"] = summarize(names, starts, pick)
        text = json.dumps(doc, indent=1, default=str)
        for p in {state, out / "truth.json"}:
            tmp = p.with_name(f".{p.name}.tmp")
            tmp.write_text(text)
            tmp.replace(p)

    runner = ProcessRunner(space, backend, log_dir=Path(a.log_dir) if a.log_dir else state.parent / "truth-logs")
    done = {(s["pass"], s["name"]) for s in starts}
    todo = [(p, i) for p, i in order(len(configs), a.passes) if (p, names[i]) not in done]
    status = "done"
    try:
        for p, i in todo:
            name, cfg = configs[i]
            spent = [s["seconds"] for s in starts if s.get("seconds")]
            each = sum(spent) / len(spent) if spent else 30.0
            if time.monotonic() - T0 + each > a.budget_s:
                status = "partial"
                log(f"budget: {len(todo)} start(s) planned, stopping before pass {p + 1} {name}")
                break
            t = time.monotonic()
            try:
                m = measure_fresh(runner, TrialConfig.from_dict(cfg), space)
            except AutotuneError as e:
                starts.append({"pass": p, "name": name, "error": str(e)[:400], "seconds": time.monotonic() - t})
                log(f"pass {p + 1} {name}: failed: {str(e)[:200]}")
                save("running")
                continue
            s = m.summary
            starts.append(
                {
                    "pass": p,
                    "name": name,
                    "tok_per_s": m.tok_per_s,
                    "accept_length": s.get("accept_length"),
                    "startup_s": m.info.startup_s,
                    "prompt_tok_per_s": [r.tok_per_s for r in m.results],
                    "seconds": time.monotonic() - t,
                }
            )
            log(f"pass {p + 1} {name}: {m.tok_per_s:.1f} tok/s ({time.monotonic() - t:.1f} s)")
            save("running")
    except KeyboardInterrupt:
        status = "interrupted"
    save(status)
    summ = doc["summary"]
    for n in names:
        c = summ["configs"][n]
        sp = c["speedup"] or {}
        lo, hi = sp.get("low", float("nan")), sp.get("high", float("nan"))
        iv = f"{sp['point']:.3f}x [{lo:.3f}, {hi:.3f}]" if sp else "-"
        print(f"{n:28s} {c['mean'] or 0:8.1f} tok/s  {iv}  passes {len(c['tok_per_s'])}")
    print(f"truth winner: {summ['winner']}; study pick: {pick}; {status}")
    return 0 if status == "done" else 3


if __name__ == "__main__":
    raise SystemExit(main())

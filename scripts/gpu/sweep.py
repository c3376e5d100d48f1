"""A manual sweep on a real llama-server, with autotune's own pieces: the llama.cpp backend's argv and environment,
``ProcessRunner`` (one fresh server start per measurement, stopped exactly as a study stops it) and its session's
``warmup``/``run_prompt`` (the streaming client a study measures with). The ground truth a study is checked against.

    python3 scripts/gpu/sweep.py SPACE.yaml --out DIR [--repeats 2] [--graphs on,off] [--good-n 1,2,...,16]
                                 [--bad-n 2,4,8] [--budget-s 450] [--state PATH]

Plan: the drafter ``bad`` at the ``--bad-n`` values of draft_n_max with ``--bad-graphs``, the baseline once per
CUDA-graph setting, the drafter ``good`` at every ``--good-n`` value with each graph setting (alternating);
draft_n_min and draft_p_min are the server's defaults, as in a study whose space searches only draft_n_max and
cuda_graph. ``--repeats`` passes over that list, each config started once per pass; odd passes run the list
backwards (A B ... B A), so a linear drift of the machine's speed over the sweep cancels in every config's mean
(for an even number of complete passes; when the budget cuts the second pass short, the good drafter's configs
and the baselines are the ones measured twice).

Every start records each prompt's tok/s, acceptance length, start-up seconds and the exact argv/environment;
``sweep.json`` and ``sweep.md`` (the table) are rewritten after every start, so a killed sweep still leaves data,
and a second run with the same plan and ``--state`` resumes it (starts already measured are kept). The run stops
starting servers when the next start would not end within ``--budget-s`` (estimated from the starts so far).

It also records raw HTTP traffic for CI tests (``recorded-streams.json``): on the first baseline start with CUDA
graphs on, each prompt's non-streamed ``/v1/completions`` answer with ``"n_probs": 5`` (llama.cpp's top-probabilities:
``choices[0].logprobs.content[i] = {id, token, bytes, logprob, top_logprobs: [...]}``) and its streamed answer; on
the first start of one good-draft and one bad-draft config (``--record-good``/``--record-bad`` give their
draft_n_max, graphs on when the plan has it), each prompt's streamed answer (the SSE text as received, and the text
it spells). These requests are sent after the timed prompts of that start and are never timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from autotune.backends import get_backend  # noqa: E402
from autotune.config import PromptResult, TrialConfig, summarize  # noqa: E402
from autotune.errors import AutotuneError, InfeasibleConfig  # noqa: E402
from autotune.process import ProcessRunner  # noqa: E402
from autotune.space import Space, load_space  # noqa: E402

FORMAT = 1
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[sweep {time.strftime('%H:%M:%S')} +{time.monotonic() - T0:5.0f}s] {msg}", file=sys.stderr, flush=True)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _graphs(text: str) -> list[bool]:
    out = []
    for part in text.replace(" ", "").split(","):
        if part.lower() in ("on", "true", "1"):
            out.append(True)
        elif part.lower() in ("off", "false", "0"):
            out.append(False)
        elif part:
            raise argparse.ArgumentTypeError(f"expected on/off but got {part!r}")
    return out


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _label(cfg: TrialConfig) -> str:
    g = "graphs on" if cfg.cuda_graph else "graphs off"
    if cfg.is_baseline:
        return f"baseline ({g})"
    return f"{cfg.drafter} n_max={cfg.knob('draft_n_max')} ({g})"


# -------------------------------------------------------------------------------------------------- the plan


def build_plan(
    backend: Any,
    space: Space,
    *,
    graphs: list[bool],
    good_n: list[int],
    bad_n: list[int],
    bad_graphs: list[bool],
    repeats: int,
) -> tuple[list[TrialConfig], list[tuple[int, TrialConfig]]]:
    """(configs in pass-0 order, [(pass, config)] in run order). Configs are resolved as a study resolves them."""
    # the bad drafter first: pass 1 runs backwards, so when the budget cuts it short the good drafter's configs
    # and the baselines are the ones measured twice
    configs = [TrialConfig.make("bad", g, draft_n_max=n) for n in bad_n for g in bad_graphs]
    configs += [TrialConfig.baseline(g) for g in graphs]
    for n in good_n:
        configs += [TrialConfig.make("good", g, draft_n_max=n) for g in graphs]
    resolved: list[TrialConfig] = []
    for c in configs:
        try:
            resolved.append(backend.resolve(c, space))
        except InfeasibleConfig as e:
            log(f"skipping {_label(c)}: {e}")
    order: list[tuple[int, TrialConfig]] = []
    for p in range(repeats):
        seq = resolved if p % 2 == 0 else list(reversed(resolved))
        order += [(p, c) for c in seq]
    return resolved, order


# ------------------------------------------------------------------------------------------- raw recordings


def _reference_body(backend: Any, space: Space, prompt: str, top_n: int) -> tuple[str, dict[str, Any]]:
    """llama.cpp's non-streamed completion with ``n_probs`` (the backend's own reference request when it has one)."""
    b = space.benchmark
    model = space.server.model_path or None
    make = getattr(backend, "reference_request", None)
    if make is not None:
        try:
            path, body = make(prompt, max_tokens=b.max_tokens, top_n=top_n, api=b.api, model=model)
            if b.api == "completions":
                body.pop("logprobs", None)
                body["n_probs"] = int(top_n)
            body["stream"] = False
            return path, body
        except TypeError:
            pass
    path, body = backend.request(prompt, max_tokens=b.max_tokens, temperature=b.temperature, api=b.api, model=model)
    body.pop("stream_options", None)
    body.update(stream=False, n_probs=int(top_n), temperature=0.0)
    return path, body


def record_reference(base_url: str, backend: Any, space: Space, top_n: int = 5) -> list[dict[str, Any]]:
    out = []
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(space.server.request_timeout_s), trust_env=False) as c:
        for i, p in enumerate(space.benchmark.prompts):
            path, body = _reference_body(backend, space, p.text, top_n)
            t = time.monotonic()
            try:
                r = c.post(path, json=body)
                try:
                    resp: Any = r.json()
                except ValueError:
                    resp = r.text
                out.append(
                    {
                        "index": i,
                        "id": p.id,
                        "path": path,
                        "body": body,
                        "status": r.status_code,
                        "seconds": time.monotonic() - t,
                        "response": resp,
                    }
                )
            except httpx.HTTPError as e:
                out.append({"index": i, "id": p.id, "path": path, "body": body, "error": f"{type(e).__name__}: {e}"})
    return out


def record_streams(base_url: str, backend: Any, space: Space) -> list[dict[str, Any]]:
    out = []
    b = space.benchmark
    model = space.server.model_path or None
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(space.server.request_timeout_s), trust_env=False) as c:
        for i, p in enumerate(b.prompts):
            path, body = backend.request(
                p.text, max_tokens=b.max_tokens, temperature=b.temperature, api=b.api, model=model
            )
            entry: dict[str, Any] = {"index": i, "id": p.id, "path": path, "body": body}
            try:
                with c.stream("POST", path, json=body) as r:
                    raw = r.read()
                entry["status"] = r.status_code
                sse = raw.decode("utf-8", "replace")
                entry["sse"] = sse
                text = ""
                for line in sse.replace("\r\n", "\n").split("\n"):
                    line = line.strip()
                    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                        continue
                    try:
                        info = backend.parse_chunk(json.loads(line[5:].strip()))
                    except ValueError:
                        continue
                    if info.text:
                        text = info.text if info.cumulative else text + info.text
                entry["text"] = text
            except httpx.HTTPError as e:
                entry["error"] = f"{type(e).__name__}: {e}"
            out.append(entry)
    return out


# ----------------------------------------------------------------------------------------------- summaries


def prefix_fraction(baseline: str, text: str) -> float:
    """The share of the baseline's text that ``text`` repeats from its start (1.0: identical)."""
    n = 0
    for x, y in zip(baseline, text, strict=False):
        if x != y:
            break
        n += 1
    if n == len(baseline) == len(text):
        return 1.0
    return n / max(len(baseline), len(text), 1)


def summarize_starts(configs: list[TrialConfig], starts: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    # the texts of the first measured baseline start per graph setting: what every other start is compared with
    ref_texts: dict[bool, list[str]] = {}
    for s in starts:
        if s["config"]["drafter"] is None and s.get("texts") and s["config"]["cuda_graph"] not in ref_texts:
            ref_texts[s["config"]["cuda_graph"]] = s["texts"]
    for cfg in configs:
        key = cfg.key()
        ok = [s for s in starts if s["key"] == key and not s.get("error")]
        tps = [s["tok_per_s"] for s in ok]
        acc = [s["accept_length"] for s in ok if s.get("accept_length") is not None]
        ref = ref_texts.get(cfg.cuda_graph) or next(iter(ref_texts.values()), None)
        prefixes = [
            min(prefix_fraction(b, t) for b, t in zip(ref, s["texts"], strict=False))
            for s in ok
            if ref and s.get("texts") and s["texts"] is not ref
        ]
        rows.append(
            {
                "key": key,
                "label": _label(cfg),
                "config": cfg.to_dict(),
                "n": len(ok),
                "failed": sum(1 for s in starts if s["key"] == key and s.get("error")),
                "tok_per_s": tps,
                "tok_per_s_mean": statistics.fmean(tps) if tps else None,
                "tok_per_s_sd": statistics.stdev(tps) if len(tps) > 1 else None,
                "accept_length_mean": statistics.fmean(acc) if acc else None,
                "startup_s_mean": statistics.fmean([s["startup_s"] for s in ok]) if ok else None,
                # min over prompts of the share of the baseline's text (same graph setting, first start) repeated
                "prefix_match_min": min(prefixes) if prefixes else None,
            }
        )
    baselines = [r for r in rows if r["config"]["drafter"] is None and r["tok_per_s_mean"]]
    best_base = max(baselines, key=lambda r: r["tok_per_s_mean"], default=None)
    by_graph = {r["config"]["cuda_graph"]: r for r in baselines}
    for r in rows:
        m = r["tok_per_s_mean"]
        r["speedup"] = m / best_base["tok_per_s_mean"] if (m and best_base) else None
        same = by_graph.get(r["config"]["cuda_graph"])
        r["speedup_same_graphs"] = m / same["tok_per_s_mean"] if (m and same) else None
    spec = [r for r in rows if r["config"]["drafter"] is not None and r["tok_per_s_mean"]]
    best = max(spec, key=lambda r: r["tok_per_s_mean"], default=None)
    return {
        "rows": rows,
        "best_baseline": None
        if best_base is None
        else {k: best_base[k] for k in ("key", "label", "config", "tok_per_s_mean", "n")},
        "best": None
        if best is None
        else {k: best[k] for k in ("key", "label", "config", "tok_per_s_mean", "speedup", "accept_length_mean", "n")},
    }


def _f(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def render_md(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    plan = doc["plan"]
    lines = [
        f"# llama.cpp sweep ({doc.get('status')})",
        "",
        f"{len([x for x in doc['starts'] if not x.get('error')])} server starts measured "
        f"({sum(1 for x in doc['starts'] if x.get('error'))} failed) of {plan['starts_planned']} planned; "
        f"{plan['repeats']} pass(es), {len(plan['prompts'])} prompts x {plan['max_tokens']} tokens at temperature "
        f"{plan['temperature']:g}; updated {doc['updated']}.",
        "",
        "| config | starts | mean tok/s | sd | speedup vs fastest baseline | vs same-graphs baseline | accept length "
        "| start-up s | text = baseline's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    best_key = (s.get("best") or {}).get("key")
    for r in s["rows"]:
        name = r["label"] + (" **(best)**" if r["key"] == best_key else "")
        if r["failed"]:
            name += f" ({r['failed']} failed)"
        lines.append(
            f"| {name} | {r['n']} | {_f(r['tok_per_s_mean'])} | {_f(r['tok_per_s_sd'])} | {_f(r['speedup'], '.3f')} "
            f"| {_f(r['speedup_same_graphs'], '.3f')} | {_f(r['accept_length_mean'], '.2f')} "
            f"| {_f(r['startup_s_mean'])} | {_f(r['prefix_match_min'], '.2f')} |"
        )
    lines += [
        "",
        "text = baseline's: the smallest share, over the prompts, of the first baseline start's text (same "
        "graph setting) that the config's first-pass text repeats from its start (1.00: identical).",
    ]
    bb = s.get("best_baseline")
    if bb:
        lines += ["", f"Fastest baseline: {bb['label']}, {_f(bb['tok_per_s_mean'])} tok/s."]
    if s.get("best"):
        b = s["best"]
        lines.append(
            f"Fastest speculative config: {b['label']}, {_f(b['tok_per_s_mean'])} tok/s "
            f"({_f(b['speedup'], '.3f')}x the fastest baseline, accept length {_f(b['accept_length_mean'], '.2f')})."
        )
    first = next((x for x in doc["starts"] if x.get("argv")), None)
    if first:
        lines += ["", "Example argv (first start):", "", "```", " ".join(first["argv"]), "```"]
    lines += ["", "Command:", "", "```", doc["command"], "```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- main


def _nvidia_smi() -> str | None:
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or None


def _server_help(launcher: list[str]) -> str | None:
    try:
        p = subprocess.run(
            [*launcher, "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout + p.stderr


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("space", help="the space file (scripts/gpu/gpu_space.py writes it)")
    ap.add_argument("--out", required=True, help="folder for sweep.json, sweep.md, recorded-streams.json")
    ap.add_argument("--state", help="the resumable copy of sweep.json (default: OUT/sweep.json)")
    ap.add_argument("--log-dir", help="server logs (default: next to --state, sweep-logs/)")
    ap.add_argument("--repeats", type=int, default=2, help="passes over the plan (default 2)")
    ap.add_argument("--graphs", type=_graphs, default=[True, False], help="CUDA graphs: on,off (default)")
    ap.add_argument("--good-n", type=_ints, default=[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16])
    ap.add_argument("--bad-n", type=_ints, default=[2, 4, 8])
    ap.add_argument("--bad-graphs", type=_graphs, default=[True], help="graph settings for the bad drafter (on)")
    ap.add_argument("--budget-s", type=float, default=450.0, help="stop starting servers after this (default 450)")
    ap.add_argument("--record-good", type=int, default=8, help="draft_n_max of the good config whose streams are saved")
    ap.add_argument("--record-bad", type=int, default=4, help="draft_n_max of the bad config whose streams are saved")
    ap.add_argument("--no-record", action="store_true", help="save no raw HTTP responses")
    ap.add_argument("--fresh", action="store_true", help="ignore the state of an earlier run")
    a = ap.parse_args(argv)

    def _term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _term)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = Path(a.state) if a.state else out / "sweep.json"
    log_dir = Path(a.log_dir) if a.log_dir else state_path.parent / "sweep-logs"
    space = load_space(a.space)
    backend = get_backend(space.server.backend)
    graphs = [g for g in a.graphs]
    configs, order = build_plan(
        backend, space, graphs=graphs, good_n=a.good_n, bad_n=a.bad_n, bad_graphs=a.bad_graphs, repeats=a.repeats
    )
    plan = {
        "repeats": a.repeats,
        "graphs": graphs,
        "good_n": a.good_n,
        "bad_n": a.bad_n,
        "bad_graphs": a.bad_graphs,
        "configs": [c.to_dict() for c in configs],
        "starts_planned": len(order),
        "prompts": [p.id for p in space.benchmark.prompts],
        "max_tokens": space.benchmark.max_tokens,
        "temperature": space.benchmark.temperature,
        "warmup_requests": space.benchmark.warmup_requests,
        "model_path": space.server.model_path,
        "launcher": list(space.server.launcher),
    }
    command = " ".join(["python3", "scripts/gpu/sweep.py", *(argv if argv is not None else sys.argv[1:])])
    starts: list[dict[str, Any]] = []
    recordings: dict[str, Any] = {}
    if not a.fresh and state_path.exists():
        try:
            prev = json.loads(state_path.read_text())
        except (OSError, ValueError):
            prev = None
        if prev and prev.get("plan") == plan:
            starts = [s for s in prev.get("starts", []) if not s.get("error")]
            log(f"resuming: {len(starts)} start(s) already measured in {state_path}")
        elif prev:
            log(f"{state_path} holds another plan: starting afresh (use another --state to keep both)")
    # the recordings' resumable copy lives next to the state (OUT may be emptied between runs)
    rec_state = state_path.parent / "recorded-streams.json"
    rec_path = out / "recorded-streams.json"
    if starts and rec_state.exists() and not a.fresh:
        try:
            recordings = json.loads(rec_state.read_text())
        except (OSError, ValueError):
            recordings = {}

    models_meta = None
    mj = Path(space.server.model_path).parent / "models.json"
    if mj.exists():
        try:
            models_meta = json.loads(mj.read_text())
        except ValueError:
            models_meta = None
    doc: dict[str, Any] = {
        "kind": "autotune-gpu-sweep",
        "format": FORMAT,
        "space": str(a.space),
        "command": command,
        "plan": plan,
        "models": models_meta,
        "machine": {
            "gpu": _nvidia_smi(),
            "host": platform.node(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "status": "running",
        "starts": starts,
    }

    def save(status: str | None = None) -> None:
        if status:
            doc["status"] = status
        doc["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        doc["summary"] = summarize_starts(configs, doc["starts"])
        text = json.dumps(doc, indent=1, default=str)
        _atomic_write(state_path, text)
        if state_path.resolve() != (out / "sweep.json").resolve():
            _atomic_write(out / "sweep.json", text)
        _atomic_write(out / "sweep.md", render_md(doc))
        if recordings:
            text = json.dumps(recordings, indent=1, default=str)
            _atomic_write(rec_state, text)
            if rec_state.resolve() != rec_path.resolve():
                _atomic_write(rec_path, text)

    if not a.no_record and not recordings:
        recordings = {
            "kind": "autotune-recorded-llamacpp",
            "format": FORMAT,
            "what": "raw llama-server HTTP answers recorded by scripts/gpu/sweep.py on a real GPU (for CI tests)",
            "prompts": [{"id": p.id, "text": p.text} for p in space.benchmark.prompts],
            "max_tokens": space.benchmark.max_tokens,
            "temperature": space.benchmark.temperature,
            "models": models_meta,
            "gpu": doc["machine"]["gpu"],
            "server_help": _server_help(list(space.server.launcher) or [backend.launcher(space)[0]]),
            "baseline_reference": None,
            "streams": {},
        }
    done = {(s["pass"], s["key"]) for s in starts}
    record_targets: dict[str, str] = {}
    if recordings:
        graph_rec = True if True in graphs else graphs[0]
        record_targets[TrialConfig.baseline(graph_rec).key()] = "baseline"
        for role, n, gs in (("good", a.record_good, graphs), ("bad", a.record_bad, a.bad_graphs)):
            cands = [c for c in configs if c.drafter == role]
            if not cands:
                continue
            g = True if True in gs else gs[0]
            pick = next((c for c in cands if c.knob("draft_n_max") == n and c.cuda_graph == g), cands[0])
            record_targets[pick.key()] = role

    runner = ProcessRunner(space, backend, log_dir=log_dir, record_path=state_path.parent / "sweep.pids.json")
    runner.reap_leftovers()
    walls = [s["wall_s"] for s in starts if s.get("wall_s")]
    todo = [(p, c) for p, c in order if (p, c.key()) not in done]
    log(
        f"{len(order)} starts planned ({len(configs)} configs x {a.repeats} passes), {len(todo)} to do, "
        f"budget {a.budget_s:g} s"
    )
    status = "done"
    try:
        for k, (p, cfg) in enumerate(todo, 1):
            est = statistics.median(walls) if walls else 0.0
            if time.monotonic() - T0 + est > a.budget_s:
                log(
                    f"budget: {time.monotonic() - T0:.0f} s used, next start ~{est:.0f} s; stopping "
                    f"({len(todo) - k + 1} starts left; re-run to resume)"
                )
                status = "budget"
                break
            t_start = time.monotonic()
            rec: dict[str, Any] = {
                "pass": p,
                "key": cfg.key(),
                "label": _label(cfg),
                "config": cfg.to_dict(),
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "t_offset_s": time.monotonic() - T0,
            }
            results: list[PromptResult] = []
            try:
                session = runner.launch(cfg)
                try:
                    info = session.info
                    rec.update(
                        argv=list(info.argv),
                        env=dict(info.env),
                        startup_s=info.startup_s,
                        log_path=info.log_path,
                        server_effective=info.effective,
                    )
                    session.warmup()
                    for i in range(len(space.benchmark.prompts)):
                        results.append(session.run_prompt(i))
                    role = record_targets.get(cfg.key())
                    if recordings and role and role not in recordings["streams"]:
                        base_url = f"http://127.0.0.1:{session.port}"
                        entry = {
                            "config": cfg.to_dict(),
                            "argv": list(info.argv),
                            "env": dict(info.env),
                            "server_effective": info.effective,
                        }
                        if role == "baseline":
                            log("recording the baseline's n_probs answers and streams (not timed)")
                            recordings["baseline_reference"] = {
                                **entry,
                                "requests": record_reference(base_url, backend, space),
                            }
                            try:
                                recordings["props"] = httpx.get(base_url + "/props", timeout=10, trust_env=False).json()
                            except (httpx.HTTPError, ValueError):
                                pass
                        else:
                            log(f"recording the streams of {_label(cfg)} (not timed)")
                        recordings["streams"][role] = {
                            **entry,
                            "requests": record_streams(base_url, backend, space),
                            "timed_texts": [r.text for r in results],
                        }
                finally:
                    session.close()
            except AutotuneError as e:
                rec["error"] = f"{type(e).__name__}: {e}"
                tail = getattr(e, "log_tail", "")
                if tail:
                    rec["log_tail"] = tail[-3000:]
            rec["wall_s"] = time.monotonic() - t_start
            if results and not rec.get("error"):
                summ = summarize(results)
                rec["tok_per_s"] = summ["tok_per_s"]
                rec["accept_length"] = summ["accept_length"]
                rec["prompts"] = [r.to_dict() for r in results]
                rec["texts"] = [r.text for r in results] if p == 0 else None
            walls.append(rec["wall_s"])
            doc["starts"].append(rec)
            save()
            if rec.get("error"):
                log(f"({k}/{len(todo)}) pass {p} {_label(cfg)}: FAILED {rec['error'][:300]}")
            else:
                per = " ".join(f"{r.tok_per_s:.0f}" for r in results)
                acc = rec["accept_length"]
                log(
                    f"({k}/{len(todo)}) pass {p} {_label(cfg)}: {rec['tok_per_s']:.1f} tok/s [{per}]"
                    f"{'' if acc is None else f', accept {acc:.2f}'}, startup {rec.get('startup_s', 0):.1f} s, "
                    f"wall {rec['wall_s']:.1f} s"
                )
    except KeyboardInterrupt:
        log("interrupted: the server was stopped; partial results written (re-run to resume)")
        save("interrupted")
        return 130
    save(status)
    best = doc["summary"].get("best")
    bb = doc["summary"].get("best_baseline")
    if bb:
        log(f"fastest baseline: {bb['label']} {bb['tok_per_s_mean']:.1f} tok/s")
    if best:
        sp = best["speedup"]
        log(
            f"fastest speculative: {best['label']} {best['tok_per_s_mean']:.1f} tok/s"
            f"{'' if sp is None else f' ({sp:.3f}x)'}"
        )
    log(f"wrote {out / 'sweep.json'}, {out / 'sweep.md'}" + (f", {rec_path}" if recordings else ""))
    return 0 if status == "done" else 3


if __name__ == "__main__":
    raise SystemExit(main())

"""The space file of the GPU harness: one llama.cpp study space that ``sweep.py`` and ``autotune study`` both read,
so the sweep's servers get exactly the argv and the benchmark client a study gives them.

    python3 scripts/gpu/gpu_space.py OUT.yaml --server BIN --models DIR [--max-tokens 256] [--n-trials 16] ...

Everything not written here keeps autotune's defaults (pruning, verdict, confirmation, budget.timeout_s): the
study runs with default settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: the prompts of spaces/llamacpp-tiny.yaml
PROMPTS = [
    ("kettle", "The kettle on the stove began to whistle, and the old man looked up from his newspaper"),
    ("list", "Here is a short list of things to pack for a weekend in the mountains:"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("letter", "Dear members of the committee, thank you for the time you gave to our proposal last week"),
]


#: the method study's prompts: rewrite a 15-20 line function with one change (an answer that copies its prompt)
REWRITE = Path(__file__).resolve().parents[2] / "tests" / "llamacpp" / "prompts" / "rewrite.yaml"

#: each llama.cpp type's searched values in a method study (combinations take the union)
_TYPE_KNOBS = {
    "ngram-simple": {"ngram_simple_size_n": "[2, 3, 4, 6, 8]", "ngram_simple_size_m": "[8, 16, 32, 48]"},
    "ngram-map-k": {"ngram_map_k_size_n": "[2, 3, 4, 6, 8]", "ngram_map_k_size_m": "[8, 16, 32, 48]"},
    "ngram-map-k4v": {"ngram_map_k4v_size_n": "[2, 3, 4, 6, 8]", "ngram_map_k4v_size_m": "[8, 16, 32, 48]"},
    "ngram-mod": {
        "ngram_mod_n_match": "[4, 8, 16, 24]",
        "ngram_mod_n_max": "[16, 32, 64]",
        "ngram_mod_n_min": "[1, 4, 16]",
    },
    "ngram-cache": {},
}


def _method_knobs(method: str, draft_n_max: tuple[int, int]) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in method.split(","):
        if t.startswith("draft-"):
            out["drafters"] = "[good]"
            out["draft_n_max"] = f"{{low: {int(draft_n_max[0])}, high: {int(draft_n_max[1])}}}"
        elif t in _TYPE_KNOBS:
            out.update(_TYPE_KNOBS[t])
        else:
            raise SystemExit(f"gpu_space.py: unknown --spec-type {t!r} in --methods (expected draft-* or ngram-*)")
    return out


def _q(s: str) -> str:
    """A YAML scalar: JSON strings are valid YAML flow scalars."""
    return json.dumps(s)


def space_yaml(
    *,
    name: str,
    server: str,
    models: str,
    max_tokens: int = 256,
    n_trials: int = 16,
    cuda_graph: Sequence[bool] = (False, True),
    draft_n_max: tuple[int, int] = (1, 16),
    startup_timeout_s: float = 300.0,
    port: int = 30080,
    extra_args: Sequence[str] = (),
    comment: str = "",
    concurrency: Sequence[int] = (),
    methods: Sequence[str] = (),
    requests_file: str = "",
    requests: int = 16,
    holdout: int = 16,
) -> str:
    """The space's text; with ``methods`` (llama.cpp --spec-type names, a combination as "a,b") a ``search.methods``
    space over the good drafter and the repetition-heavy prompts of ``REWRITE`` instead of the drafter search; with
    ``requests_file`` (a chat request log, ``traffic_log.py``) the drafter search over ``requests`` requests picked
    from the log, each at its own sampling and length, checked against ``holdout`` more (the chat endpoint)."""
    m = Path(models)
    lines = [
        "# Written by scripts/gpu/gpu_space.py (the GPU harness); read by scripts/gpu/sweep.py and `autotune study`.",
        *(f"# {c}" for c in comment.splitlines()),
        f"name: {name}",
        "",
        "server:",
        "  backend: llamacpp",
        f"  model_path: {_q(str(m / 'target.gguf'))}",
        f"  launcher: [{_q(server)}]",
        "  host: 127.0.0.1",
        f"  port: {int(port)}",
        f"  startup_timeout_s: {startup_timeout_s:g}",
        "  request_timeout_s: 120",
        "  port_busy: next",
    ]
    if extra_args:
        lines.append(f"  extra_args: [{', '.join(_q(a) for a in extra_args)}]")
    lines += [
        "",
        "drafters:",
        "  - name: good",
        f"    path: {_q(str(m / 'draft-good.gguf'))}",
        "  - name: bad",
        f"    path: {_q(str(m / 'draft-bad.gguf'))}",
        "",
        "search:",
        f"  cuda_graph: [{', '.join('true' if b else 'false' for b in cuda_graph)}]",
    ]
    if methods:
        lines.append("  methods:")
        for method in methods:
            lines.append(f"    {_q(method)}:")
            body = _method_knobs(method, draft_n_max)
            lines += [f"      {k}: {v}" for k, v in body.items()] or ["      {}"]
            if not body:
                lines[-2] = lines[-2] + " {}"
                lines.pop()
        lines += ["", "benchmark:", f"  prompts_file: {_q(str(REWRITE))}"]
    elif requests_file:
        lines += [
            f"  draft_n_max: {{low: {int(draft_n_max[0])}, high: {int(draft_n_max[1])}}}",
            "",
            "benchmark:",
            f"  requests_file: {_q(str(Path(requests_file).resolve()))}",
            f"  requests: {int(requests)}",
            f"  holdout: {int(holdout)}",
        ]
    else:
        lines += [
            f"  draft_n_max: {{low: {int(draft_n_max[0])}, high: {int(draft_n_max[1])}}}",
            "",
            "benchmark:",
            "  prompts:",
        ]
        for pid, text in PROMPTS:
            lines += [f"    - id: {pid}", f"      text: {_q(text)}"]
    lines += [
        f"  max_tokens: {int(max_tokens)}",
        *([f"  concurrency: [{', '.join(str(int(c)) for c in concurrency)}]"] if concurrency else []),
        *([] if requests_file else ["  temperature: 0"]),  # a log's requests keep their own
        "  warmup_requests: 1",
        f"  api: {'chat' if requests_file else 'completions'}",
        "",
        f"budget: {{n_trials: {int(n_trials)}}}",
        "",
    ]
    return "\n".join(lines)


def _bools(text: str) -> list[bool]:
    out = []
    for part in text.split(","):
        p = part.strip().lower()
        if p in ("on", "true", "1", "yes"):
            out.append(True)
        elif p in ("off", "false", "0", "no"):
            out.append(False)
        elif p:
            raise argparse.ArgumentTypeError(f"expected on/off/true/false but got {part!r}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="the space file to write")
    p.add_argument("--name", default="llamacpp-gpu")
    p.add_argument("--server", required=True, help="the llama-server binary (server.launcher)")
    p.add_argument("--models", required=True, help="folder with target.gguf, draft-good.gguf, draft-bad.gguf")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--n-trials", type=int, default=16)
    p.add_argument("--cuda-graph", type=_bools, default=[False, True], help="e.g. off,on (default) or on")
    p.add_argument("--draft-n-max", default="1,16", help="LOW,HIGH (default 1,16)")
    p.add_argument("--startup-timeout-s", type=float, default=300.0)
    p.add_argument("--port", type=int, default=30080)
    p.add_argument("--extra-args", default="", help="extra llama-server arguments, space-separated")
    p.add_argument("--comment", default="")
    p.add_argument("--concurrency", default="", help="load levels, e.g. 1,4,16 (default: none, one stream)")
    p.add_argument(
        "--methods",
        default="",
        help="a method study: --spec-type methods, comma-separated, a combination joined with + "
        "(e.g. draft-simple,ngram-mod,draft-simple+ngram-mod)",
    )
    p.add_argument("--requests-file", default="", help="a chat request log: a request-log study (traffic_log.py)")
    p.add_argument("--requests", type=int, default=16, help="with --requests-file: requests to pick (default 16)")
    p.add_argument("--holdout", type=int, default=16, help="with --requests-file: holdout requests (default 16)")
    a = p.parse_args(argv)
    low, high = (int(x) for x in a.draft_n_max.split(","))
    text = space_yaml(
        name=a.name,
        server=a.server,
        models=a.models,
        max_tokens=a.max_tokens,
        n_trials=a.n_trials,
        cuda_graph=a.cuda_graph,
        draft_n_max=(low, high),
        startup_timeout_s=a.startup_timeout_s,
        port=a.port,
        extra_args=a.extra_args.split(),
        comment=a.comment,
        concurrency=[int(x) for x in a.concurrency.split(",") if x.strip()],
        methods=[m.strip().replace("+", ",") for m in a.methods.split(",") if m.strip()],
        requests_file=a.requests_file,
        requests=a.requests,
        holdout=a.holdout,
    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

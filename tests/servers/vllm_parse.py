"""Ask vLLM's own code whether it accepts ``vllm serve`` argvs and how it reads their speculative config (run with the
Python of the venv ``scripts/vllm_setup.sh`` makes; never imported by autotune or by pytest's own interpreter).

Usage: python vllm_parse.py ITEMS.json  -> prints one JSON list, one result per item, in order.

ITEMS.json: ``[{"id": ..., "argv": [MODEL, "--flag", ...]}, ...]``: the arguments after ``vllm serve``. Each goes
through what ``vllm serve`` runs before it starts an engine, vLLM's own code throughout:

1. ``parse``: the parser ``vllm.entrypoints.cli.main.main`` builds (a ``FlexibleArgumentParser`` with subcommands,
   ``ServeSubcommand.subparser_init``: ``make_arg_parser``, i.e. ``FrontendArgs`` + ``AsyncEngineArgs.add_cli_args``),
   given ``["serve", *argv]`` as ``sys.argv[1:]``.
2. ``validate``: ``ServeSubcommand.validate`` (``validate_parsed_serve_args``).
3. ``config``: what ``ServeSubcommand.cmd`` -> ``run_server`` -> ``build_async_engine_client`` does before it starts
   the engine: ``args.model = args.model_tag`` (``cmd``'s first line), ``AsyncEngineArgs.from_cli_args(args)``,
   ``create_engine_config(usage_context=OPENAI_API_SERVER)``. That builds the target's ``ModelConfig`` (its
   config.json, the model registry's inspection of its architecture) and the ``SpeculativeConfig`` (pydantic
   validation of the JSON, ``__post_init__``: method inference and rewrites, the draft's ``ModelConfig``, n-gram
   lookup defaults, ``_verify_args``).

The result is ``{"id", "accepted": true, "speculative": {method, model, num_speculative_tokens, prompt_lookup_min,
prompt_lookup_max, draft_tensor_parallel_size, num_speculative_tokens_per_batch_size} | None, "enforce_eager",
"max_num_seqs", "port", "host"}`` or ``{"id", "accepted": false, "stage": "parse" | "validate" | "config", "error"}``.

What differs from a real launch on a GPU host, and why (nothing of vLLM's code is replaced):
- ``VLLM_TARGET_DEVICE=cpu``: this machine has no accelerator; vLLM's own CPU platform is selected instead of CUDA
  (``vllm.platforms.cpu_platform_plugin``). The platform's ``check_and_update_config`` is CPU's, not CUDA's: it
  touches compilation, cache and scheduler settings, not the speculative config's method, model or token counts.
  The wheel's compiled ops (``vllm._C``, built for CUDA) do not load; vLLM logs a warning and goes on (nothing on
  this path calls them).
- torch 2.13.0 (CPU) instead of the 2.14.0 the wheel pins: nothing on this path depends on the difference.
- ``HF_HUB_OFFLINE=1``: checkpoint paths are local stand-ins (the simulator's, which carry the real
  ``config.json``, no weights); vLLM reads only their config.json here.
Each item runs in a forked child, so one item's configuration (vLLM sets environment variables and class state)
cannot leak into the next.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

SPECULATIVE = (
    "method",
    "model",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "num_speculative_tokens_per_batch_size",
)


def _last_error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "error:" in ln]
    return lines[-1].strip() if lines else text.strip().splitlines()[-1] if text.strip() else ""


def _parser():  # noqa: ANN202
    """The parser of ``vllm.entrypoints.cli.main.main``, with the serve subcommand (the only one autotune uses)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    return parser, serve


def _check_argv(argv: list[str]) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    parser, serve = _parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(["serve", *[str(a) for a in argv]])
    except SystemExit:  # argparse: the message went to stderr
        return {"accepted": False, "stage": "parse", "error": _last_error_line(err.getvalue())}
    except Exception as e:  # noqa: BLE001
        return {"accepted": False, "stage": "parse", "error": f"{type(e).__name__}: {e}"}
    try:
        serve.validate(args)
    except Exception as e:  # noqa: BLE001
        return {"accepted": False, "stage": "validate", "error": f"{type(e).__name__}: {e}"}
    try:
        if args.model_tag is not None:  # ServeSubcommand.cmd's first step
            args.model = args.model_tag
        engine_args = AsyncEngineArgs.from_cli_args(args)
        config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    except Exception as e:  # noqa: BLE001
        return {
            "accepted": False,
            "stage": "config",
            "error": f"{type(e).__name__}: {e}".strip()[:2000],
            "where": traceback.format_exc().strip().splitlines()[-3:],
        }
    spec = config.speculative_config
    out: dict = {
        "accepted": True,
        "speculative": None,
        "enforce_eager": config.model_config.enforce_eager,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
        "host": args.host,
        "port": args.port,
    }
    if spec is not None:
        out["speculative"] = {k: getattr(spec, k) for k in SPECULATIVE}
        dp = spec.draft_parallel_config
        out["speculative"]["draft_tensor_parallel_size"] = dp.tensor_parallel_size if dp is not None else None
    return out


def _in_child(item: dict, report_imports: bool = False) -> dict:
    """``item`` checked in a forked child (vLLM's config changes process-wide state); with ``report_imports`` the
    result also lists the modules the child imported (``"_imported"``)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        before = set(sys.modules)
        try:
            out = _check_argv(item["argv"]) if "argv" in item else {"accepted": False, "stage": "input"}
        except BaseException as e:  # noqa: BLE001
            out = {"accepted": False, "stage": "driver", "error": f"{type(e).__name__}: {e}"}
        if report_imports:
            out["_imported"] = [m for m in sys.modules if m not in before]
        with os.fdopen(w, "w") as f:
            json.dump(out, f, default=str)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"accepted": False, "stage": "driver", "error": f"child died (wait status {status})"}
    return json.loads(data)


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        items = json.load(f)
    import vllm.engine.arg_utils  # noqa: F401  (import once, before forking)
    import vllm.entrypoints.cli.serve  # noqa: F401
    from vllm.version import __version__

    results = []
    for i, item in enumerate(items):
        out = _in_child(item, report_imports=i == 0)
        # what the first check imported lazily, imported here once before the next fork (imports only: each check
        # still runs in its own child)
        for name in out.pop("_imported", []):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001  (a module that imports only inside its parent's import: the child's job)
                pass
        results.append({"id": item.get("id"), "vllm": __version__, **out})
    json.dump(results, sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

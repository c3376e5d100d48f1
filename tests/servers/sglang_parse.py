"""Ask SGLang's own code whether it accepts launch argvs and adaptive-config files (run with the Python of the venv
``scripts/sglang_setup.sh`` makes; never imported by autotune or by pytest's own interpreter).

Usage: python sglang_parse.py ITEMS.json  -> prints one JSON list, one result per item, in order.
       python sglang_parse.py --serve    -> reads ``ITEMS.json<TAB>OUT.json`` lines (``serve``): one import of
                                            SGLang for a whole test module

ITEMS.json: ``[{"id": ..., "argv": [...]}, {"id": ..., "adaptive_config": "path"}, ...]``. For an argv item
(the flags after ``python -m sglang.launch_server``): SGLang's ``prepare_server_args`` (its argparse parser and
``ServerArgs.from_cli_args``), then ``ServerArgs.resolve_once`` (the resolution pipeline the launcher runs: model
config, the speculative hook with its auto choice and silent rewrites, the adaptive-config check). The result is
``{"id", "accepted": true, "resolved": {speculative_algorithm, speculative_num_steps, speculative_eagle_topk,
speculative_num_draft_tokens, speculative_adaptive, max_running_requests}}`` or ``{"id", "accepted": false,
"stage": "parse" | "resolve", "error": the message SGLang raised}``. An adaptive-config item goes through
``adaptive_spec_params._load_adaptive_config`` and ``resolve_candidate_steps_from_config``.

What differs from a real launch on a GPU host, and why:
- This machine has no accelerator, and SGLang's resolution asks for one (``get_device``): ``--device cpu`` is
  appended when the argv names no device. Nothing of the speculative settings depends on it except that the CPU
  platform turns the overlap scheduler off.
- Checkpoint paths: the caller passes argvs whose paths exist here (the simulator's stand-in checkpoints, which
  carry the real ``config.json``); SGLang reads only their config.json during resolution, no weights.
- torchvision: PyPI's wheel is built against CUDA torch and cannot import beside the CPU torch installed here.
  SGLang's resolution imports every model config module, and a few multimodal ones import torchvision for image
  preprocessing only; they get an inert placeholder module. transformers is asked first whether torchvision is
  installed (it is not), so transformers never sees the placeholder. No argument parsing or resolution code runs
  through it.
Each item runs in a forked child, so one item's resolution (which may set environment variables) cannot leak into
the next.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import sys
import traceback
import types

RESOLVED = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_adaptive",
    "max_running_requests",
)


class _Inert(types.ModuleType):
    """A module whose every attribute is another inert module (used only at import time by image preprocessing)."""

    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self.__name__}.{name}")

    def __call__(self, *args: object, **kwargs: object) -> _Inert:
        return _Inert(f"{self.__name__}()")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, top: str) -> None:
        self.top = top

    def find_spec(self, name, path, target=None):  # noqa: ANN001
        if name == self.top or name.startswith(self.top + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001
        return _Inert(spec.name)

    def exec_module(self, module) -> None:  # noqa: ANN001
        module.__path__ = []


def _torchvision_placeholder() -> None:
    try:
        import torchvision  # noqa: F401

        return  # a working torchvision: use it
    except Exception:  # noqa: BLE001 (missing, or the CUDA build failing beside a CPU torch)
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached: False, before the placeholder exists
    import_utils.is_torchvision_v2_available()
    sys.meta_path.insert(0, _InertFinder("torchvision"))


def _last_error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "error:" in ln]
    return lines[-1].strip() if lines else text.strip().splitlines()[-1] if text.strip() else ""


class _Deprecations(logging.Handler):
    """The deprecation warnings SGLang logs while it parses (``argparse_actions.print_deprecated_warning``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "deprecated" in message.lower():
            self.messages.append(message)


def _check_argv(argv: list[str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    argv = [str(a) for a in argv]
    if not any(a == "--device" or a.startswith("--device=") for a in argv):
        argv += ["--device", "cpu"]
    err = io.StringIO()
    warned = _Deprecations()
    logging.getLogger().addHandler(warned)
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
    except SystemExit:  # argparse: the message went to stderr
        return {"accepted": False, "stage": "parse", "error": _last_error_line(err.getvalue())}
    except Exception as e:  # noqa: BLE001
        return {"accepted": False, "stage": "parse", "error": f"{type(e).__name__}: {e}"}
    finally:
        logging.getLogger().removeHandler(warned)
    deprecated = [*warned.messages, *(ln for ln in err.getvalue().splitlines() if "deprecated" in ln.lower())]
    try:
        args.resolve_once()
        resolved = args.resolved_dict()
    except SystemExit as e:
        return {"accepted": False, "stage": "resolve", "error": f"SystemExit: {e}"}
    except Exception as e:  # noqa: BLE001
        return {
            "accepted": False,
            "stage": "resolve",
            "error": f"{type(e).__name__}: {e}",
            "where": traceback.format_exc().strip().splitlines()[-3:],
        }
    return {"accepted": True, "resolved": {k: resolved.get(k) for k in RESOLVED}, "deprecated": deprecated}


def _check_adaptive(path: str) -> dict:
    from sglang.srt.speculative.adaptive_spec_params import (
        _load_adaptive_config,
        resolve_candidate_steps_from_config,
    )

    try:
        _cfg, entries = _load_adaptive_config(path)
        steps = resolve_candidate_steps_from_config(path)
    except Exception as e:  # noqa: BLE001
        return {"accepted": False, "stage": "load", "error": f"{type(e).__name__}: {e}"}
    return {
        "accepted": True,
        "batch_sizes": {str(bs): sorted(set(e["candidate_steps"])) for bs, e in sorted(entries.items())},
        "candidate_steps": steps,
    }


def _one(item: dict) -> dict:
    if "argv" in item:
        return _check_argv(item["argv"])
    if "adaptive_config" in item:
        return _check_adaptive(item["adaptive_config"])
    return {"accepted": False, "stage": "input", "error": f"unknown item {sorted(item)}"}


def _in_child(item: dict, report_imports: bool = False) -> dict:
    """``item`` checked in a forked child (SGLang's resolution changes process-wide state); with ``report_imports``
    the result also lists the modules the child imported (``"_imported"``)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        before = set(sys.modules)
        try:
            out = _one(item)
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


def _prepare() -> None:
    _torchvision_placeholder()
    import sglang.srt.arg_groups.pipeline  # noqa: F401  (import once, before forking)
    import sglang.srt.server_args  # noqa: F401


_WARM = [False]


def check(items: list[dict]) -> list[dict]:
    results = []
    for item in items:
        out = _in_child(item, report_imports=not _WARM[0])
        _WARM[0] = True
        # the first resolution imports ~140 more modules (0.4 s a child): import them here once, before the next
        # fork, so that every later child starts with them (imports only: the resolution still runs in each child)
        for name in out.pop("_imported", []):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001  (a module that imports only inside its parent's import: the child's job)
                pass
        results.append({"id": item.get("id"), **out})
    return results


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        items = json.load(f)
    _prepare()
    json.dump(check(items), sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


def serve() -> int:
    """One import of SGLang for many requests (a test module's): each stdin line is ``ITEMS.json<TAB>OUT.json``;
    the results go to OUT.json, then ``@@done`` on stdout. Ends at end of input."""
    _prepare()
    for line in sys.stdin:
        src, dst = line.rstrip("\n").split("\t")
        with open(src, encoding="utf-8") as f:
            results = check(json.load(f))
        with open(dst + ".tmp", "w", encoding="utf-8") as f:
            json.dump(results, f, default=str)
        os.replace(dst + ".tmp", dst)
        sys.stdout.write("@@done\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1]))

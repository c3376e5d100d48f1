"""SGLang's flag spelling by release: which CUDA-graph flags a version takes, read from ``launch_server --help``
when the version is unknown, and the CUDA-graph state its server args report."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

#: the SGLang release targeted when the space does not name one
DEFAULT_VERSION = "0.5.23"
#: the first release written with the per-phase CUDA-graph flags: SGLang 0.5.23's server_args.py registers
#: ``--disable-cuda-graph`` as a ``DeprecatedStoreTrueAction`` (it warns "'--disable-cuda-graph' is deprecated and will
#: be removed in a future release. Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."), while
#: ``--disable-decode-cuda-graph`` / ``--disable-prefill-cuda-graph`` are current ("Convenience for
#: --cuda-graph-backend-{decode,prefill}=disabled", arg_groups/fields/exec_.py). Older releases keep the legacy flag
#: (not read here; a space without ``server.version`` is probed with ``--help``).
_FIRST_PER_PHASE_CUDA_GRAPH_FLAGS = (0, 5, 23)

#: the first release with ``--cuda-graph-max-bs-decode`` (read from the wheels: 0.5.13 knows only
#: ``--cuda-graph-max-bs``; 0.5.14-0.5.19 keep that as a deprecated alias; 0.5.20 dropped it, so argparse's prefix
#: matching makes it "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode,
#: --cuda-graph-max-bs-prefill")
_FIRST_PER_PHASE_MAX_BS = (0, 5, 14)
OLD_MAX_BS_FLAG = "--cuda-graph-max-bs"
DECODE_MAX_BS_FLAG = "--cuda-graph-max-bs-decode"

LEGACY = "legacy"  # --disable-cuda-graph
PER_PHASE = "per-phase"  # --disable-decode-cuda-graph --disable-prefill-cuda-graph


def parse_version(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)``; leading numeric components only."""
    parts: list[int] = []
    for piece in version.strip().lstrip("vV").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    if not parts:
        raise ValueError(f"not a version: {version!r}")
    return tuple(parts)


def cuda_graph_spelling(version: str | None) -> str:
    """How to turn CUDA graphs off for SGLang ``version``: ``LEGACY`` before 0.5.23, ``PER_PHASE`` from 0.5.23 on
    (where ``--disable-cuda-graph`` is deprecated)."""
    v = parse_version(version or DEFAULT_VERSION)
    return LEGACY if v < _FIRST_PER_PHASE_CUDA_GRAPH_FLAGS else PER_PHASE


def cuda_graph_max_bs_flag(version: str | None) -> str:
    """The flag capping the decode CUDA-graph batch size for SGLang ``version`` (``DEFAULT_VERSION`` when None):
    ``--cuda-graph-max-bs-decode`` from 0.5.14 on, ``--cuda-graph-max-bs`` before."""
    v = parse_version(version or DEFAULT_VERSION)
    return DECODE_MAX_BS_FLAG if v >= _FIRST_PER_PHASE_MAX_BS else OLD_MAX_BS_FLAG


def max_bs_flag_from_help(text: str) -> str | None:
    """The CUDA-graph max-batch-size flag named in ``launch_server --help`` output (None: can't tell)."""
    if re.search(r"--cuda-graph-max-bs-decode\b", text):
        return DECODE_MAX_BS_FLAG
    if re.search(r"--cuda-graph-max-bs(?![-\w])", text):
        return OLD_MAX_BS_FLAG
    return None


def flag_spelling_from_help(text: str) -> str | None:
    """Decide the CUDA-graph flag spelling from ``launch_server --help`` output (None: can't tell)."""
    if re.search(r"--disable-decode-cuda-graph\b", text):
        return PER_PHASE
    if re.search(r"--disable-cuda-graph\b", text):
        return LEGACY
    return None


def cuda_graph_off_flags(spelling: str) -> list[str]:
    if spelling == LEGACY:
        return ["--disable-cuda-graph"]
    if spelling == PER_PHASE:
        return ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
    raise ValueError(f"unknown CUDA-graph flag spelling {spelling!r}")


def run_help(argv: list[str], *, timeout_s: float) -> str | None:
    """stdout+stderr of ``argv`` (a ``--help`` command), or None when it can't run or overruns ``timeout_s``."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return out.decode("utf-8", "replace")


def cuda_graph_state(info: Mapping[str, Any]) -> bool | None:
    """Whether the server runs with CUDA graphs, from its server args (None: they do not say)."""
    keys = ("disable_cuda_graph", "disable_decode_cuda_graph", "disable_prefill_cuda_graph")
    seen = [bool(info[k]) for k in keys if k in info and info[k] is not None]
    backend = info.get("cuda_graph_backend_decode")
    if backend is not None:
        seen.append(str(backend).lower() == "disabled")
    if not seen:
        return None
    return not any(seen)


__all__ = [
    "DECODE_MAX_BS_FLAG",
    "DEFAULT_VERSION",
    "OLD_MAX_BS_FLAG",
    "LEGACY",
    "PER_PHASE",
    "cuda_graph_max_bs_flag",
    "cuda_graph_off_flags",
    "cuda_graph_spelling",
    "cuda_graph_state",
    "flag_spelling_from_help",
    "max_bs_flag_from_help",
    "parse_version",
    "run_help",
]

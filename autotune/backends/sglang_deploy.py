"""Deploying an SGLang study: its ``server.extra_args`` in server-neutral terms (``portable_settings``, for another
server's export) and a per-level schedule in SGLang's own form, the adaptive config file
(``--speculative-adaptive-config``, ``adaptive_config``) and the steps an adaptive server starts at
(``adaptive_initial_steps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from autotune.backends.streams import INCREMENTAL_OUTPUT_FLAG
from autotune.schedule import batch_ranges

__all__ = ["CLIENT_ONLY_FLAGS", "PORTABLE_FLAGS", "adaptive_config", "adaptive_initial_steps", "portable_settings"]

#: ``server.extra_args`` with a server-neutral meaning (``portable``): flag -> setting (True: a switch)
PORTABLE_FLAGS: dict[str, str | Literal[True]] = {
    "--tp-size": "tensor_parallel_size",
    "--tp": "tensor_parallel_size",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--pp-size": "pipeline_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--dtype": "dtype",
    "--context-length": "max_model_len",
    "--trust-remote-code": True,
}
#: flags that only shape how autotune reads the stream: no meaning for a deployment elsewhere
CLIENT_ONLY_FLAGS = (INCREMENTAL_OUTPUT_FLAG,)


def portable_settings(extra_args: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``server.extra_args`` as server-neutral settings (``PORTABLE_FLAGS``); ValueError naming the flags that have
    none."""
    out: dict[str, Any] = {}
    unknown: list[str] = []
    args = [str(a) for a in extra_args]
    i = 0
    while i < len(args):
        flag, _, inline = args[i].partition("=")
        setting = PORTABLE_FLAGS.get(flag)
        if flag in CLIENT_ONLY_FLAGS:
            i += 1
        elif setting is True:
            out[flag.lstrip("-").replace("-", "_")] = True
            i += 1
        elif setting is not None and (inline or i + 1 < len(args)):
            out[setting] = inline or args[i + 1]
            i += 1 if inline else 2
        else:
            unknown.append(args[i])
            i += 1
    if unknown:
        raise ValueError(
            f"server.extra_args {' '.join(unknown)}: no equivalent on another server known to autotune, so no "
            "faithful translation"
        )
    return out


def adaptive_config(schedule: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's ``--speculative-adaptive-config`` file: one entry per batch-size range of ``schedule.batch_ranges``,
    keyed by the range's first batch size (an integer string), ``{"candidate_steps": [K]}`` with the schedule's
    draft length there (0: no speculation). Format as SGLang 0.5.23 reads it (``speculative/adaptive_spec_params.py``,
    ``_load_adaptive_config``: at least one integer-string key, each ``candidate_steps`` a non-empty list of
    non-negative ints). SGLang routes a decode batch (padded up to a captured CUDA-graph size) to the entry with the
    largest key not above it, and within an entry moves between its candidate steps by the acceptance it observes
    (an EMA); one candidate per entry pins the measured draft length. Batches above the highest level use the last
    entry."""
    return {str(start): {"candidate_steps": [int(k)]} for start, _end, k in batch_ranges(schedule)}


def adaptive_initial_steps(schedule: Mapping[str, Any]) -> int:
    """The ``--speculative-num-steps`` to launch an adaptive SGLang server with: the first level's draft length
    (SGLang refuses a value that is in no entry's ``candidate_steps``)."""
    return int(schedule["levels"][0]["draft"])

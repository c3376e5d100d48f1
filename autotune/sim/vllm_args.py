"""vLLM's ``vllm serve`` launch flags as the simulator reads them, with vLLM 0.33.0's speculative rules applied as
vLLM applies them (``--engine vllm``; ``autotune.sim.args`` holds the sim's own flags and SGLang's).

``parse_vllm_args(argv)`` takes everything after ``-m autotune.sim``: the sim's flags, then ``vllm serve``'s
arguments (the model first). What it reads of vLLM's: the model, ``--speculative-config`` (one JSON argument:
``method`` eagle, eagle3, draft_model, mtp or ngram, ``model``, ``num_speculative_tokens``,
``prompt_lookup_min`` / ``prompt_lookup_max``, ``num_speculative_tokens_per_batch_size``), ``--enforce-eager``,
``--max-num-seqs``, ``--tensor-parallel-size``, ``--served-model-name``, ``--host``, ``--port``; other flags are
ignored with a log line. A launch vLLM would refuse raises ``SimLaunchError`` with vLLM's message.

Every method runs as a chain of K drafted tokens (vLLM drafts no trees), in the same performance model as SGLang's
launches (``ResolvedArgs``): eagle -> EAGLE, eagle3 -> EAGLE3, draft_model -> STANDALONE, mtp -> the target's own MTP
layers, ngram -> NGRAM (prompt lookup, breadth 1). An EAGLE-3 head launched as ``eagle`` loads when vLLM's registry
knows its architecture (``autotune.backends.vllm_methods``) and then accepts nothing: vLLM does not capture the
auxiliary hidden states the head was trained on, and says nothing (the silent collapse autotune's drafter-not-engaged
alarm is for). A per-batch-size schedule (``num_speculative_tokens_per_batch_size``, vLLM's dynamic speculative
decoding) runs as a controller whose every batch-size slot has one step count (``autotune.sim.adaptive``): K for a
batch size is its range's, a gap or the tail carries the previous range's on, capped by ``num_speculative_tokens``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from autotune.backends.vllm_methods import architecture_problem
from autotune.sim.args import (
    _SIM_BOOL_FLAGS,
    ResolvedArgs,
    _split,
    engine_of,
    parse_sglang_args,
    sim_args,
)
from autotune.sim.args import (
    VLLM_DEFAULT_GRAPH_MAX_BS as DEFAULT_GRAPH_MAX_BS,
)
from autotune.sim.args import (
    VLLM_DEFAULT_MAX_NUM_SEQS as DEFAULT_MAX_NUM_SEQS,
)
from autotune.sim.args import (
    VLLM_VALUE_FLAGS as _VALUE_FLAGS,
)
from autotune.sim.faults import SimLaunchError, _fail, _not_loadable
from autotune.sim.scenario import ScenarioLoader, SimDrafter, load_scenario

VLLM_VERSION = "0.33.0"
#: the methods the simulator plays (vLLM has more: suffix, ngram_gpu, dflash, dspark, custom_class, ...)
SIMULATED_METHODS = ("eagle", "eagle3", "draft_model", "mtp", "ngram")
#: vLLM's method -> the algorithm of the performance model
_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "mtp": "EAGLE", "ngram": "NGRAM"}
#: keys of ``--speculative-config`` the simulator reads; others are ignored with a log line
_SPEC_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "num_speculative_tokens_per_batch_size",
    "draft_tensor_parallel_size",
)

_BOOL_FLAGS = {"--enforce-eager": "enforce_eager", **_SIM_BOOL_FLAGS}
_PROG = "vllm serve"

__all__ = [
    "DEFAULT_GRAPH_MAX_BS",
    "DEFAULT_MAX_NUM_SEQS",
    "SIMULATED_METHODS",
    "VLLM_VERSION",
    "parse_launch_args",
    "parse_vllm_args",
]


def _error(message: str, log: list[str]) -> SimLaunchError:
    """vLLM's refusal of its engine arguments: the exception line, exit 1."""
    return _fail(f"ValueError: {message}", log)


def parse_vllm_args(argv: list[str], *, load: ScenarioLoader = load_scenario) -> ResolvedArgs:
    """Parse the sim's flags and ``vllm serve``'s and apply vLLM 0.33.0's speculative rules. Raises
    SimLaunchError."""
    vals, fault_texts, log = _split(list(argv), _VALUE_FLAGS, _BOOL_FLAGS, positional="model_path", prog=_PROG)
    args = sim_args(vals, fault_texts, log, load, engine="vllm", prog=_PROG, model_flag="model_tag")
    if "port" not in vals:
        args.port = 8000
    args.disable_cuda_graph = bool(vals.get("enforce_eager", False))
    args.enable_metrics = True  # vLLM's OpenAI server always serves /metrics
    text = vals.get("speculative_config")
    if text is None:
        args.faults = tuple(f for f in args.faults if f.applies_to(None))
        return args
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(
            f"{_PROG}: error: argument --speculative-config: Value {text} cannot be converted to <function loads>: {e}",
            log,
            returncode=2,
        ) from None
    if not isinstance(spec, dict):
        raise _error(f"--speculative-config must be a JSON object but got {text}", log)
    return _resolve(args, spec, log)


def _int(spec: dict[str, Any], key: str, log: list[str]) -> int | None:
    v = spec.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _error(f"{key}: Input should be a valid integer, got {v!r}", log)
    return v


def _resolve(args: ResolvedArgs, spec: dict[str, Any], log: list[str]) -> ResolvedArgs:
    """``SpeculativeConfig.__post_init__`` for the methods the simulator plays."""
    for key in spec:
        if key not in _SPEC_KEYS:
            log.append(f"WARNING autotune.sim: ignoring speculative_config key {key!r} (not simulated)")
    model = spec.get("model")
    method = spec.get("method")
    if method is None:  # vLLM: detected from the model where it can be, else a draft model
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = "ngram" if method == "[ngram]" else method
    if method not in SIMULATED_METHODS:
        raise _fail(
            f"autotune.sim: speculative method {method!r} is not simulated (only {', '.join(SIMULATED_METHODS)})", log
        )
    k = _int(spec, "num_speculative_tokens", log)
    if k is None:
        raise _error("num_speculative_tokens must be provided with speculative model.", log)
    if k < 1:
        raise _error(f"Expected num_speculative_tokens to be greater than zero ({k}).", log)
    drafter: SimDrafter | None = None
    scenario = args.scenario
    if method == "mtp":
        drafter = scenario.mtp
        if drafter is None:
            raise _error("Unsupported speculative method: 'mtp' (the target's config.json names no MTP layers)", log)
        model = args.model_path
    elif method == "ngram":
        lo, hi = _int(spec, "prompt_lookup_min", log), _int(spec, "prompt_lookup_max", log)
        lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi, hi if hi is not None else lo)
        assert lo is not None and hi is not None
        if lo < 1 or hi < 1:
            raise _error(f"prompt_lookup_min={lo} and prompt_lookup_max={hi} must be at least 1", log)
        if lo > hi:
            raise _error(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}", log)
        spec = {**spec, "prompt_lookup_min": lo, "prompt_lookup_max": hi}
        args.speculative_ngram_max_bfs_breadth = 1  # a chain: vLLM proposes the K tokens after the match
        args.speculative_ngram_min_bfs_breadth = 1
    else:
        if not isinstance(model, str) or not model:
            raise _error("num_speculative_tokens was provided but without speculative model.", log)
        drafter = scenario.drafter_by_path(model)
        if drafter is None:
            if os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json")):
                raise _fail(
                    f"autotune.sim: {model} is a checkpoint the scenario {scenario.name} does not know "
                    f"(its drafters: {', '.join(scenario.drafters)})",
                    log,
                )
            raise _not_loadable(model, log)
        why = architecture_problem(method, drafter.name, drafter.dir)
        if why is not None:
            archs = drafter.config.get("architectures")
            raise _error(f"Model architectures {archs} are not supported for now.", log)
    args.speculative_algorithm = _ALGORITHMS[method]
    args.method = "MTP" if method == "mtp" else _ALGORITHMS[method]
    args.drafter = drafter
    args.speculative_draft_model_path = model if method != "ngram" else None
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = k, 1, k + 1
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        ranges = _schedule(schedule, log)
        args.speculative_adaptive = True
        args.adaptive_config = {str(lo): {"candidate_steps": [min(kk, k)]} for lo, _hi, kk in ranges}
    name = "ngram" if method == "ngram" else (drafter.name if drafter is not None else None)
    args.faults = tuple(f for f in args.faults if f.applies_to(name))
    args.speculative_config = {**spec, "method": method, "model": model}
    return args


def _schedule(value: object, log: list[str]) -> list[tuple[int, int, int]]:
    """vLLM 0.33.0's ``validate_and_normalize_dynamic_sd_schedule`` (``v1/spec_decode/dynamic/utils.py``)."""
    if not isinstance(value, list) or not value:
        raise _error(
            "num_speculative_tokens_per_batch_size must be a non-empty list of "
            "(range_start, range_end, num_speculative_tokens) entries.",
            log,
        )
    out: list[tuple[int, int, int]] = []
    for entry in value:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise _error(
                "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                "(range_start, range_end, num_speculative_tokens).",
                log,
            )
        try:
            lo, hi, k = (int(x) for x in entry)
        except (TypeError, ValueError):
            raise _error(f"num_speculative_tokens_per_batch_size entry {entry!r} is not three integers", log) from None
        if lo <= 0 or hi <= 0:
            raise _error(f"Batch-size range ({lo}, {hi}) must be positive.", log)
        if lo > hi:
            raise _error(f"Batch-size range start must be <= end for ({lo}, {hi}, {k}).", log)
        if k < 0:
            raise _error("num_speculative_tokens_per_batch_size values must be >= 0.", log)
        out.append((lo, hi, k))
    out.sort(key=lambda e: e[0])
    end = 0
    for lo, hi, _k in out:
        if lo <= end:
            raise _error("Batch-size ranges must be non-overlapping and sorted.", log)
        end = hi
    if out[0][0] != 1:
        raise _error(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule.", log
        )
    return out


def parse_launch_args(argv: list[str], *, load: ScenarioLoader = load_scenario) -> ResolvedArgs:
    """Parse the sim's own flags and the launch flags of the server it plays (``--engine``: SGLang unless told) and
    apply that server's rules. Raises SimLaunchError. ``load`` resolves ``--scenario`` (default: the shipped
    scenarios). Here, not in ``autotune.sim.args``, because vLLM's rules build on that module's parsing."""
    if engine_of(argv) == "vllm":
        return parse_vllm_args(argv, load=load)
    return parse_sglang_args(argv, load=load)

"""A simulated server's launch: the flags of the server it plays read as that server reads them, and that server's
speculative rules applied as it applies them (SGLang 0.5.23, or vLLM 0.33.0 with ``--engine vllm``).

``parse_launch_args(argv)`` takes everything after ``-m autotune.sim``: the sim's own flags (``_SIM_VALUE_FLAGS``,
``--sim-no-noise``) and the played server's. Unknown flags are ignored with a log line. A command the server would
refuse raises ``SimLaunchError`` whose ``log`` is what the server would have printed before exiting non-zero.

SGLang: its speculative resolution rules (``srt/arg_groups/speculative_hook.py``) and adaptive config loader
(``srt/speculative/adaptive_spec_params.py``), mirrored.

vLLM: ``vllm serve MODEL`` and the flags in ``VLLM_VALUE_FLAGS``. Every ``--speculative-config`` method runs as a
chain of K drafted tokens (vLLM drafts no trees) in the same performance model as SGLang's launches (``_ALGORITHMS``;
mtp: the target's own MTP layers). An EAGLE-3 head launched as ``eagle`` loads when vLLM's registry knows its
architecture (``autotune.backends.vllm_methods``) and then accepts nothing: vLLM does not capture the auxiliary hidden
states the head was trained on, and says nothing. ``num_speculative_tokens_per_batch_size`` (vLLM's dynamic
speculative decoding) runs as an adaptive controller whose every batch-size slot has one step count, capped by
``num_speculative_tokens``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.backends.sglang_methods import DEFAULT_ADAPTIVE_CONFIG, MTP_ARCHITECTURES
from autotune.backends.vllm_methods import architecture_problem
from autotune.sim.batch import DEFAULT_GRAPH_MAX_BS, SPECULATIVE_MAX_RUNNING
from autotune.sim.scenario import Scenario, ScenarioError, ScenarioLoader, SimDrafter, load_scenario, scenario_names

SGLANG_VERSION = "0.5.23"

#: algorithm names SGLang accepts (upper-cased); NEXTN is an alias of EAGLE
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
SIMULATED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


#: the servers the simulator plays (``--engine``): it reads that server's launch flags and applies its rules
ENGINES = ("sglang", "vllm")

# the simulator's own flags, whichever server it plays
_SIM_VALUE_FLAGS = {
    "--engine": "engine",
    "--scenario": "scenario",
    "--time-scale": "time_scale",
    "--seed": "seed",
    "--fault": "fault",
    "--launch-index": "launch_index",
    "--sim-load-time": "sim_load_time",
    "--near-ties": "near_ties",
}
_SIM_BOOL_FLAGS = {"--sim-no-noise": "sim_no_noise"}

#: vLLM 0.33.0's ``max_num_seqs`` for the OpenAI server on a GPU of 70 GiB or more (``EngineArgs``'s defaults)
VLLM_DEFAULT_MAX_NUM_SEQS = 1024
#: vLLM 0.33.0's default CUDA-graph capture ceiling (``VllmConfig``, before Blackwell)
VLLM_DEFAULT_GRAPH_MAX_BS = 512
#: ``vllm serve``'s value flags the simulator reads (``parse_vllm_args``)
VLLM_VALUE_FLAGS = {
    "--model": "model_path",
    "--speculative-config": "speculative_config",
    "--max-num-seqs": "max_running_requests",
    "--tensor-parallel-size": "tp_size",
    "-tp": "tp_size",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "port",
    **_SIM_VALUE_FLAGS,
}

# SGLang's flags taking a value / boolean switches that the simulator understands
_VALUE_FLAGS = {
    "--model-path": "model_path",
    "--model": "model_path",
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-draft-model-path": "speculative_draft_model_path",
    "--speculative-draft-model": "speculative_draft_model_path",
    "--speculative-num-steps": "speculative_num_steps",
    "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
    "--cuda-graph-backend-decode": "cuda_graph_backend_decode",
    "--tp-size": "tp_size",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--host": "host",
    "--port": "port",
    "--served-model-name": "served_model_name",
    "--max-running-requests": "max_running_requests",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",  # SGLang up to 0.5.19 (0.5.14-0.5.19: an alias of the next)
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",  # SGLang 0.5.14 and newer
    "--speculative-adaptive-config": "speculative_adaptive_config",
    "--speculative-ngram-min-bfs-breadth": "speculative_ngram_min_bfs_breadth",
    "--speculative-ngram-max-bfs-breadth": "speculative_ngram_max_bfs_breadth",
    "--speculative-ngram-match-type": "speculative_ngram_match_type",
    "--speculative-ngram-max-trie-depth": "speculative_ngram_max_trie_depth",
    "--speculative-ngram-capacity": "speculative_ngram_capacity",
    **_SIM_VALUE_FLAGS,
}
_BOOL_FLAGS = {
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-decode-cuda-graph": "disable_decode_cuda_graph",
    "--disable-prefill-cuda-graph": "disable_prefill_cuda_graph",
    "--enable-metrics": "enable_metrics",
    "--speculative-adaptive": "speculative_adaptive",
    **_SIM_BOOL_FLAGS,
}
#: integer values of either engine's flags (and the sim's own), converted in this order
_INT_FIELDS = (
    "speculative_num_steps speculative_eagle_topk speculative_num_draft_tokens tp_size port seed launch_index "
    "max_running_requests cuda_graph_max_bs speculative_ngram_min_bfs_breadth speculative_ngram_max_bfs_breadth "
    "speculative_ngram_max_trie_depth speculative_ngram_capacity"
).split()


def usage() -> str:
    """``python -m autotune.sim --help``: the flags the simulated server understands (others are ignored)."""
    lines = [
        "usage: python -m autotune.sim --scenario NAME --model-path PATH [--time-scale X] [--seed N] "
        "[--fault KIND[:N][@DRAFTER]] ... [SGLang launch flags]",
        "       python -m autotune.sim --engine vllm --scenario NAME [...] MODEL [vllm serve flags]",
        "",
        "A simulated SGLang or vLLM server (autotune's test and demo stand-in for a GPU server).",
        f"scenarios: {', '.join(scenario_names())}",
        f"faults: {', '.join(FAULT_KINDS)} (N for {', '.join(_FAULTS_WITH_N)}; @DRAFTER scopes one to a drafter, "
        "@none to the baseline)",
        "",
        "flags with a value:",
        *(f"  {flag}" for flag in _VALUE_FLAGS),
        "switches:",
        *(f"  {flag}" for flag in _BOOL_FLAGS),
        "vllm serve flags with a value (--enforce-eager the only switch):",
        *(f"  {flag}" for flag in VLLM_VALUE_FLAGS if flag not in _SIM_VALUE_FLAGS),
        "",
        "Other flags are accepted and ignored with a log line.",
    ]
    return "\n".join(lines)


@dataclass
class ResolvedArgs:
    """The launch as the simulated server resolved it (after SGLang's silent rewrites)."""

    scenario: Scenario
    model_path: str
    engine: str = "sglang"  # the server the simulator plays (``ENGINES``)
    time_scale: float = 1.0
    seed: int = 0
    launch_index: int | None = None  # None: the server draws one at random
    sim_load_time: float | None = None  # hardware seconds overriding the scenario's startup time
    faults: tuple[Fault, ...] = ()
    noise: bool = True  # False (--sim-no-noise): no per-start / per-request time factors
    near_ties: float = 0.0  # probability that a prompt has a near tie (--near-ties, else the scenario's)
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    drafter: SimDrafter | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    #: what runs: EAGLE, EAGLE3, MTP (the target's own layers: NEXTN, or EAGLE with the draft path defaulted to
    #: an MTP target), STANDALONE, NGRAM; None without speculation
    method: str | None = None
    speculative_adaptive: bool = False
    speculative_adaptive_config: str | None = None
    adaptive_config: dict[str, Any] | None = None  # the loaded adaptive config (SGLang's default when no file)
    mtp_missing: bool = False  # the draft path defaulted to a target with no MTP layers: the start fails
    # SGLang's n-gram defaults (``arg_groups/fields/spec.py``)
    speculative_ngram_min_bfs_breadth: int = 1
    speculative_ngram_max_bfs_breadth: int = 10
    speculative_ngram_match_type: str = "BFS"
    speculative_ngram_max_trie_depth: int = 18
    speculative_ngram_capacity: int = 10 * 1000 * 1000
    disable_cuda_graph: bool = False
    disable_decode_cuda_graph: bool = False
    disable_prefill_cuda_graph: bool = False
    cuda_graph_backend_decode: str = "full"
    tp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    enable_metrics: bool = False
    served_model_name: str | None = None
    max_running_requests: int | None = None  # None: SGLang's default (48 for a speculative server)
    cuda_graph_max_bs: int | None = None  # None: the simulator's default (autotune.sim.batch.DEFAULT_GRAPH_MAX_BS)
    #: vLLM: the ``--speculative-config`` as vLLM resolved it (``parse_vllm_args``); None otherwise
    speculative_config: dict[str, object] | None = None
    log: list[str] = field(default_factory=list)  # lines printed while parsing (warnings, ignored flags)

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None

    @property
    def cuda_graph(self) -> bool:
        return not (
            self.disable_cuda_graph or self.disable_decode_cuda_graph or self.cuda_graph_backend_decode == "disabled"
        )

    def fault(self, kind: str) -> Fault | None:
        return next((f for f in self.faults if f.kind == kind), None)

    def keep_faults_of(self, drafter: str | None) -> None:
        """Keep only the faults injected into this launch's drafter (``None``: a launch without speculation)."""
        self.faults = tuple(f for f in self.faults if f.applies_to(drafter))

    def startup_s(self) -> float:
        if self.sim_load_time is not None:
            return self.sim_load_time
        t = self.scenario.startup_s(speculative=self.speculative, cuda_graph=self.cuda_graph)
        if self.speculative_adaptive and self.cuda_graph and self.adaptive_config is not None:
            # SGLang's AdaptiveController.init_states captures draft/verify graphs for every candidate step
            extra = sum(1 for s in load_adaptive_config_steps(self.adaptive_config) if s > 0) - 1
            t += self.scenario.cuda_graph_speculative_s * max(extra, 0)
        return t

    def server_args(self) -> dict[str, object]:
        """The launch's settings as the server reports them: SGLang's ``server_args`` (/server_info); vLLM's engine
        arguments that matter here (it logs them at start)."""
        if self.engine == "vllm":
            return {
                "model": self.model_path,
                "served_model_name": self.served_model_name or self.model_path,
                "tensor_parallel_size": self.tp_size,
                "host": self.host,
                "port": self.port,
                "speculative_config": self.speculative_config,
                "enforce_eager": not self.cuda_graph,
                "max_num_seqs": self.effective_max_running,
            }
        passed = (
            "tp_size host port speculative_algorithm speculative_draft_model_path speculative_num_steps "
            "speculative_eagle_topk speculative_num_draft_tokens speculative_adaptive speculative_adaptive_config "
            "speculative_ngram_min_bfs_breadth speculative_ngram_max_bfs_breadth speculative_ngram_match_type "
            "speculative_ngram_max_trie_depth speculative_ngram_capacity"
        ).split()
        return {
            "model_path": self.model_path,
            "served_model_name": self.served_model_name or self.model_path,
            **{k: getattr(self, k) for k in passed},
            "disable_cuda_graph": not self.cuda_graph,
            "disable_decode_cuda_graph": not self.cuda_graph,
            "disable_prefill_cuda_graph": self.disable_cuda_graph or self.disable_prefill_cuda_graph,
            "cuda_graph_backend_decode": "disabled" if not self.cuda_graph else self.cuda_graph_backend_decode,
            "enable_metrics": self.enable_metrics,
            "decode_log_interval": 40,
            "max_running_requests": self.effective_max_running,
            "cuda_graph_max_bs": self.effective_graph_max_bs if self.cuda_graph else None,
        }

    @property
    def effective_max_running(self) -> int | None:
        """The concurrent requests the server runs: the flag, else 48 for a speculative server (SGLang's default)."""
        if self.max_running_requests is not None:
            return self.max_running_requests
        if self.engine == "vllm":
            return VLLM_DEFAULT_MAX_NUM_SEQS
        return SPECULATIVE_MAX_RUNNING if self.speculative else None

    @property
    def effective_graph_max_bs(self) -> int:
        if self.cuda_graph_max_bs is not None:
            return self.cuda_graph_max_bs
        if self.engine == "vllm":
            return VLLM_DEFAULT_GRAPH_MAX_BS
        return DEFAULT_GRAPH_MAX_BS


@dataclass(frozen=True)
class _Reader:
    """How a played server reads its argv: its flag tables, ``positional`` the value of the first bare argument
    (vLLM's ``vllm serve MODEL``; else bare arguments are ignored), ``prog`` and ``model_flag`` as its usage errors
    name itself and its model."""

    engine: str
    prog: str
    model_flag: str
    value_flags: dict[str, str]
    bool_flags: dict[str, str]
    positional: str | None = None


def _split(argv: list[str], reader: _Reader, log: list[str]) -> tuple[dict[str, Any], list[str]]:
    """argv -> (known values, fault texts); ``log`` gets a line per ignored flag."""
    value_flags, bool_flags, positional = reader.value_flags, reader.bool_flags, reader.positional
    vals: dict[str, Any] = {}
    faults: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if positional is not None and positional not in vals:
                vals[positional] = tok
            else:
                log.append(f"WARNING autotune.sim: ignoring stray argument {tok!r}")
            continue
        name, eq, inline = tok.partition("=")
        if name in bool_flags:
            vals[bool_flags[name]] = True
            continue
        if name in value_flags:
            if eq:
                value = inline
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                message = f"error: argument {name}: expected one argument"
                raise SimLaunchError(message, log=f"{reader.prog}: {message}", returncode=2)
            key = value_flags[name]
            if key == "fault":
                faults.append(value)
            else:
                vals[key] = value
            continue
        # unknown flag: ignore it, and its value when one follows
        if not eq and i < len(argv) and not argv[i].startswith("--"):
            log.append(f"WARNING autotune.sim: ignoring flag {name} {argv[i]} (not simulated)")
            i += 1
        else:
            log.append(f"WARNING autotune.sim: ignoring flag {tok} (not simulated)")
    return vals, faults


def engine_of(argv: list[str]) -> str:
    """The server a simulator launch plays (its ``--engine``, default sglang). Raises SimLaunchError for another."""
    engine = "sglang"
    for i, tok in enumerate(argv):
        if tok == "--engine" and i + 1 < len(argv):
            engine = argv[i + 1]
        elif tok.startswith("--engine="):
            engine = tok.partition("=")[2]
    if engine not in ENGINES:
        message = f"autotune.sim: --engine must be one of {', '.join(ENGINES)} but got {engine!r}"
        raise SimLaunchError(message, returncode=2)
    return engine


_SGLANG = _Reader("sglang", "launch_server.py", "--model-path", _VALUE_FLAGS, _BOOL_FLAGS)


def sim_args(
    argv: list[str], load: ScenarioLoader, reader: _Reader, log: list[str]
) -> tuple[ResolvedArgs, dict[str, Any]]:
    """One engine's argv read by its flag tables, and the launch's settings that do not depend on the server's
    speculative rules: the sim's own flags, the target, the address and the served name. Returns them with the flags'
    values (integers converted) for the engine's own rules."""
    vals, fault_texts = _split(argv, reader, log)
    prog = reader.prog
    name = vals.get("scenario")
    if not name:
        raise _fail(f"autotune.sim: --scenario is required (one of {', '.join(scenario_names())})", 2)
    try:
        scenario = load(name)
    except ScenarioError as e:
        raise _fail(f"autotune.sim: {e}", 2) from None
    for key in _INT_FIELDS:
        if key in vals:
            try:
                vals[key] = int(vals[key])
            except ValueError:
                raise _fail(
                    f"{prog}: error: argument --{key.replace('_', '-')}: invalid int value: {vals[key]!r}", 2
                ) from None
    try:
        time_scale = float(vals.get("time_scale", 1.0))
        load_time = vals.get("sim_load_time")
        sim_load_time = float(load_time) if load_time is not None else None
    except ValueError as e:
        raise _fail(f"autotune.sim: {e}", 2) from None
    if not time_scale > 0:
        raise _fail(f"autotune.sim: --time-scale must be positive but got {time_scale}", 2)
    near_ties = scenario.near_ties
    if "near_ties" in vals:
        try:
            near_ties = float(vals["near_ties"])
        except ValueError:
            near_ties = math.nan
        if not 0.0 <= near_ties <= 1.0:
            raise _fail(
                f"autotune.sim: --near-ties must be a probability between 0 and 1 but got {vals['near_ties']!r}", 2
            )
    if near_ties > 0:
        log.append(
            f"INFO autotune.sim: near ties on (probability {near_ties:g} per prompt): a speculative server takes "
            "the runner-up there"
        )
    try:
        faults = tuple(Fault.parse(t) for t in (*scenario.faults, *fault_texts))
    except ValueError as e:
        raise _fail(f"autotune.sim: {e}", 2) from None

    model_path = vals.get("model_path")
    if not model_path:
        raise _fail(f"{prog}: error: the following arguments are required: {reader.model_flag}", 2)
    if model_path not in (scenario.target_name, scenario.target_dir) and not _is_checkpoint(model_path):
        raise _not_loadable(model_path)
    args = ResolvedArgs(
        scenario=scenario,
        model_path=model_path,
        engine=reader.engine,
        time_scale=time_scale,
        seed=int(vals.get("seed", 0)),
        launch_index=vals.get("launch_index"),
        sim_load_time=sim_load_time,
        faults=faults,
        noise=not vals.get("sim_no_noise", False),
        near_ties=near_ties,
        tp_size=int(vals.get("tp_size", 1)),
        host=str(vals.get("host", "127.0.0.1")),
        port=int(vals.get("port", 30000)),
        served_model_name=vals.get("served_model_name"),
        max_running_requests=vals.get("max_running_requests"),
        log=log,
    )
    return args, vals


def parse_sglang_args(argv: list[str], load: ScenarioLoader, log: list[str]) -> ResolvedArgs:
    """Parse the sim's own flags and SGLang's launch flags and apply SGLang's rules (``parse_launch_args`` picks the
    engine). Raises SimLaunchError. ``load`` resolves ``--scenario``."""
    args, vals = sim_args(argv, load, _SGLANG, log)
    args.disable_cuda_graph = bool(vals.get("disable_cuda_graph", False))
    args.disable_decode_cuda_graph = bool(vals.get("disable_decode_cuda_graph", False))
    args.disable_prefill_cuda_graph = bool(vals.get("disable_prefill_cuda_graph", False))
    args.cuda_graph_backend_decode = str(vals.get("cuda_graph_backend_decode", "full"))
    args.enable_metrics = bool(vals.get("enable_metrics", False))
    args.cuda_graph_max_bs = vals.get("cuda_graph_max_bs")
    _choice("--cuda-graph-backend-decode", args.cuda_graph_backend_decode, ("full", "breakable", "disabled"))
    if vals.get("disable_cuda_graph"):
        log.append(  # SGLang 0.5.23's DeprecatedStoreTrueAction
            "WARNING argparse_actions.py: '--disable-cuda-graph' is deprecated and will be removed in a future "
            "release. Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."
        )

    if "speculative_ngram_match_type" in vals:
        _choice("--speculative-ngram-match-type", str(vals["speculative_ngram_match_type"]), ("BFS", "PROB"))
    for key in vals:
        if key.startswith("speculative_ngram_"):
            setattr(args, key, vals[key])
    args.speculative_adaptive = bool(vals.get("speculative_adaptive", False))
    args.speculative_adaptive_config = vals.get("speculative_adaptive_config")

    algo = vals.get("speculative_algorithm")
    if algo is None:
        args.speculative_adaptive = False  # nothing to adapt: the worker that reads it never starts
        args.keep_faults_of(None)
        return args
    requested = str(algo).upper()
    if requested not in KNOWN_ALGORITHMS:
        raise _traceback(f"ValueError: Unknown speculative algorithm name: {requested}", "fields/spec.py")
    if requested not in SIMULATED_ALGORITHMS:
        raise _fail(
            f"autotune.sim: speculative algorithm {requested} is not simulated (only {', '.join(SIMULATED_ALGORITHMS)})"
        )
    algo = "EAGLE" if requested == "NEXTN" else requested  # _resolve_speculative_algorithm_alias
    args.speculative_algorithm = algo

    steps = vals.get("speculative_num_steps")
    topk = vals.get("speculative_eagle_topk")
    ndt = vals.get("speculative_num_draft_tokens")

    # handle_speculative_decoding: the adaptive checks run before the algorithm's own handler
    if args.speculative_adaptive:
        reason = _adaptive_unsupported_reason(algo, topk)
        if reason is not None:
            log.append(
                f"WARNING speculative_hook.py: speculative_adaptive disabled: {reason}. "
                "Falling back to static speculative params."
            )
            args.speculative_adaptive = False
        else:
            config, candidates = _load_adaptive_config(args.speculative_adaptive_config)
            args.adaptive_config = config
            if topk is None:
                topk = 1
            if steps is None:
                steps = candidates[len(candidates) // 2]
            if steps not in candidates:
                raise _traceback(
                    f"ValueError: --speculative-num-steps={steps} is not in the adaptive config candidate_steps "
                    f"{candidates}. Pass one of those values."
                )
            ndt = steps + 1
            log.append(
                f"INFO adaptive_spec_params.py: AdaptiveSpeculativeParams initialized: steps={steps}, "
                f"candidate_steps={candidates}"
            )

    draft = vals.get("speculative_draft_model_path")
    if algo == "NGRAM":
        return _resolve_ngram(args, draft, steps, ndt)
    return _resolve_eagle_family(args, draft, steps, topk, ndt)


# -- SGLang 0.5.23's speculative resolution rules, called by ``parse_sglang_args`` after reading the flags


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        options = ", ".join(f"'{c}'" for c in choices)
        message = f"launch_server.py: error: argument {flag}: invalid choice: '{value}' (choose from {options})"
        raise _fail(message, 2)


def load_adaptive_config_steps(config: dict[str, Any]) -> list[int]:
    """The union of a loaded adaptive config's candidate steps."""
    out: set[int] = set()
    for key, entry in config.items():
        if key.isdigit():
            out.update(entry["candidate_steps"])
    return sorted(out)


def _adaptive_unsupported_reason(algo: str, topk: int | None) -> str | None:
    """SGLang's ``adaptive_unsupported_reason`` for what the simulator models (no attention DP, multi-layer EAGLE,
    two-batch overlap or PD multiplexing in a simulated launch)."""
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    return None


def load_adaptive_config(path: str | None) -> tuple[dict[str, Any], list[int]]:
    """SGLang's ``_load_adaptive_config`` + ``resolve_candidate_steps_from_config``: (the config, the union of its
    batch-size slots' candidate steps). Raises what SGLang raises (OSError, ValueError, AttributeError) with its
    messages."""
    if path is not None:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    else:
        cfg = DEFAULT_ADAPTIVE_CONFIG
    if not isinstance(cfg, dict):
        raise AttributeError(f"'{type(cfg).__name__}' object has no attribute 'items'")
    bs_entries: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(entry, dict):
            raise AttributeError(f"'{type(entry).__name__}' object has no attribute 'get'")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        bs_entries[int(key)] = entry
    if not bs_entries:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string "
            f'BS key, e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(cfg.keys())}'
        )
    return cfg, load_adaptive_config_steps(cfg)


def _load_adaptive_config(path: str | None) -> tuple[dict[str, Any], list[int]]:
    try:
        return load_adaptive_config(path)
    except (OSError, ValueError, AttributeError) as e:
        name = "json.decoder.JSONDecodeError" if isinstance(e, json.JSONDecodeError) else type(e).__name__
        raise _traceback(f"{name}: {e}", "../speculative/adaptive_spec_params.py") from None


_MAX_RUNNING_RESET = (
    "WARNING speculative_hook.py: Max running requests is reset to 48 for speculative decoding. You can override "
    "this by explicitly setting --max-running-requests."
)


def _resolve_ngram(args: ResolvedArgs, draft: str | None, steps: int | None, ndt: int | None) -> ResolvedArgs:
    """SGLang's ``_handle_ngram``: topk := max BFS breadth, 12 draft tokens by default, steps := ndt // topk."""
    log = args.log
    if args.max_running_requests is None:
        log.append(_MAX_RUNNING_RESET)
    topk = args.speculative_ngram_max_bfs_breadth
    if ndt is None:
        ndt = 12
        log.append(
            "WARNING speculative_hook.py: speculative_num_draft_tokens is set to 12 by default for ngram speculative "
            "decoding. You can override this by explicitly setting --speculative-num-draft-tokens."
        )
    if steps is None:
        if topk == 0:
            raise _traceback("ZeroDivisionError: integer division or modulo by zero", "speculative_hook.py")
        steps = ndt // topk
    log.append(
        "WARNING speculative_hook.py: The mixed chunked prefill are disabled because of using ngram speculative "
        "decoding."
    )
    if ndt < 2 or topk < 1 or args.speculative_ngram_max_trie_depth < 1:
        raise _traceback(
            f"AssertionError: ngram needs speculative_num_draft_tokens >= 2, a BFS breadth >= 1 and a trie depth "
            f">= 1 (got {ndt}, {topk}, {args.speculative_ngram_max_trie_depth})",
            "../speculative/ngram_worker.py",
        )
    args.method = "NGRAM"
    args.speculative_draft_model_path = draft
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, ndt
    args.keep_faults_of("ngram")
    return args


def _resolve_eagle_family(
    args: ResolvedArgs, draft: str | None, steps: int | None, topk: int | None, ndt: int | None
) -> ResolvedArgs:
    """SGLang's ``_handle_eagle_family`` (EAGLE, EAGLE3 (NEXTN is EAGLE by now), STANDALONE)."""
    scenario, algo, log = args.scenario, args.speculative_algorithm, args.log
    assert algo is not None
    if scenario.target_architecture in MTP_ARCHITECTURES:
        if not draft:
            draft = args.model_path  # the target's own MTP layers
        else:
            log.append(
                "WARNING speculative_hook.py: DeepSeek MTP does not require setting speculative_draft_model_path."
            )
    if not draft:
        raise _traceback(
            "AssertionError: --speculative-draft-model-path is required for EAGLE/EAGLE3 "
            "(this target has no NextN/MTP layers)"
        )
    if draft in (args.model_path, scenario.target_name, scenario.target_dir):
        drafter = scenario.mtp
        if drafter is None:
            args.mtp_missing = True  # loads the target as its own NextN draft: fails at weight loading
    else:
        drafter = _drafter(scenario, draft)
    args.speculative_draft_model_path = draft
    args.drafter = drafter
    if algo == "STANDALONE":
        args.method = "STANDALONE"
    elif drafter is not None and drafter.kind == "mtp" or args.mtp_missing:
        args.method = "MTP" if algo == "EAGLE" else algo
    else:
        args.method = algo
    name = drafter.name if drafter is not None else "mtp"
    args.keep_faults_of(name)
    if args.max_running_requests is None:
        log.append(_MAX_RUNNING_RESET)

    if steps is None:
        if topk is not None or ndt is not None:
            raise _traceback(
                "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be unset "
                "when speculative_num_steps is unset"
            )
        if algo == "STANDALONE":
            steps, topk, ndt = 3, 1, 4
        else:
            steps, topk, ndt = (5, 4, 8) if scenario.family == "llama" else (3, 1, 4)
        log.append(
            f"INFO speculative_hook.py: auto-chose speculative_num_steps={steps}, "
            f"speculative_eagle_topk={topk}, speculative_num_draft_tokens={ndt} for this model"
        )
    elif topk is None or ndt is None:
        raise _traceback(
            "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be set "
            "when speculative_num_steps is set"
        )
    for flag, v in (
        ("speculative_num_steps", steps),
        ("speculative_eagle_topk", topk),
        ("speculative_num_draft_tokens", ndt),
    ):
        if v < 1:
            raise _traceback(f"AssertionError: {flag} must be positive, got {v}")
    if topk == 1 and ndt != steps + 1:
        log.append(
            f"WARNING speculative_hook.py: speculative_num_draft_tokens is adjusted to speculative_num_steps+1 "
            f"when speculative_eagle_topk == 1 (was {ndt}, now {steps + 1})"
        )
        ndt = steps + 1
    if ndt < 2:
        raise _traceback(f"AssertionError: speculative_num_draft_tokens must be at least 2, got {ndt}")
    max_nodes = topk + (steps - 1) * topk * topk
    if ndt - 1 > max_nodes:
        raise _traceback(
            f"ValueError: speculative_num_draft_tokens={ndt} is too large for speculative_num_steps={steps} and "
            f"speculative_eagle_topk={topk}: the draft tree has only {max_nodes} candidate nodes "
            f"(num_draft_tokens - 1 <= topk + (steps - 1) * topk^2)",
            "../speculative/eagle_utils.py",
        )
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, ndt
    return args


FAULT_KINDS = ("crash-startup", "never-healthy", "crash-after", "oom-above", "http500", "truncate")
_FAULTS_WITH_N = ("crash-after", "oom-above", "http500", "truncate")


class SimLaunchError(Exception):
    """The simulated server refuses to start. ``log`` is the text it printed; ``returncode`` its exit status."""

    def __init__(self, message: str, *, log: str = "", returncode: int = 1, oom: bool = False) -> None:
        self.log = log or message
        self.returncode = returncode
        self.oom = oom
        super().__init__(message)


@dataclass(frozen=True)
class Fault:
    kind: str
    n: int | None = None
    drafter: str | None = None  # ``KIND[:N]@NAME``: only servers speculating with drafter NAME ("none": the baseline)

    @staticmethod
    def parse(text: str) -> Fault:
        """``crash-startup``, ``never-healthy``, ``crash-after:N``, ``oom-above:N``, ``http500:N``, ``truncate:N``,
        each optionally scoped to one drafter with ``@NAME`` (``@none`` for the non-speculative server)."""
        text, at, scope = text.strip().partition("@")
        if at and not scope:
            raise ValueError(f"fault {text + '@'!r}: name a drafter after '@'")
        kind, _, num = text.strip().partition(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {text!r}; expected one of {', '.join(FAULT_KINDS)} (with :N where needed)")
        if kind not in _FAULTS_WITH_N:
            if num:
                raise ValueError(f"fault {kind} takes no number but got {text!r}")
            return Fault(kind, None, scope or None)
        try:
            n = int(num)
        except ValueError:
            raise ValueError(f"fault {kind} needs a number, like {kind}:3, but got {text!r}") from None
        if n < (0 if kind == "crash-after" else 1):
            raise ValueError(f"fault {text!r}: the number must be positive")
        return Fault(kind, n, scope or None)

    def applies_to(self, drafter: str | None) -> bool:
        return self.drafter is None or self.drafter == (drafter or "none")

    def __str__(self) -> str:
        base = self.kind if self.n is None else f"{self.kind}:{self.n}"
        return base if self.drafter is None else f"{base}@{self.drafter}"


class _Refusal(Exception):
    """The server refuses its arguments: ``lines`` end its log, after what it printed so far (``parse_launch_args``
    turns this into the SimLaunchError)."""

    def __init__(self, lines: list[str], returncode: int = 1) -> None:
        super().__init__(lines[-1])
        self.lines = lines
        self.returncode = returncode


def _fail(message: str, returncode: int = 1) -> _Refusal:
    return _Refusal([message], returncode)


def _traceback(exc_line: str, where: str = "speculative_hook.py") -> _Refusal:
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/launch_server.py", line 29, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        f'  File "/usr/lib/python3/dist-packages/sglang/srt/arg_groups/{where}", line 112, in _handle_eagle_family',
        exc_line,
    ]
    return _Refusal(lines)


def _drafter(scenario: Scenario, path: str) -> SimDrafter:
    """The scenario's drafter at a draft model path; refused as the server would refuse an unknown path."""
    drafter = scenario.drafter_by_path(path)
    if drafter is not None:
        return drafter
    if _is_checkpoint(path):
        known = ", ".join(scenario.drafters)
        raise _fail(
            f"autotune.sim: {path} is a checkpoint the scenario {scenario.name} does not know (its drafters: {known})"
        )
    raise _not_loadable(path)


def _is_checkpoint(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def _not_loadable(path: str) -> _Refusal:
    return _fail(
        f"OSError: Can't load the configuration of '{path}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, "
        f"make sure '{path}' is the correct path to a directory containing a config.json file"
    )


VLLM_VERSION = "0.33.0"
#: the methods the simulator plays (vLLM has more: suffix, ngram_gpu, dflash, dspark, custom_class, ...)
SIMULATED_METHODS = ("eagle", "eagle3", "draft_model", "mtp", "ngram")
#: vLLM's method -> the algorithm of the performance model
_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "mtp": "EAGLE", "ngram": "NGRAM"}
#: keys of ``--speculative-config`` the simulator reads; others are ignored with a log line
_SPEC_KEYS = (
    "method model num_speculative_tokens prompt_lookup_min prompt_lookup_max num_speculative_tokens_per_batch_size "
    "draft_tensor_parallel_size"
).split()

_VLLM_BOOL_FLAGS = {"--enforce-eager": "enforce_eager", **_SIM_BOOL_FLAGS}
_VLLM = _Reader("vllm", "vllm serve", "model_tag", VLLM_VALUE_FLAGS, _VLLM_BOOL_FLAGS, "model_path")


def _vllm_error(message: str) -> _Refusal:
    """vLLM's refusal of its engine arguments: the exception line, exit 1."""
    return _fail(f"ValueError: {message}")


def parse_vllm_args(argv: list[str], load: ScenarioLoader, log: list[str]) -> ResolvedArgs:
    """Parse the sim's flags and ``vllm serve``'s and apply vLLM 0.33.0's speculative rules. Raises
    SimLaunchError."""
    args, vals = sim_args(argv, load, _VLLM, log)
    if "port" not in vals:
        args.port = 8000
    args.disable_cuda_graph = bool(vals.get("enforce_eager", False))
    args.enable_metrics = True  # vLLM's OpenAI server always serves /metrics
    text = vals.get("speculative_config")
    if text is None:
        args.keep_faults_of(None)
        return args
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(
            f"{_VLLM.prog}: error: argument --speculative-config: Value {text} cannot be converted to "
            f"<function loads>: {e}",
            2,
        ) from None
    if not isinstance(spec, dict):
        raise _vllm_error(f"--speculative-config must be a JSON object but got {text}")
    return _resolve_vllm(args, spec)


def _spec_int(spec: Mapping[str, object], key: str) -> int | None:
    v = spec.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _vllm_error(f"{key}: Input should be a valid integer, got {v!r}")
    return v


def _resolve_vllm(args: ResolvedArgs, spec: dict[str, object]) -> ResolvedArgs:
    """``SpeculativeConfig.__post_init__`` for the methods the simulator plays."""
    log = args.log
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
            f"autotune.sim: speculative method {method!r} is not simulated (only {', '.join(SIMULATED_METHODS)})"
        )
    k = _spec_int(spec, "num_speculative_tokens")
    if k is None:
        raise _vllm_error("num_speculative_tokens must be provided with speculative model.")
    if k < 1:
        raise _vllm_error(f"Expected num_speculative_tokens to be greater than zero ({k}).")
    drafter: SimDrafter | None = None
    draft_path: str | None = None  # the n-gram method has none
    scenario = args.scenario
    if method == "mtp":
        drafter = scenario.mtp
        if drafter is None:
            raise _vllm_error("Unsupported speculative method: 'mtp' (the target's config.json names no MTP layers)")
        model = draft_path = args.model_path
    elif method == "ngram":
        lo, hi = _spec_int(spec, "prompt_lookup_min"), _spec_int(spec, "prompt_lookup_max")
        lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi, hi if hi is not None else lo)
        assert lo is not None and hi is not None
        if lo < 1 or hi < 1:
            raise _vllm_error(f"prompt_lookup_min={lo} and prompt_lookup_max={hi} must be at least 1")
        if lo > hi:
            raise _vllm_error(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
        spec = {**spec, "prompt_lookup_min": lo, "prompt_lookup_max": hi}
        args.speculative_ngram_max_bfs_breadth = 1  # a chain: vLLM proposes the K tokens after the match
        args.speculative_ngram_min_bfs_breadth = 1
    else:
        if not isinstance(model, str) or not model:
            raise _vllm_error("num_speculative_tokens was provided but without speculative model.")
        draft_path = model
        drafter = _drafter(scenario, model)
        why = architecture_problem(method, drafter.name, drafter.dir)
        if why is not None:
            archs = drafter.config.get("architectures")
            raise _vllm_error(f"Model architectures {archs} are not supported for now.")
    args.speculative_algorithm = _ALGORITHMS[method]
    args.method = "MTP" if method == "mtp" else _ALGORITHMS[method]
    args.drafter = drafter
    args.speculative_draft_model_path = draft_path
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = k, 1, k + 1
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        ranges = _vllm_schedule(schedule)
        args.speculative_adaptive = True
        args.adaptive_config = {str(lo): {"candidate_steps": [min(kk, k)]} for lo, _hi, kk in ranges}
    name = "ngram" if method == "ngram" else (drafter.name if drafter is not None else None)
    args.keep_faults_of(name)
    args.speculative_config = {**spec, "method": method, "model": model}
    return args


def _vllm_schedule(value: object) -> list[tuple[int, int, int]]:
    """vLLM 0.33.0's ``validate_and_normalize_dynamic_sd_schedule`` (``v1/spec_decode/dynamic/utils.py``)."""
    if not isinstance(value, list) or not value:
        raise _vllm_error(
            "num_speculative_tokens_per_batch_size must be a non-empty list of "
            "(range_start, range_end, num_speculative_tokens) entries."
        )
    out: list[tuple[int, int, int]] = []
    for entry in value:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise _vllm_error(
                "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                "(range_start, range_end, num_speculative_tokens)."
            )
        try:
            lo, hi, k = (int(x) for x in entry)
        except (TypeError, ValueError):
            raise _vllm_error(f"num_speculative_tokens_per_batch_size entry {entry!r} is not three integers") from None
        if lo <= 0 or hi <= 0:
            raise _vllm_error(f"Batch-size range ({lo}, {hi}) must be positive.")
        if lo > hi:
            raise _vllm_error(f"Batch-size range start must be <= end for ({lo}, {hi}, {k}).")
        if k < 0:
            raise _vllm_error("num_speculative_tokens_per_batch_size values must be >= 0.")
        out.append((lo, hi, k))
    out.sort(key=lambda e: e[0])
    end = 0
    for lo, hi, _k in out:
        if lo <= end:
            raise _vllm_error("Batch-size ranges must be non-overlapping and sorted.")
        end = hi
    if out[0][0] != 1:
        raise _vllm_error(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."
        )
    return out


def parse_launch_args(argv: list[str], *, load: ScenarioLoader = load_scenario) -> ResolvedArgs:
    """Parse the sim's own flags and the launch flags of the server it plays (``--engine``: SGLang unless told) and
    apply that server's rules. Raises SimLaunchError. ``load`` resolves ``--scenario`` (default: the shipped
    scenarios)."""
    parse = parse_vllm_args if engine_of(argv) == "vllm" else parse_sglang_args
    log: list[str] = []  # what the server prints while it reads its arguments
    try:
        return parse(argv, load, log)
    except _Refusal as e:
        raise SimLaunchError(e.lines[-1], log="\n".join([*log, *e.lines]), returncode=e.returncode) from None

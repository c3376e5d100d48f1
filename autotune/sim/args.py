"""SGLang launch flags as the simulator reads them, with SGLang's rules applied as SGLang applies them.

``parse_launch_args(argv)`` takes everything after ``-m autotune.sim``: the sim's own flags (``--scenario``,
``--time-scale``, ``--seed``, ``--fault``, ``--launch-index``, ``--sim-load-time``, ``--sim-no-noise``,
``--near-ties``) and SGLang's flags. Unknown flags
are ignored with a log line. A command SGLang would refuse raises ``SimLaunchError`` whose ``log`` is what SGLang would
have printed before exiting non-zero. Used by both the HTTP server and the in-process ``ModelRunner``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from autotune.sim.scenario import Scenario, ScenarioError, ScenarioLoader, SimDrafter, load_scenario, scenario_names

SGLANG_VERSION = "0.5.23"

#: algorithm names SGLang accepts (upper-cased); NEXTN is an alias of EAGLE
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
SIMULATED_ALGORITHMS = ("EAGLE", "EAGLE3")

FAULT_KINDS = ("crash-startup", "never-healthy", "crash-after", "oom-above", "http500", "truncate")
_FAULTS_WITH_N = ("crash-after", "oom-above", "http500", "truncate")

# flags taking a value / boolean switches that the simulator understands
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
    "--scenario": "scenario",
    "--time-scale": "time_scale",
    "--seed": "seed",
    "--fault": "fault",
    "--launch-index": "launch_index",
    "--sim-load-time": "sim_load_time",
    "--near-ties": "near_ties",
}
_BOOL_FLAGS = {
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-decode-cuda-graph": "disable_decode_cuda_graph",
    "--disable-prefill-cuda-graph": "disable_prefill_cuda_graph",
    "--enable-metrics": "enable_metrics",
    "--sim-no-noise": "sim_no_noise",
}
_INT_FIELDS = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "tp_size",
    "port",
    "seed",
    "launch_index",
    "max_running_requests",
    "cuda_graph_max_bs",
)


def usage() -> str:
    """``python -m autotune.sim --help``: the flags the simulated server understands (others are ignored)."""
    from autotune.sim.scenario import scenario_names

    lines = [
        "usage: python -m autotune.sim --scenario NAME --model-path PATH [--time-scale X] [--seed N] "
        "[--fault KIND[:N][@DRAFTER]] ... [SGLang launch flags]",
        "",
        "A simulated SGLang server (autotune's test and demo stand-in for a GPU server).",
        f"scenarios: {', '.join(scenario_names())}",
        f"faults: {', '.join(FAULT_KINDS)} (N for {', '.join(_FAULTS_WITH_N)}; @DRAFTER scopes one to a drafter, "
        "@none to the baseline)",
        "",
        "flags with a value:",
        *(f"  {flag}" for flag in _VALUE_FLAGS),
        "switches:",
        *(f"  {flag}" for flag in _BOOL_FLAGS),
        "",
        "Other SGLang flags are accepted and ignored with a log line.",
    ]
    return "\n".join(lines)


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
        text, _, scope = text.strip().partition("@")
        if _ and not scope:
            raise ValueError(f"fault {text + '@'!r}: name a drafter after '@'")
        f = Fault._parse(text)
        return Fault(f.kind, f.n, scope or None)

    def applies_to(self, drafter: str | None) -> bool:
        return self.drafter is None or self.drafter == (drafter or "none")

    @staticmethod
    def _parse(text: str) -> Fault:
        kind, _, num = text.strip().partition(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {text!r}; expected one of {', '.join(FAULT_KINDS)} (with :N where needed)")
        if kind in _FAULTS_WITH_N:
            try:
                n = int(num)
            except ValueError:
                raise ValueError(f"fault {kind} needs a number, like {kind}:3, but got {text!r}") from None
            if n < (0 if kind == "crash-after" else 1):
                raise ValueError(f"fault {text!r}: the number must be positive")
            return Fault(kind, n)
        if num:
            raise ValueError(f"fault {kind} takes no number but got {text!r}")
        return Fault(kind)

    def __str__(self) -> str:
        base = self.kind if self.n is None else f"{self.kind}:{self.n}"
        return base if self.drafter is None else f"{base}@{self.drafter}"


@dataclass
class ResolvedArgs:
    """The launch as the simulated server resolved it (after SGLang's silent rewrites)."""

    scenario: Scenario
    model_path: str
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
        for f in self.faults:
            if f.kind == kind:
                return f
        return None

    def faults_of(self, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind]

    def startup_s(self) -> float:
        if self.sim_load_time is not None:
            return self.sim_load_time
        return self.scenario.startup_s(speculative=self.speculative, cuda_graph=self.cuda_graph)

    def server_args(self) -> dict[str, Any]:
        """SGLang's ``server_args`` as /server_info reports them."""
        return {
            "model_path": self.model_path,
            "served_model_name": self.served_model_name or self.model_path,
            "tp_size": self.tp_size,
            "host": self.host,
            "port": self.port,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_draft_model_path": self.speculative_draft_model_path,
            "speculative_num_steps": self.speculative_num_steps,
            "speculative_eagle_topk": self.speculative_eagle_topk,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
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
        from autotune.sim.batch import SPECULATIVE_MAX_RUNNING

        if self.max_running_requests is not None:
            return self.max_running_requests
        return SPECULATIVE_MAX_RUNNING if self.speculative else None

    @property
    def effective_graph_max_bs(self) -> int:
        from autotune.sim.batch import DEFAULT_GRAPH_MAX_BS

        return self.cuda_graph_max_bs if self.cuda_graph_max_bs is not None else DEFAULT_GRAPH_MAX_BS


def _split(argv: list[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """argv -> (known values, fault texts, log lines about ignored flags)."""
    vals: dict[str, Any] = {}
    faults: list[str] = []
    log: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            log.append(f"WARNING autotune.sim: ignoring stray argument {tok!r}")
            continue
        name, eq, inline = tok.partition("=")
        if name in _BOOL_FLAGS:
            vals[_BOOL_FLAGS[name]] = True
            continue
        if name in _VALUE_FLAGS:
            if eq:
                value = inline
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise SimLaunchError(
                    f"error: argument {name}: expected one argument",
                    log=f"launch_server.py: error: argument {name}: expected one argument",
                    returncode=2,
                )
            key = _VALUE_FLAGS[name]
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
    return vals, faults, log


def _fail(message: str, log: list[str], *, returncode: int = 1) -> SimLaunchError:
    return SimLaunchError(message, log="\n".join([*log, message]), returncode=returncode)


def _traceback(exc_line: str, log: list[str], where: str = "speculative_hook.py") -> SimLaunchError:
    lines = [
        *log,
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/launch_server.py", line 29, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        f'  File "/usr/lib/python3/dist-packages/sglang/srt/arg_groups/{where}", line 112, in _handle_eagle_family',
        exc_line,
    ]
    return SimLaunchError(exc_line, log="\n".join(lines), returncode=1)


def _not_loadable(path: str, log: list[str]) -> SimLaunchError:
    return _fail(
        f"OSError: Can't load the configuration of '{path}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, "
        f"make sure '{path}' is the correct path to a directory containing a config.json file",
        log,
    )


def _target_ok(path: str, scenario: Scenario) -> bool:
    if path in (scenario.target_name, scenario.target_dir):
        return True
    cfg = os.path.join(path, "config.json")
    return os.path.isdir(path) and os.path.isfile(cfg)


def parse_launch_args(argv: list[str], *, load: ScenarioLoader = load_scenario) -> ResolvedArgs:
    """Parse the sim's and SGLang's launch flags and apply SGLang's rules. Raises SimLaunchError. ``load`` resolves
    ``--scenario`` (default: the shipped scenarios)."""
    vals, fault_texts, log = _split(list(argv))
    name = vals.get("scenario")
    if not name:
        raise _fail(f"autotune.sim: --scenario is required (one of {', '.join(scenario_names())})", log, returncode=2)
    try:
        scenario = load(name)
    except ScenarioError as e:
        raise _fail(f"autotune.sim: {e}", log, returncode=2) from None
    for key in _INT_FIELDS:
        if key in vals:
            try:
                vals[key] = int(vals[key])
            except ValueError:
                raise _fail(
                    f"launch_server.py: error: argument --{key.replace('_', '-')}: invalid int value: {vals[key]!r}",
                    log,
                    returncode=2,
                ) from None
    try:
        time_scale = float(vals.get("time_scale", 1.0))
        load = vals.get("sim_load_time")
        sim_load_time = float(load) if load is not None else None
    except ValueError as e:
        raise _fail(f"autotune.sim: {e}", log, returncode=2) from None
    if not time_scale > 0:
        raise _fail(f"autotune.sim: --time-scale must be positive but got {time_scale}", log, returncode=2)
    near_ties = scenario.near_ties
    if "near_ties" in vals:
        try:
            near_ties = float(vals["near_ties"])
        except ValueError:
            near_ties = math.nan
        if not 0.0 <= near_ties <= 1.0:
            raise _fail(
                f"autotune.sim: --near-ties must be a probability between 0 and 1 but got {vals['near_ties']!r}",
                log,
                returncode=2,
            )
    if near_ties > 0:
        log.append(
            f"INFO autotune.sim: near ties on (probability {near_ties:g} per prompt): a speculative server takes "
            "the runner-up there"
        )
    try:
        faults = tuple(Fault.parse(t) for t in (*scenario.faults, *fault_texts))
    except ValueError as e:
        raise _fail(f"autotune.sim: {e}", log, returncode=2) from None

    model_path = vals.get("model_path")
    if not model_path:
        raise _fail("launch_server.py: error: the following arguments are required: --model-path", log, returncode=2)
    if not _target_ok(model_path, scenario):
        raise _not_loadable(model_path, log)

    args = ResolvedArgs(
        scenario=scenario,
        model_path=model_path,
        time_scale=time_scale,
        seed=int(vals.get("seed", 0)),
        launch_index=vals.get("launch_index"),
        sim_load_time=sim_load_time,
        faults=faults,
        noise=not vals.get("sim_no_noise", False),
        near_ties=near_ties,
        disable_cuda_graph=bool(vals.get("disable_cuda_graph", False)),
        disable_decode_cuda_graph=bool(vals.get("disable_decode_cuda_graph", False)),
        disable_prefill_cuda_graph=bool(vals.get("disable_prefill_cuda_graph", False)),
        cuda_graph_backend_decode=str(vals.get("cuda_graph_backend_decode", "full")),
        tp_size=int(vals.get("tp_size", 1)),
        host=str(vals.get("host", "127.0.0.1")),
        port=int(vals.get("port", 30000)),
        enable_metrics=bool(vals.get("enable_metrics", False)),
        served_model_name=vals.get("served_model_name"),
        max_running_requests=vals.get("max_running_requests"),
        cuda_graph_max_bs=vals.get("cuda_graph_max_bs"),
        log=log,
    )
    if args.cuda_graph_backend_decode not in ("full", "breakable", "disabled"):
        raise _fail(
            f"launch_server.py: error: argument --cuda-graph-backend-decode: invalid choice: "
            f"'{args.cuda_graph_backend_decode}' (choose from 'full', 'breakable', 'disabled')",
            log,
            returncode=2,
        )
    if vals.get("disable_cuda_graph"):
        log.append(
            "WARNING server_args.py: --disable-cuda-graph is deprecated; use --disable-decode-cuda-graph "
            "and --disable-prefill-cuda-graph"
        )

    algo = vals.get("speculative_algorithm")
    if algo is None:
        args.faults = tuple(f for f in args.faults if f.applies_to(None))
        return args
    algo = str(algo).upper()
    if algo not in KNOWN_ALGORITHMS:
        raise _traceback(f"ValueError: Unknown speculative algorithm name: {algo}", log, "fields/spec.py")
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo not in SIMULATED_ALGORITHMS:
        raise _fail(f"autotune.sim: speculative algorithm {algo} is not simulated (only EAGLE, EAGLE3, NEXTN)", log)
    args.speculative_algorithm = algo

    draft = vals.get("speculative_draft_model_path")
    if not draft:
        raise _traceback(
            "AssertionError: --speculative-draft-model-path is required for EAGLE/EAGLE3 "
            "(this target has no NextN/MTP layers)",
            log,
        )
    drafter = scenario.drafter_by_path(draft)
    if drafter is None:
        if os.path.isdir(draft) and os.path.isfile(os.path.join(draft, "config.json")):
            raise _fail(
                f"autotune.sim: {draft} is a checkpoint the scenario {scenario.name} does not know "
                f"(its drafters: {', '.join(scenario.drafters)})",
                log,
            )
        raise _not_loadable(draft, log)
    args.speculative_draft_model_path = draft
    args.drafter = drafter
    args.faults = tuple(f for f in args.faults if f.applies_to(drafter.name if drafter else None))

    steps = vals.get("speculative_num_steps")
    topk = vals.get("speculative_eagle_topk")
    ndt = vals.get("speculative_num_draft_tokens")
    if steps is None:
        if topk is not None or ndt is not None:
            raise _traceback(
                "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be unset "
                "when speculative_num_steps is unset",
                log,
            )
        steps, topk, ndt = (5, 4, 8) if scenario.family == "llama" else (3, 1, 4)
        log.append(
            f"INFO speculative_hook.py: auto-chose speculative_num_steps={steps}, "
            f"speculative_eagle_topk={topk}, speculative_num_draft_tokens={ndt} for this model"
        )
    elif topk is None or ndt is None:
        raise _traceback(
            "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be set "
            "when speculative_num_steps is set",
            log,
        )
    for flag, v in (
        ("speculative_num_steps", steps),
        ("speculative_eagle_topk", topk),
        ("speculative_num_draft_tokens", ndt),
    ):
        if v < 1:
            raise _traceback(f"AssertionError: {flag} must be positive, got {v}", log)
    if topk == 1 and ndt != steps + 1:
        log.append(
            f"WARNING speculative_hook.py: speculative_num_draft_tokens is adjusted to speculative_num_steps+1 "
            f"when speculative_eagle_topk == 1 (was {ndt}, now {steps + 1})"
        )
        ndt = steps + 1
    if ndt < 2:
        raise _traceback(f"AssertionError: speculative_num_draft_tokens must be at least 2, got {ndt}", log)
    max_nodes = topk + (steps - 1) * topk * topk
    if ndt - 1 > max_nodes:
        raise _traceback(
            f"ValueError: speculative_num_draft_tokens={ndt} is too large for speculative_num_steps={steps} and "
            f"speculative_eagle_topk={topk}: the draft tree has only {max_nodes} candidate nodes "
            f"(num_draft_tokens - 1 <= topk + (steps - 1) * topk^2)",
            log,
            "../speculative/eagle_utils.py",
        )
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, ndt
    return args

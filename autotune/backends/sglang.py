"""SGLang (``python -m sglang.launch_server``): EAGLE / EAGLE-3 / STANDALONE speculative decoding.

Knobs: ``num_steps`` (tree depth S), ``topk`` (branching k), ``num_draft_tokens`` (verified nodes N, root
included). The rules SGLang applies (0.5.23, ``speculative_hook.py``) and how this module handles them:

- All three must be passed, or SGLang auto-chooses all three: we always pass all three (resolved values).
- ``topk == 1``: SGLang silently rewrites N to S+1, so N is never suggested then and resolves to S+1.
- The draft tree has ``k + (S-1)*k^2`` candidates of which N-1 are kept: a larger N fails at run time, so
  such configs are infeasible (never launched), and N < 2 too.

``suggest`` reaches no infeasible or silently rewritten config, and every parameter name keeps one distribution (TPE
with ``group=True`` can model it): where the feasible values at S (or at S, k) cut the space's list, ``topk`` is
asked as ``topk_s{S}`` and ``num_draft_tokens`` as ``num_draft_tokens_s{S}_k{k}``. The baseline is enqueued by the
study (role=baseline) once per CUDA-graph setting, never suggested.

Benchmark requests go to SGLang's native ``/generate`` (SSE, cumulative text, ``meta_info`` whose final chunk has
``spec_accept_length``): it carries the acceptance length per request. ``api: chat`` uses ``/v1/chat/completions``
(acceptance then unknown per request). ``--incremental-streaming-output`` in ``server.extra_args`` makes the stream
deltas (``chunk_parser``). A per-level schedule deploys as SGLang's adaptive config (``adaptive_config``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from autotune import checks
from autotune.backends.base import Backend, Portable, ScheduledLaunch, flag_value
from autotune.backends.methods import OptunaAsk, cut_name, feasible, int_values, nearest, suggest_drafter
from autotune.backends.sglang_methods import (
    ADAPTIVE_FILE,
    DECODE_MAX_BS_FLAG,
    LEGACY,
    METHODS,
    OLD_MAX_BS_FLAG,
    PER_PHASE,
    TREE_KNOBS,
    AdaptiveEntry,
    MethodTree,
    cuda_graph_max_bs_flag,
    cuda_graph_off_flags,
    cuda_graph_spelling,
    cuda_graph_state,
    feasibility_reason,
    flag_spelling_from_help,
    max_bs_flag_from_help,
    run_help,
    tree_flags,
)
from autotune.backends.sglang_methods import _read_json as _read_config_json
from autotune.backends.streams import (
    INCREMENTAL_OUTPUT_FLAG,
    ChunkInfo,
    ChunkParser,
    _float_or_none,
    _int_or_none,
    incremental_output,
    parse_generate_chunk,
    parse_generate_logprobs,
    parse_openai_chunk,
)
from autotune.config import EffectiveConfig, KnobValue, ReferenceOutput, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.schedule import batch_ranges
from autotune.space import ParamSpec, Prompt

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space


KNOB_DOMAINS = TREE_KNOBS
KNOBS = tuple(KNOB_DOMAINS)

#: SGLang's own auto choice (steps, topk, num_draft_tokens) by target architecture
_LLAMA_LIKE_DEFAULT = (5, 4, 8)
_OTHER_DEFAULT = (3, 1, 4)
_LLAMA_LIKE_ARCHS = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1ImgGen", "GrokForCausalLM")


def _spec_values(spec: ParamSpec | None) -> list[int] | None:
    return int_values(spec, "SGLang")


def resolved_algorithm(space: Space, name: str) -> str:
    """``--speculative-algorithm`` for drafter ``name`` (``checks.resolved_algorithm``, upper-cased)."""
    return str(checks.resolved_algorithm(space, name)).upper()


class SGLangBackend(Backend):
    name = "sglang"
    info_path = "/server_info"
    info_fallback_paths = ("/get_server_info",)
    knob_names = KNOBS
    knob_domains = KNOB_DOMAINS
    methods = METHODS
    managed_flags = (
        "--speculative-*",
        "--port",
        "--host",
        "--model-path",
        "--model",
        "--disable-cuda-graph",
        "--disable-decode-cuda-graph",
        "--disable-prefill-cuda-graph",
    )
    #: with load levels: every level's streams run at once (a speculative server defaults to 48) and stay
    #: inside the captured CUDA graphs. Both spellings of the graph cap are listed so that a value given in
    #: ``extra_args`` under either is checked; ``level_args`` writes the one ``server.version`` knows.
    level_flags = ("--max-running-requests", DECODE_MAX_BS_FLAG, OLD_MAX_BS_FLAG)
    size_knob = "num_draft_tokens"
    parallel_size_flags = ("--tp-size", "--tp", "--tensor-parallel-size", "--pp-size", "--pipeline-parallel-size")
    display_name = "SGLang"
    not_engaged_hint = (
        "check --speculative-algorithm (an EAGLE-3 drafter needs EAGLE3) and that the drafter was trained for "
        "this target"
    )
    read_keys = ("num_steps", "cuda_graph")
    images = ("lmsysorg/sglang:v{version}", "lmsysorg/sglang:latest")
    #: none: SGLang's docker/Dockerfile sets no ENTRYPOINT (its nvidia/cuda base's /opt/nvidia/nvidia_entrypoint.sh
    #: runs the command as given), so a container's command is the whole ``python3 -m sglang.launch_server ...``
    image_entrypoint = ()
    schedule_knob = "num_steps"
    schedule_static_knobs = ("topk",)
    export_format = "sglang"
    export_format_launches = True

    def __init__(self, *, cuda_graph_spelling: str | None = None) -> None:
        if cuda_graph_spelling not in (None, LEGACY, PER_PHASE):
            raise ValueError(
                f"cuda_graph_spelling must be {LEGACY!r}, {PER_PHASE!r} or None but got {cuda_graph_spelling!r}"
            )
        #: the CUDA-graph flags' spelling and max-batch-size flag, set or probed (None: from ``server.version``)
        self.cuda_graph_spelling = cuda_graph_spelling
        self.max_bs_flag: str | None = None
        #: spaces with ``search.methods`` (``autotune.backends.sglang_methods``)
        self.tree: MethodTree = MethodTree(self._auto_triple)

    # -- the space ----------------------------------------------------------------------------------

    def _auto_triple(self, space: Space) -> tuple[int, int, int]:
        cfg = _read_config_json(space.server.model_path) if space.server.model_path else None
        archs = [str(a) for a in (cfg or {}).get("architectures") or ()]
        return _LLAMA_LIKE_DEFAULT if any(a in _LLAMA_LIKE_ARCHS for a in archs) else _OTHER_DEFAULT

    # A space without ``search.methods`` is the method tree's tree of method None (``MethodTree.spec``).

    def _names(self, space: Space, steps: int, topk: int) -> tuple[str, str]:
        topk_full = _spec_values(self.tree.spec(space, None, "topk"))
        ndt_full = _spec_values(self.tree.spec(space, None, "num_draft_tokens"))
        topk_name = cut_name("topk", self.tree.topks(space, None, steps), topk_full, f"s{steps}")
        ndt_name = cut_name("num_draft_tokens", self.tree.ndts(space, None, steps, topk), ndt_full, f"s{steps}_k{topk}")
        return topk_name, ndt_name

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        if space.search.methods:
            return self.tree.suggest(trial, space)
        drafter, cuda_graph = suggest_drafter(trial, space)
        return TrialConfig.make(drafter, cuda_graph, **self.tree.walk_tree(OptunaAsk(trial), space, None))

    def params(self, config: TrialConfig, space: Space) -> dict[str, KnobValue | None]:
        if config.is_baseline:
            return {"cuda_graph": bool(config.cuda_graph)}  # enqueued by the study with role=baseline
        if space.search.methods:
            return self.tree.params(self.resolve(config, space), space)
        eff = self.resolve(config, space)
        steps, topk, ndt = (int(eff.knob(k)) for k in KNOBS)
        topk_name, ndt_name = self._names(space, steps, topk)
        out: dict[str, KnobValue | None] = {
            "drafter": config.drafter,
            "cuda_graph": bool(config.cuda_graph),
            "num_steps": steps,
            topk_name: topk,
        }
        if topk > 1:
            out[ndt_name] = ndt
        return out

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        if config.is_baseline:
            return EffectiveConfig.baseline(config.cuda_graph)
        if space.search.methods:
            return self.tree.resolve(config, space)
        self.require_known(config, space)
        steps = _int_or_none(config.knob("num_steps"))
        topk = _int_or_none(config.knob("topk"))
        ndt = _int_or_none(config.knob("num_draft_tokens"))
        if steps is None or topk is None:
            raise InfeasibleConfig(
                "num_steps and topk are required (all three knobs are always passed, or SGLang picks its own)"
            )
        if topk == 1:
            ndt = steps + 1
        if ndt is None:
            raise InfeasibleConfig("num_draft_tokens is required when topk > 1")
        reason = feasibility_reason(steps, topk, ndt)
        if reason:
            raise InfeasibleConfig(reason)
        return EffectiveConfig.make(config.drafter, config.cuda_graph, num_steps=steps, topk=topk, num_draft_tokens=ndt)

    def defaults(self, space: Space) -> list[TrialConfig]:
        """SGLang's auto choice for the target, per drafter, moved to the nearest feasible point (in a method
        space: each method's server default per drafter)."""
        if space.search.methods:
            return self.tree.defaults(space)
        steps0, topk0, ndt0 = self._auto_triple(space)
        steps_allowed = self.tree.steps(space, None)
        if not steps_allowed:
            return []
        steps = nearest(steps_allowed, steps0)
        topk = nearest(self.tree.topks(space, None, steps), topk0)
        ndt = steps + 1 if topk == 1 else nearest(self.tree.ndts(space, None, steps, topk), ndt0)
        configs = [
            TrialConfig.make(d, any(space.search.cuda_graph), num_steps=steps, topk=topk, num_draft_tokens=ndt)
            for d in space.searched_drafters()
        ]
        return feasible(self.resolve, configs, space)

    def grid(self, space: Space) -> list[TrialConfig] | None:
        """Every feasible point, in bench_speculative.py's nested order (drafter, CUDA graphs, steps, topk, N)."""
        if space.search.methods:
            return self.tree.grid(space)
        t = self.tree
        for knob in KNOBS:
            if _spec_values(t.spec(space, None, knob)) is None:
                return None
        out: list[TrialConfig] = []
        for d in space.searched_drafters():
            for cg in space.search.cuda_graph:
                for s in t.steps(space, None):
                    for k in t.topks(space, None, s):
                        for n in [s + 1] if k == 1 else t.ndts(space, None, s, k):
                            out.append(TrialConfig.make(d, bool(cg), num_steps=s, topk=k, num_draft_tokens=n))
        return out

    # -- launching ----------------------------------------------------------------------------------

    def spelling_for(self, space: Space) -> str:
        if self.cuda_graph_spelling is not None:
            return self.cuda_graph_spelling
        return cuda_graph_spelling(space.server.version)

    def probe(self, space: Space, *, timeout_s: float = 60.0) -> None:
        """Read ``launch_server --help`` (``run_help``) for the CUDA-graph flags' spelling (unchanged on failure)."""
        launcher = list(space.server.launcher) or [sys.executable, "-m", "sglang.launch_server"]
        text = run_help([*launcher, "--help"], timeout_s=timeout_s)
        spelling = flag_spelling_from_help(text) if text else None
        if spelling is not None:
            self.cuda_graph_spelling = spelling
        max_bs = max_bs_flag_from_help(text) if text else None
        if max_bs is not None:
            self.max_bs_flag = max_bs

    def max_bs_flag_for(self, space: Space) -> str:
        return self.max_bs_flag or cuda_graph_max_bs_flag(space.server.version)

    def level_args(self, space: Space) -> list[str]:
        """``--max-running-requests N`` and the CUDA-graph cap spelled for the server's version (``N``: the highest
        load level), each unless ``server.extra_args`` gives it (the cap under either spelling); [] without levels."""
        if not space.benchmark.loaded:
            return []
        top = str(max(space.benchmark.concurrency))
        given = space.server.extra_args
        out: list[str] = []
        if flag_value(given, "--max-running-requests") is None:
            out += ["--max-running-requests", top]
        if flag_value(given, DECODE_MAX_BS_FLAG) is None and flag_value(given, OLD_MAX_BS_FLAG) is None:
            out += [self.max_bs_flag_for(space), top]
        return out

    deploy_launcher = ("python3", "-m", "sglang.launch_server")
    install_hint = (
        "Install SGLang in this environment (pip install 'sglang[all]', the release of server.version), or name "
        "the Python of an environment that has it in the space's server.launcher, e.g. [/opt/sglang/bin/python, -m, "
        "sglang.launch_server]"
    )

    def launcher(self, space: Space, *, deploy: bool = False) -> list[str]:
        """``server.launcher``, else this interpreter's ``-m sglang.launch_server`` (with ``deploy``: python3's)."""
        if space.server.launcher or deploy:
            return super().launcher(space, deploy=deploy)
        return [sys.executable, "-m", "sglang.launch_server"]

    def argv(
        self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False, files_dir: str | None = None
    ) -> list[str]:
        eff = self.effective(config, space)
        server = space.server
        launcher = self.launcher(space)
        argv = [*launcher, "--model-path", server.model_path, "--host", server.host, "--port", str(int(port))]
        if not eff.is_baseline and space.search.methods:
            argv += self.tree.argv(eff, space, files_dir, self.file_arg)
        elif not eff.is_baseline:
            drafter = space.drafter(eff.drafter or "")
            argv += tree_flags(resolved_algorithm(space, drafter.name), drafter.path, eff)
        if not eff.cuda_graph:
            argv += cuda_graph_off_flags(self.spelling_for(space))
        argv.append("--enable-metrics")
        argv += self.level_args(space)
        argv += [str(a) for a in server.extra_args]
        return [str(a) for a in argv]

    def files(self, config: TrialConfig, space: Space) -> dict[str, str]:
        """The adaptive config file of an ``adaptive`` method config (``sglang_methods.adaptive_file``)."""
        if not space.search.methods or config.is_baseline:
            return {}
        return self.tree.files(self.effective(config, space))

    def checks_engagement(self, config: TrialConfig) -> bool:
        """Not for n-gram lookup: no drafter to be misconfigured; finding nothing to copy is a measured loss."""
        return bool(config.knob("method") != "ngram")

    def drafter_algorithm(self, space: Space, name: str) -> str:
        """``--speculative-algorithm`` of drafter ``name`` (``resolved_algorithm``)."""
        return resolved_algorithm(space, name)

    # -- deploying ----------------------------------------------------------------------------------

    def deploy_method(self, config: TrialConfig, space: Space) -> str | None:
        """``--speculative-algorithm`` the config launches with (None for the baseline): a method space's method
        (n-gram and MTP have no drafter), else its drafter's."""
        if config.is_baseline:
            return None
        if space.search.methods:
            return self.tree.algorithm(self.effective(config, space), space)
        return resolved_algorithm(space, config.drafter or "")

    def portable(self, config: TrialConfig, space: Space) -> Portable:
        """A chain (topk 1: S drafted tokens, N = S + 1 verified) of an HF checkpoint translates; a tree does not (the
        other servers draft chains), nor do ``extra_args`` without a known neutral meaning."""
        eff = self.effective(config, space)
        settings = portable_settings(space.server.extra_args)
        if eff.is_baseline:
            return Portable(None, eff.cuda_graph, settings=settings, source=self.display_name)
        algorithm = self.deploy_method(config, space)
        if space.search.methods and self.methods[str(eff.knob("method"))].adaptive:
            raise ValueError(
                "the config runs SGLang's adaptive mode (--speculative-adaptive); a translation would run one static "
                "draft length instead"
            )
        if eff.drafter is None or algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
            raise ValueError(
                f"the config runs {algorithm} without a drafter checkpoint of its own; only an EAGLE, EAGLE-3 or "
                "draft-model chain has a faithful equivalent on another server"
            )
        topk = int(eff.knob("topk"))
        if topk != 1:
            raise ValueError(
                f"the config drafts a tree (topk {topk}, {eff.knob('num_draft_tokens')} draft tokens); only a chain "
                "(topk 1) has a faithful equivalent on another server"
            )
        return Portable(
            eff.drafter,
            eff.cuda_graph,
            algorithm=algorithm,
            draft_tokens=int(eff.knob("num_steps")),
            settings=settings,
            source=self.display_name,
        )

    def schedule_launch(
        self, space: Space, schedule: Mapping[str, Any], argv: list[str], *, files_dir: str | None
    ) -> ScheduledLaunch:
        """``--speculative-adaptive --speculative-adaptive-config FILE`` after the static config's argv, FILE (the
        adaptive config, ``adaptive_config``) written beside the export. SGLang adapts EAGLE/EAGLE3 at topk 1 only:
        another static config runs as it is at every level."""
        if not schedule["static"].get("drafter") or not schedule["on_up_to"]:
            return ScheduledLaunch(list(argv), {}, "speculation loses at every level: the recommended config")
        topk = schedule["static"].get("topk")
        if topk not in (None, 1):
            return ScheduledLaunch(
                list(argv),
                {},
                f"SGLang adapts the draft only at topk 1; this schedule's topk is {topk}: its static config runs "
                "at every level",
            )
        # SGLang refuses a --speculative-num-steps that is in no entry's candidate_steps: launch with the first level's
        k = adaptive_initial_steps(schedule)
        argv = [*argv]
        for flag, value in (("--speculative-num-steps", k), ("--speculative-num-draft-tokens", k + 1)):
            if flag in argv:
                argv[argv.index(flag) + 1] = str(value)
        flags = ["--speculative-adaptive", "--speculative-adaptive-config", self.file_arg(ADAPTIVE_FILE, files_dir)]
        return ScheduledLaunch(
            [*argv, *flags],
            {ADAPTIVE_FILE: json.dumps(adaptive_config(schedule)) + "\n"},
            f"{ADAPTIVE_FILE}: SGLang's adaptive config (--speculative-adaptive-config)",
        )

    # -- reading ------------------------------------------------------------------------------------

    def read_effective(self, server_info: dict[str, Any]) -> dict[str, Any]:
        """From /server_info: algorithm, the three knobs, CUDA-graph state, version, running accept length."""
        info: dict[str, Any] = dict(server_info)
        nested = info.get("server_args")
        if isinstance(nested, Mapping):
            info = {**info, **nested}
        algo = info.get("speculative_algorithm")
        out: dict[str, Any] = {
            "speculative_algorithm": str(algo).upper() if algo not in (None, "", "None") else None,
            "num_steps": _int_or_none(info.get("speculative_num_steps")),
            "topk": _int_or_none(info.get("speculative_eagle_topk")),
            "num_draft_tokens": _int_or_none(info.get("speculative_num_draft_tokens")),
            "cuda_graph": cuda_graph_state(info),
            "version": info.get("version"),
        }
        if info.get("speculative_adaptive") or info.get("speculative_adaptive_config"):
            out["speculative_adaptive"] = bool(info.get("speculative_adaptive"))  # launched adaptive: on or not
        states = info.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], Mapping):
            out["avg_spec_accept_length"] = _float_or_none(states[0].get("avg_spec_accept_length"))
        return out

    def check_effective(self, config: TrialConfig, effective: Mapping[str, Any]) -> list[str]:
        problems: list[str] = []
        if effective.get("cuda_graph") is not None and bool(effective["cuda_graph"]) != config.cuda_graph:
            problems.append(f"cuda_graph: launched {config.cuda_graph}, server runs {effective['cuda_graph']}")
        if config.is_baseline:
            if effective.get("speculative_algorithm"):
                problems.append(f"baseline launched but server speculates ({effective['speculative_algorithm']})")
            return problems
        if config.knob("method") is not None:
            return problems + self.tree.check_effective(config, effective)
        for knob in KNOBS:
            got = effective.get(knob)
            if got is not None and got != config.knob(knob):
                problems.append(f"{knob}: launched {config.knob(knob)}, server runs {got}")
        return problems

    # -- benchmark requests -------------------------------------------------------------------------

    def request(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float,
        api: str = "completions",
        model: str | None = None,
        request: Prompt | None = None,
    ) -> tuple[str, dict[str, object]]:
        """Native ``/generate`` (carries acceptance per request); ``api == "chat"``: OpenAI chat."""
        if api == "chat":
            return super().request(
                prompt, max_tokens=max_tokens, temperature=temperature, api=api, model=model, request=request
            )
        sampling: dict[str, float] = {"max_new_tokens": int(max_tokens), "temperature": float(temperature)}
        if request is not None and request.top_p is not None:
            sampling["top_p"] = float(request.top_p)
        return "/generate", {"text": prompt, "sampling_params": sampling, "stream": True}

    def reference_request(
        self,
        prompt: str,
        *,
        max_tokens: int,
        top_n: int,
        api: str = "completions",
        model: str | None = None,
        request: Prompt | None = None,
    ) -> tuple[str, dict[str, object]]:
        """Native ``/generate``, not streamed, with ``return_logprob``, ``top_logprobs_num`` and token texts."""
        if api == "chat":
            return super().reference_request(
                prompt, max_tokens=max_tokens, top_n=top_n, api=api, model=model, request=request
            )
        return "/generate", {
            "text": prompt,
            "sampling_params": {"max_new_tokens": int(max_tokens), "temperature": 0.0},
            "stream": False,
            "return_logprob": True,
            "top_logprobs_num": int(top_n),
            "return_text_in_logprobs": True,
        }

    def parse_reference(self, obj: Mapping[str, object], index: int) -> ReferenceOutput | None:
        if "meta_info" not in obj:
            return super().parse_reference(obj, index)
        return parse_generate_logprobs(obj, index)

    def parse_chunk(self, obj: Mapping[str, object]) -> ChunkInfo:
        """A ``/generate`` chunk (text so far: SGLang's default) or an OpenAI chunk."""
        if "meta_info" not in obj:
            return parse_openai_chunk(obj)
        return parse_generate_chunk(obj)

    def chunk_parser(self, space: Space) -> ChunkParser:
        """``parse_chunk``; for a server streaming deltas (``incremental_output``), with every chunk's text a delta."""
        if not incremental_output(space):
            return self.parse_chunk

        def parse_deltas(obj: Mapping[str, object]) -> ChunkInfo:
            info = self.parse_chunk(obj)
            return dataclasses.replace(info, cumulative=False) if info.cumulative else info

        return parse_deltas


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


def portable_settings(extra_args: tuple[str, ...] | list[str]) -> dict[str, str | bool]:
    """``server.extra_args`` as server-neutral settings (``PORTABLE_FLAGS``); ValueError naming the flags that have
    none."""
    out: dict[str, str | bool] = {}
    unknown: list[str] = []
    args = [str(a) for a in extra_args]
    i = 0
    while i < len(args):
        flag, _, inline = args[i].partition("=")
        setting = PORTABLE_FLAGS.get(flag)
        if flag == INCREMENTAL_OUTPUT_FLAG:  # shapes how autotune reads the stream: no meaning elsewhere
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


def adaptive_config(schedule: Mapping[str, Any]) -> dict[str, AdaptiveEntry]:
    """SGLang's ``--speculative-adaptive-config`` file: per batch-size range of ``schedule.batch_ranges``, keyed by its
    first batch size, ``{"candidate_steps": [K]}`` with the schedule's draft length there (0: no speculation). SGLang
    0.5.23 (``speculative/adaptive_spec_params.py``) routes a decode batch to the entry with the largest key not above
    it and moves between an entry's candidate steps by the acceptance it observes: one candidate pins the length."""
    return {str(start): {"candidate_steps": [int(k)]} for start, _end, k in batch_ranges(schedule)}


def adaptive_initial_steps(schedule: Mapping[str, Any]) -> int:
    """The ``--speculative-num-steps`` to launch an adaptive SGLang server with: the first level's draft length
    (SGLang refuses a value that is in no entry's ``candidate_steps``)."""
    return int(schedule["levels"][0]["draft"])

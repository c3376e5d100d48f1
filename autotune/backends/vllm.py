"""vLLM (``vllm serve MODEL --speculative-config JSON``).

vLLM cannot run on the machines this project is developed on: every launch and export is handed to vLLM 0.33.0's own
``vllm serve`` parser and ``SpeculativeConfig`` on CPU (tests/servers/test_vllm_parser.py).

Knobs: ``method`` (eagle, eagle3, draft_model, ngram, mtp) and ``num_speculative_tokens`` (K >= 1).
- The speculative config is ONE argv element of JSON: ``{"method", "model", "num_speculative_tokens",
  "draft_tensor_parallel_size": 1}``; ``ngram`` has no model and uses ``prompt_lookup_max`` / ``prompt_lookup_min``;
  ``mtp`` uses the target's own MTP layers.
- Without ``method`` in the space it is derived from the drafter (EAGLE3 -> eagle3, EAGLE -> eagle, else
  draft_model). With it, a drafter pairs only with its own method or the model-free ones: an EAGLE-3 drafter under
  ``eagle`` is the silent acceptance collapse, never suggested. A method list that differs by drafter is suggested as
  ``method_<drafter>``.
- CUDA graphs off: ``--enforce-eager``.
- Acceptance: none per request in the stream; 1 + accepted / drafts over the deltas of
  ``vllm:spec_decode_num_accepted_tokens_total`` / ``vllm:spec_decode_num_drafts_total`` around each request, and
  per position over ``vllm:spec_decode_num_accepted_tokens_per_pos_total`` (0.33.0's ``SpecDecodingProm``).
- Export: with load levels, ``--speculative-config`` carries ``num_speculative_tokens_per_batch_size``. Another
  server's study exports only as a faithful translation (``translate``); a GGUF draft or a draft tree has none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune import checks
from autotune.acceptance import AcceptPositions
from autotune.backends.base import Backend, Portable, ScheduledLaunch
from autotune.backends.methods import cut_name, int_values, suggest_drafter, suggest_int
from autotune.backends.streams import _int_or_none, metric_total, per_position_deltas
from autotune.backends.vllm_methods import METHODS as METHOD_CATALOGUE
from autotune.backends.vllm_methods import (
    PER_BATCH_SIZE_SINCE,
    SINCE,
    VLLMMethods,
    architecture_problem,
    mtp_unavailable,
)
from autotune.config import EffectiveConfig, KnobValue, TrialConfig
from autotune.errors import InfeasibleConfig, ValidationFailed
from autotune.schedule import batch_ranges
from autotune.servers import KnobDomain, version_lacks
from autotune.space import Choices

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space

METHODS = ("eagle", "eagle3", "draft_model", "ngram", "mtp")
MODEL_FREE_METHODS = ("ngram", "mtp")
KNOB_DOMAINS = {"method": KnobDomain("str"), "num_speculative_tokens": KnobDomain("int", 1)}
KNOBS = tuple(KNOB_DOMAINS)

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
#: vLLM 0.33.0 ``SpecDecodingProm`` (vllm/v1/spec_decode/metrics.py): a counter per draft position, label ``position``
#: "0".."K-1" (besides ``model_name`` and ``engine``): drafts whose first position+1 tokens were accepted
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
POSITION_LABEL = "position"

_ALGORITHM_TO_METHOD = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "MTP": "mtp", "NGRAM": "ngram"}
#: another server's neutral settings (``Backend.portable``) -> vLLM flags (True: a switch)
SETTING_FLAGS = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "dtype": "--dtype",
    "max_model_len": "--max-model-len",
    "trust_remote_code": "--trust-remote-code",
}


def drafter_method(space: Space, name: str) -> str:
    """The vLLM method matching drafter ``name`` (forced algorithm, else its checkpoint's config.json)."""
    forced = space.drafter(name).algorithm
    if forced and forced.lower() in METHODS:
        return forced.lower()
    algo = str(checks.resolved_algorithm(space, name)).upper()
    return _ALGORITHM_TO_METHOD.get(algo.upper(), "draft_model")


class VLLMBackend(Backend):
    name = "vllm"
    deploy_launcher = ("vllm", "serve")
    info_path = "/version"
    acceptance_from_metrics_deltas = True
    knob_names = KNOBS
    knob_domains = KNOB_DOMAINS
    methods = METHOD_CATALOGUE
    #: spaces with ``search.methods`` (``autotune.backends.vllm_methods``)
    tree: VLLMMethods = VLLMMethods()
    managed_flags = ("--speculative-config", "--port", "--host")
    #: with load levels: the scheduler admits every stream of the highest level at once
    level_flags = ("--max-num-seqs",)
    size_knob = "num_speculative_tokens"
    parallel_size_flags = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp")
    display_name = "vLLM"
    install_hint = (
        "Install vLLM on this machine (pip install vllm, on a CUDA host), or name its launcher in the space's "
        "server.launcher, e.g. [/opt/vllm/bin/vllm, serve]"
    )
    images = ("vllm/vllm-openai:v{version}", "vllm/vllm-openai:latest")
    #: vLLM's docker/Dockerfile, target vllm-openai: ``ENTRYPOINT ["vllm", "serve"]`` and no CMD, so a container
    #: takes the arguments after ``vllm serve`` (the model first)
    image_entrypoint = ("vllm", "serve")
    schedule_knob = "num_speculative_tokens"
    schedule_static_knobs = ("method",)
    export_format = "vllm"
    export_format_launches = True
    accepts_translation = True

    def _methods_for(self, space: Space, drafter: str) -> list[str]:
        """The methods drafter ``drafter`` may be launched with: its own, and the model-free ones where the space
        searches ``method``; never one that ``_method_problem`` refuses."""
        spec = space.search.knobs.get("method")
        own = drafter_method(space, drafter)
        if spec is None:
            values = [own]
        else:
            values = [str(v) for v in (spec.values if isinstance(spec, Choices) else ())]
        return [
            m
            for m in values
            if m in METHODS and (m == own or m in MODEL_FREE_METHODS) and self._method_problem(space, m) is None
        ]

    @staticmethod
    def _method_problem(space: Space, method: str) -> str | None:
        """Why vLLM would refuse ``method`` for this space before serving anything (None: it would not): a
        ``server.version`` older than the release that added it (``vllm_methods.SINCE``), or ``mtp`` on a target
        whose config.json names no MTP layers (vLLM 0.33.0: "Unsupported speculative method: 'mtp'")."""
        if version_lacks(space.server.version, SINCE.get(method)):
            return (
                f"method {method} needs vLLM {SINCE[method]} or newer (the release that added it to "
                f"--speculative-config); server.version is {space.server.version}"
            )
        if method == "mtp":
            return mtp_unavailable(space.server.model_path)
        return None

    def _method_name(self, space: Space, drafter: str) -> str:
        spec = space.search.knobs.get("method")
        full = [str(v) for v in spec.values] if isinstance(spec, Choices) else []
        return cut_name("method", self._methods_for(space, drafter), full, drafter)

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        if space.search.methods:
            return self.tree.suggest(trial, space)
        drafters = [d for d in space.searched_drafters() if self._methods_for(space, d)]
        drafter, cuda_graph = suggest_drafter(trial, space, drafters)
        methods = self._methods_for(space, drafter)
        if "method" in space.search.knobs:
            method = str(trial.suggest_categorical(self._method_name(space, drafter), methods))
        else:
            method = methods[0]
        spec = space.search.knobs.get("num_speculative_tokens")
        if spec is None:
            k = 3
        else:
            allowed = [v for v in int_values(spec, self.display_name) or [] if v >= 1]
            # a linear scale even for a log range, as this backend has always drawn it
            k = suggest_int(trial, "num_speculative_tokens", spec, allowed, log=False)
        return TrialConfig.make(drafter, cuda_graph, method=method, num_speculative_tokens=k)

    def params(self, config: TrialConfig, space: Space) -> dict[str, KnobValue | None]:
        if config.is_baseline:
            return {"cuda_graph": bool(config.cuda_graph)}
        if space.search.methods:
            return self.tree.params(self.resolve(config, space), space)
        eff = self.resolve(config, space)
        out: dict[str, KnobValue | None] = {"drafter": eff.drafter, "cuda_graph": eff.cuda_graph}
        if "method" in space.search.knobs:
            out[self._method_name(space, eff.drafter or "")] = eff.knob("method")
        if "num_speculative_tokens" in space.search.knobs:
            out["num_speculative_tokens"] = eff.knob("num_speculative_tokens")
        return out

    def check_drafters(self, space: Space) -> list[checks.Problem]:
        """The checkpoint checks, and each searched drafter's architectures against what vLLM 0.33.0 loads under
        the method it would run with (``vllm_methods.architecture_problem``)."""
        problems = super().check_drafters(space)
        refused = {p.drafter for p in problems if p.is_error}  # one error a drafter: the checkpoint's first
        for i, d in enumerate(space.drafters):
            for method in self._launch_methods(space, d.name) if d.name not in refused else ():
                why = architecture_problem(method, d.name, d.path)
                if why:
                    problems.append(checks.Problem("error", why, d.name, f"drafters[{i}].path", d.path))
        return problems

    @staticmethod
    def _launch_methods(space: Space, drafter: str) -> list[str]:
        """The methods drafter ``drafter`` would be launched with: those of ``search.methods`` naming it, else its
        own (none when unsearched or undeterminable: ``check_checkpoints`` says so)."""
        if space.search.methods:
            return [name for name, m in space.search.methods.items() if drafter in m.drafters]
        if drafter not in space.searched_drafters():
            return []
        try:
            return [drafter_method(space, drafter)]
        except ValidationFailed:
            return []

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        eff = self._resolve(config, space)
        method = eff.knob("method")
        if eff.drafter is not None and method is not None:
            why = architecture_problem(str(method), eff.drafter, space.drafter(eff.drafter).path)
            if why:
                raise InfeasibleConfig(why)
        return eff

    def _resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        if config.is_baseline:
            return EffectiveConfig.baseline(config.cuda_graph)
        if space.search.methods:
            return self.tree.resolve(config, space)
        self.require_known(config, space)
        own = drafter_method(space, config.drafter or "")
        method = str(config.knob("method") or own)
        if method not in METHODS:
            raise InfeasibleConfig(f"method must be one of {list(METHODS)} but got {method!r}")
        if method != own and method not in MODEL_FREE_METHODS:
            raise InfeasibleConfig(
                f"drafter {config.drafter!r} is a {own} drafter; method {method!r} would run it wrongly"
            )
        problem = self._method_problem(space, method)
        if problem:
            raise InfeasibleConfig(problem)
        k = _int_or_none(config.knob("num_speculative_tokens"))
        if k is None or k < 1:
            raise InfeasibleConfig(f"num_speculative_tokens must be at least 1 but got {k}")
        return EffectiveConfig.make(config.drafter, config.cuda_graph, method=method, num_speculative_tokens=k)

    def checks_engagement(self, config: TrialConfig) -> bool:
        """Not for n-gram lookup: finding nothing to copy is a measured loss, not a misconfiguration."""
        return config.knob("method") != "ngram" or config.drafter is not None

    def argv(
        self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False, files_dir: str | None = None
    ) -> list[str]:
        eff = self.effective(config, space)
        server = space.server
        launcher = self.launcher(space)
        argv = [*launcher, server.model_path, "--host", server.host, "--port", str(int(port))]
        if not eff.is_baseline:
            argv += ["--speculative-config", json.dumps(self.tree.speculative_config(eff, space), sort_keys=True)]
        if not eff.cuda_graph:
            argv.append("--enforce-eager")
        argv += self.level_args(space)
        argv += [str(a) for a in server.extra_args]
        return [str(a) for a in argv]

    # -- deploying ----------------------------------------------------------------------------------

    def deploy_method(self, config: TrialConfig, space: Space) -> str | None:
        """The ``--speculative-config`` method (None for the baseline)."""
        return None if config.is_baseline else str(self.effective(config, space).knob("method"))

    def translate(self, space: Space, portable: Portable) -> tuple[Space, TrialConfig]:
        """Another server's study as ``vllm serve``: the same checkpoints, the drafter's algorithm as its method, the
        chain's length as ``num_speculative_tokens``, the neutral settings as vLLM flags; no server version."""
        extra: list[str] = []
        for key, value in portable.settings.items():
            flag = SETTING_FLAGS.get(key)
            if flag is None:
                raise ValueError(f"{portable.source} setting {key} has no vLLM flag known to autotune")
            extra += [flag] if value is True else [flag, str(value)]
        server = dataclasses.replace(
            space.server, backend=self.name, launcher=(), extra_args=tuple(extra), version=None
        )
        # the other server's method catalogue (its search.methods) means nothing here: the config is a drafter and
        # its method, resolved as a space without search.methods
        space = dataclasses.replace(space, search=dataclasses.replace(space.search, methods={}))
        if portable.drafter is None:
            return dataclasses.replace(space, server=server), TrialConfig.baseline(portable.cuda_graph)
        algo = str(portable.algorithm or "").upper()
        method = _ALGORITHM_TO_METHOD.get(algo) or ("draft_model" if algo == "STANDALONE" else None)
        if method is None or method == "ngram":
            raise ValueError(f"the {portable.source} drafter's algorithm {algo or 'unknown'} has no vLLM method")
        drafters = tuple(
            dataclasses.replace(d, algorithm=method) if d.name == portable.drafter else d for d in space.drafters
        )
        config = TrialConfig.make(
            portable.drafter, portable.cuda_graph, method=method, num_speculative_tokens=int(portable.draft_tokens or 1)
        )
        return dataclasses.replace(space, server=server, drafters=drafters), config

    def schedule_launch(
        self, space: Space, schedule: Mapping[str, Any], argv: list[str], *, files_dir: str | None
    ) -> ScheduledLaunch:
        """The static config's ``--speculative-config`` with ``num_speculative_tokens_per_batch_size``
        (``batch_ranges``); speculation off at every level: no ``--speculative-config``."""
        out = list(argv)
        if "--speculative-config" not in out:
            return ScheduledLaunch(out, {}, None)
        i = out.index("--speculative-config")
        if not schedule["on_up_to"]:
            del out[i : i + 2]
            return ScheduledLaunch(out, {}, "speculation loses at every level: launched without --speculative-config")
        if version_lacks(space.server.version, PER_BATCH_SIZE_SINCE):
            raise ValueError(
                "a per-load-level schedule is launched with --speculative-config "
                f"num_speculative_tokens_per_batch_size, which needs vLLM {PER_BATCH_SIZE_SINCE} or newer; "
                f"server.version is {space.server.version}"
            )
        spec = json.loads(out[i + 1])
        ks = [int(x["draft"]) for x in schedule["levels"]]
        spec["num_speculative_tokens"] = max(ks)
        spec["num_speculative_tokens_per_batch_size"] = batch_ranges(schedule)
        out[i + 1] = json.dumps(spec, sort_keys=True)
        return ScheduledLaunch(out, {}, "--speculative-config num_speculative_tokens_per_batch_size: the schedule")

    def algorithm_flag(self, algorithm: str) -> str:
        return f'--speculative-config \'{{"method": "{algorithm.lower()}", ...}}\''

    def read_effective(self, server_info: dict[str, Any]) -> dict[str, Any]:
        return {"version": server_info.get("version")}

    def acceptance_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
        """1 + accepted/drafts over the counters' deltas; None when no draft was made or counters are missing."""
        accepted = _delta(before, after, ACCEPTED)
        drafts = _delta(before, after, DRAFTS)
        if accepted is None or drafts is None or drafts <= 0 or accepted < 0:
            return None
        return 1.0 + accepted / drafts

    def positions_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> AcceptPositions | None:
        """Per-position acceptance over the deltas of ``ACCEPTED_PER_POS`` and ``DRAFTS`` (``per_position_deltas``)."""
        got = per_position_deltas(before, after, ACCEPTED_PER_POS, DRAFTS, POSITION_LABEL)
        return None if got is None else AcceptPositions(*got)


def _delta(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float | None:
    a = metric_total(after, name)
    if a is None:
        return None
    b = metric_total(before, name) or 0.0
    return a - b

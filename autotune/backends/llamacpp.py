"""llama.cpp ``llama-server``: draft-model speculative decoding (``--spec-type draft-simple`` and friends).

Knobs: ``spec_type`` (``draft-simple``, ``draft-eagle3``, ...; the baseline is drafter "none"), ``draft_n_max``
(tokens drafted per step, >= 1), ``draft_n_min`` (a shorter draft is discarded, 0..n_max), ``draft_p_min`` (drafting
stops below this greedy probability, 0..1). Server defaults (0.3.36): draft-simple, 3, 0, 0.0; configs and argv
always carry all four. Rules read from llama.cpp's source:

- ``-md`` alone does NOT speculate: a plain llama drafter needs ``--spec-type draft-simple``; we always pass
  the type with a drafter.
- Flag spelling changed: newer builds have ``--spec-draft-n-max/--spec-draft-n-min/--spec-draft-p-min``,
  ``--spec-type`` and ``--spec-draft-model``; they still list ``--draft-max``/``--draft-min`` in ``--help`` but
  as "the argument has been removed" (exit 1). Older releases know only ``--draft-max``, ``--draft-min``,
  ``--draft-p-min``, ``-md/--model-draft`` and speculate whenever a draft model is given; so do those in between
  (0.3.2x: ``--spec-type`` takes model-free types only): there draft-simple is ``-md`` alone (``spec_type_args``).
  ``probe`` reads ``<server> --help`` once per binary (``probe_before_argv``); unprobed, argv uses ``NEW_SPELLING``.
- CUDA graphs have no flag: ``GGML_CUDA_DISABLE_GRAPHS=1`` turns them off (CUDA builds only).
- ``/props`` reports ``speculative.types: none`` even while speculating: ``check_effective`` ignores it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune import checks
from autotune.backends import streams
from autotune.backends.base import Backend, Portable
from autotune.backends.llamacpp_methods import (
    METHODS,
    NEW_SPELLING,
    LlamaMethods,
    _fmt,
    cached_server_path,
    find_llama_server,
    flag_spelling,
    help_flags,
    help_spec_types,
    spec_type_args,
)
from autotune.backends.methods import cut_name, feasible, nearest, spec_values, suggest_drafter, suggest_int
from autotune.backends.streams import (
    ChunkInfo,
    _float_or_none,
    _int_or_none,
    accept_length,
    metrics_delta,
    parse_openai_chunk,
    timings_accept_length,
)
from autotune.config import EffectiveConfig, KnobValue, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.servers import KnobDomain
from autotune.space import FloatRange

if TYPE_CHECKING:
    import optuna

    from autotune.acceptance import AcceptPositions
    from autotune.checks import Problem
    from autotune.space import Space

KNOB_DOMAINS = {
    "spec_type": KnobDomain("str"),
    "draft_n_max": KnobDomain("int", 1),
    "draft_n_min": KnobDomain("int", 0),
    "draft_p_min": KnobDomain("float", 0.0, 1.0),
}
KNOBS = tuple(KNOB_DOMAINS)

#: the server's defaults for the draft knobs (common/common.h of the targeted release)
DEFAULT_SPEC_TYPE = "draft-simple"
DEFAULT_N_MAX = 3
DEFAULT_N_MIN = 0

#: speculative types that run a draft model (``-md``); the others (ngram-*) need none
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SPEC_TYPES = DRAFT_MODEL_TYPES + NGRAM_TYPES


#: ``probe``'s findings by binary (real path, modification time): flag spelling, listed spec types, every flag
_SPELLING_CACHE: dict[tuple[str, float], tuple[dict[str, str | None], tuple[str, ...] | None, set[str]]] = {}


# -- a flat space's values (no ``search.methods``): its ``draft_p_min`` values and its grid, every feasible config
# (``Backend.grid``: the design, the surrogate's picks, the settled stop and confirmation thinning use it)

#: the server's default draft_p_min (common/common.h of the targeted release)
DEFAULT_P_MIN = 0.0


def p_min_values(space: Space) -> list[float] | None:
    """The space's draft_p_min values in [0, 1] (the server default when not searched); None for a float range."""
    spec = space.search.knobs.get("draft_p_min")
    if spec is None:
        return [DEFAULT_P_MIN]
    if isinstance(spec, FloatRange):
        return None
    return [float(v) for v in spec_values(spec) or [] if 0.0 <= float(v) <= 1.0]


def nearest_p_min(space: Space) -> float | None:
    """The space's draft_p_min nearest the server's default (None: no value of the space lies in [0, 1])."""
    spec = space.search.knobs.get("draft_p_min")
    if isinstance(spec, FloatRange):
        return min(max(DEFAULT_P_MIN, spec.low, 0.0), spec.high, 1.0)
    values = p_min_values(space) or []
    return min(values, key=lambda v: (abs(v - DEFAULT_P_MIN), v)) if values else None


def flat_grid(backend: LlamaCppBackend, space: Space) -> list[TrialConfig] | None:
    """drafter x CUDA graphs x spec_type x draft_n_max x draft_n_min (<= n_max) x draft_p_min, in that nested order,
    each resolved as ``suggest`` would draw it (duplicates once). None when ``draft_p_min`` is a float range (not a
    finite grid: left to the sampler)."""
    p_values = p_min_values(space)
    if p_values is None:
        return None
    points = (
        (drafter, bool(cg), spec_type, n_max, n_min, p_min)
        for drafter in space.searched_drafters()
        for cg in space.search.cuda_graph
        for spec_type in backend._type_values(space, drafter)
        for n_max in backend._n_max_values(space)
        for n_min in backend._n_min_values(space, n_max)
        for p_min in p_values
    )
    configs = (
        TrialConfig.make(drafter, cg, spec_type=spec_type, draft_n_max=n_max, draft_n_min=n_min, draft_p_min=p_min)
        for drafter, cg, spec_type, n_max, n_min, p_min in points
    )
    return list({eff.key(): eff for eff in feasible(backend.resolve, configs, space)}.values())


class LlamaCppBackend(Backend):
    """``llama-server``. ``spelling`` fixes the flag names (e.g. ``flag_spelling(recorded_help)``); when None,
    ``probe`` learns them, and until then argv uses ``NEW_SPELLING``."""

    name = "llamacpp"
    info_path = "/props"
    positions_from_metrics_deltas = True  # the per-position counter (``positions_from_metrics``)
    knob_names = KNOBS
    knob_domains = KNOB_DOMAINS
    methods = METHODS
    managed_flags = ("--spec-*", "--draft-*", "--port", "--host", "-m", "--model", "-md", "--model-draft")
    size_knob = "draft_n_max"
    images = ("ghcr.io/ggml-org/llama.cpp:server-cuda", "ghcr.io/ggml-org/llama.cpp:server-cuda")
    #: llama.cpp's .devops/cuda.Dockerfile, target server: ``ENTRYPOINT [ "/app/llama-server" ]``, the binary only
    #: there (not on PATH as ``llama-server``)
    image_entrypoint = ("/app/llama-server",)
    schedule_knob = "draft_n_max"  # the longest draft
    schedule_static_knobs = ("spec_type",)
    probe_before_argv = True  # the flag names changed between builds of one release: no version tells them
    display_name = "llama.cpp"
    #: llama.cpp captures a CUDA graph the first time it meets a batch shape: one untimed pass of the prompts is
    #: enough, more did no better (docs/gpu-runs/2026-12-04-h200-warmup24)
    warmup_passes = 1
    # draft_p_min can stop every draft: one config's zero acceptance says nothing about the drafter's others
    not_engaged_is_per_drafter = False
    not_engaged_hint = (
        "check --spec-type, the draft model (same vocabulary as the target) and draft_p_min (a high value stops drafts)"
    )

    def __init__(self, spelling: Mapping[str, str | None] | None = None) -> None:
        self.spelling: dict[str, str | None] | None = dict(spelling) if spelling is not None else None
        #: the ``--spec-type`` values and the flags the probed binary lists (None: not probed)
        self.spec_types: tuple[str, ...] | None = None
        self.help_flags: set[str] | None = None
        #: spaces with ``search.methods`` (``autotune.backends.llamacpp_methods``)
        self.tree: LlamaMethods = LlamaMethods()

    # -- the space ----------------------------------------------------------------------------------

    def _default_type(self, space: Space, drafter: str) -> str:
        try:
            forced = space.drafter(drafter).algorithm
        except KeyError:
            forced = None
        return str(forced).lower() if forced else DEFAULT_SPEC_TYPE

    def _type_values(self, space: Space, drafter: str) -> list[str]:
        values = spec_values(space.search.knobs.get("spec_type"))
        if values is None:
            return [self._default_type(space, drafter)]
        return [str(v) for v in values if str(v) in SPEC_TYPES]

    def _n_max_values(self, space: Space) -> list[int]:
        values = spec_values(space.search.knobs.get("draft_n_max"))
        if values is None:
            return [DEFAULT_N_MAX]
        return [int(v) for v in values if int(v) >= 1]

    def _n_min_values(self, space: Space, n_max: int) -> list[int]:
        values = spec_values(space.search.knobs.get("draft_n_min"))
        if values is None:
            return [min(DEFAULT_N_MIN, n_max)]
        return [int(v) for v in values if 0 <= int(v) <= n_max]

    def _n_min_name(self, space: Space, n_max: int) -> str:
        full = spec_values(space.search.knobs.get("draft_n_min"))
        return cut_name("draft_n_min", self._n_min_values(space, n_max), full, f"le{n_max}")

    def _suggest_p_min(self, trial: optuna.trial.BaseTrial, space: Space) -> float:
        spec = space.search.knobs.get("draft_p_min")
        if spec is None:
            return DEFAULT_P_MIN
        if isinstance(spec, FloatRange):
            low, high = max(0.0, float(spec.low)), min(1.0, float(spec.high))
            if low > high:
                raise InfeasibleConfig(f"draft_p_min range [{spec.low}, {spec.high}] lies outside [0, 1]")
            if (low, high) == (float(spec.low), float(spec.high)):
                return float(trial.suggest_float("draft_p_min", low, high, log=spec.log))
            return float(trial.suggest_float("draft_p_min_01", low, high, log=spec.log and low > 0))
        values = p_min_values(space) or []
        if not values:
            raise InfeasibleConfig("no draft_p_min value of the space lies in [0, 1]")
        return float(trial.suggest_categorical("draft_p_min", values))

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        """``spec_type`` is searched only when the space lists it (else the drafter's forced ``algorithm`` or
        draft-simple); ``draft_n_min`` is drawn among values <= ``draft_n_max`` (``draft_n_min_le{N}`` when that cuts
        the space's list)."""
        if space.search.methods:
            return self.tree.suggest(trial, space)
        drafter, cuda_graph = suggest_drafter(trial, space)
        types = self._type_values(space, drafter)
        if not types:
            raise InfeasibleConfig(f"no spec_type of the space is one of {list(SPEC_TYPES)}")
        if "spec_type" in space.search.knobs:
            spec_type = str(trial.suggest_categorical("spec_type", types))
        else:
            spec_type = types[0]
        n_max_allowed = self._n_max_values(space)
        if not n_max_allowed:
            raise InfeasibleConfig("no draft_n_max value of the space is at least 1")
        n_max = suggest_int(trial, "draft_n_max", space.search.knobs.get("draft_n_max"), n_max_allowed)
        n_min_allowed = self._n_min_values(space, n_max)
        if not n_min_allowed:
            raise InfeasibleConfig(f"no draft_n_min value of the space lies in [0, draft_n_max={n_max}]")
        n_min = suggest_int(trial, self._n_min_name(space, n_max), space.search.knobs.get("draft_n_min"), n_min_allowed)
        p_min = self._suggest_p_min(trial, space)
        return TrialConfig.make(
            drafter, cuda_graph, spec_type=spec_type, draft_n_max=n_max, draft_n_min=n_min, draft_p_min=p_min
        )

    def params(self, config: TrialConfig, space: Space) -> dict[str, KnobValue | None]:
        if config.is_baseline:
            return {"drafter": "none", "cuda_graph": bool(config.cuda_graph)}
        if space.search.methods:
            return self.tree.params(self.resolve(config, space), space)
        eff = self.resolve(config, space)
        out: dict[str, KnobValue | None] = {"drafter": eff.drafter, "cuda_graph": bool(eff.cuda_graph)}
        knobs = space.search.knobs
        if "spec_type" in knobs:
            out["spec_type"] = eff.knob("spec_type")
        n_max = int(eff.knob("draft_n_max"))
        if "draft_n_max" in knobs:
            out["draft_n_max"] = n_max
        if "draft_n_min" in knobs:
            out[self._n_min_name(space, n_max)] = int(eff.knob("draft_n_min"))
        spec = knobs.get("draft_p_min")
        if spec is not None:
            clipped = isinstance(spec, FloatRange) and (max(0.0, spec.low), min(1.0, spec.high)) != (
                spec.low,
                spec.high,
            )
            out["draft_p_min_01" if clipped else "draft_p_min"] = float(eff.knob("draft_p_min"))
        return out

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        """All four knobs filled in (server defaults for the missing ones), or InfeasibleConfig."""
        if config.is_baseline:
            if config.knobs:
                raise InfeasibleConfig(f"a baseline takes no knobs but got {config.knob_dict}")
            return EffectiveConfig.baseline(config.cuda_graph)
        if space.search.methods:
            return self.tree.resolve(config, space)
        self.require_known(config, space)
        spec_type = str(config.knob("spec_type") or self._default_type(space, config.drafter or "")).lower()
        if spec_type == "none":
            raise InfeasibleConfig("spec_type 'none' with a drafter: the baseline is drafter 'none'")
        if spec_type not in SPEC_TYPES:
            raise InfeasibleConfig(f"spec_type must be one of {list(SPEC_TYPES)} but got {spec_type!r}")
        n_max = _int_or_none(config.knob("draft_n_max", DEFAULT_N_MAX))
        n_min = _int_or_none(config.knob("draft_n_min", DEFAULT_N_MIN))
        p_min = _float_or_none(config.knob("draft_p_min", DEFAULT_P_MIN))
        if n_max is None or n_max < 1:
            raise InfeasibleConfig(f"draft_n_max must be at least 1 but got {config.knob('draft_n_max')!r}")
        if n_min is None or n_min < 0:
            raise InfeasibleConfig(f"draft_n_min must be at least 0 but got {config.knob('draft_n_min')!r}")
        if n_min > n_max:
            raise InfeasibleConfig(f"draft_n_min ({n_min}) must not exceed draft_n_max ({n_max})")
        if p_min is None or not 0.0 <= p_min <= 1.0:
            raise InfeasibleConfig(f"draft_p_min must be in [0, 1] but got {config.knob('draft_p_min')!r}")
        return EffectiveConfig.make(
            config.drafter,
            config.cuda_graph,
            spec_type=spec_type,
            draft_n_max=n_max,
            draft_n_min=n_min,
            draft_p_min=p_min,
        )

    def defaults(self, space: Space) -> list[TrialConfig]:
        """The server's defaults (n_max 3, n_min 0, p_min 0.0) per drafter, moved to the nearest point of the space
        (in a method space: each method's server defaults per drafter)."""
        if space.search.methods:
            return self.tree.defaults(space)
        n_max_allowed = self._n_max_values(space)
        n_max = nearest(n_max_allowed, DEFAULT_N_MAX)
        n_min_allowed = self._n_min_values(space, n_max) if n_max_allowed else []
        p_min = nearest_p_min(space)
        if not n_min_allowed or p_min is None:
            return []
        knobs = {"draft_n_max": n_max, "draft_n_min": nearest(n_min_allowed, DEFAULT_N_MIN), "draft_p_min": p_min}
        configs = []
        for name in space.searched_drafters():
            types = self._type_values(space, name)
            if types:
                spec_type = DEFAULT_SPEC_TYPE if DEFAULT_SPEC_TYPE in types else types[0]
                configs.append(TrialConfig.make(name, any(space.search.cuda_graph), spec_type=spec_type, **knobs))
        return feasible(self.resolve, configs, space)

    def grid(self, space: Space) -> list[TrialConfig] | None:
        """A method space's every feasible point (``LlamaMethods.grid``), else the flat space's (``flat_grid``)."""
        return self.tree.grid(space) if space.search.methods else flat_grid(self, space)

    # -- launching ----------------------------------------------------------------------------------

    deploy_launcher = ("llama-server",)

    def launcher(self, space: Space, *, deploy: bool = False) -> list[str]:
        """``server.launcher``, else ``find_llama_server()``, else (and with ``deploy``) plain ``llama-server``."""
        if space.server.launcher or deploy:
            return super().launcher(space, deploy=deploy)
        return [find_llama_server() or "llama-server"]

    install_hint = (
        "Build it once with scripts/llamacpp_setup.sh (cached outside the repository), put llama-server on PATH, "
        "or name the binary in $AUTOTUNE_LLAMA_SERVER or the space's server.launcher"
    )

    def launcher_problem(self, space: Space) -> str | None:
        """As ``Backend.launcher_problem``; without ``server.launcher``, every place ``find_llama_server`` looked."""
        problem = super().launcher_problem(space)
        if problem is None or space.server.launcher:
            return problem
        env = os.environ.get("AUTOTUNE_LLAMA_SERVER")
        cached = cached_server_path()
        path = space.server.env.get("PATH") or os.environ.get("PATH") or os.defpath
        looked = [
            f"$AUTOTUNE_LLAMA_SERVER ({env}: not an executable file)" if env else "$AUTOTUNE_LLAMA_SERVER (not set)",
            f"llama-server on PATH ({path})",
            f"the setup script's build ({cached}: {'not executable' if cached.exists() else 'absent'})",
        ]
        where = "; ".join(looked)
        return f"llama.cpp's llama-server was not found on this machine: looked at {where}. {self.install_hint}"

    def probe(self, space: Space, *, timeout_s: float = 60.0) -> None:
        """Learn the flag spelling from ``<server> --help`` (cached per binary; keeps NEW_SPELLING on failure)."""
        if self.spelling is not None:
            return
        launcher = self.launcher(space)
        exe = shutil.which(launcher[0]) or launcher[0]
        try:
            key = (os.path.realpath(exe), os.stat(exe).st_mtime)
        except OSError:
            return
        cached = _SPELLING_CACHE.get(key)
        if cached is None:
            try:
                proc = subprocess.run(
                    [*launcher, "--help"],
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=timeout_s,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
            except (OSError, subprocess.TimeoutExpired):
                return
            text = proc.stdout + proc.stderr
            cached = (flag_spelling(text), help_spec_types(text), help_flags(text))
            _SPELLING_CACHE[key] = cached
        self.spelling = dict(cached[0])
        self.spec_types, self.help_flags = cached[1], set(cached[2])

    def spelling_for(self) -> dict[str, str | None]:
        """The flag names argv uses: the given or probed ones, else ``NEW_SPELLING`` (never probes itself)."""
        return dict(self.spelling) if self.spelling is not None else dict(NEW_SPELLING)

    @staticmethod
    def context_size(space: Space) -> int:
        """A context that fits the longest prompt plus ``max_tokens`` (each token covers at least one byte) in
        every slot: llama-server splits its context evenly between its ``-np`` slots."""
        longest = max((len(p.text.encode("utf-8")) for p in space.benchmark.prompts), default=0)
        need = longest + int(space.benchmark.max_tokens) + 64
        return max(2048, -(-need // 256) * 256) * LlamaCppBackend.slots(space)

    @staticmethod
    def slots(space: Space) -> int:
        """Parallel slots: the highest load level (1 without levels)."""
        return max(space.benchmark.concurrency)

    @staticmethod
    def threads() -> int:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)

    def argv(
        self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False, files_dir: str | None = None
    ) -> list[str]:
        eff = self.effective(config, space)
        server = space.server
        flags = self.spelling_for()
        extra = [str(a) for a in server.extra_args]

        def given(*names: str) -> bool:
            return any(a == n or a.startswith(n + "=") for a in extra for n in names)

        argv = [*self.launcher(space), "-m", server.model_path, "--host", server.host, "--port", str(int(port))]
        argv.append("--metrics")
        if not given("-c", "--ctx-size"):
            argv += ["-c", str(self.context_size(space))]
        if not given("-t", "--threads"):
            argv += ["-t", str(self.threads())]
        if flags.get("parallel") and not given("-np", "--parallel"):
            # one slot per stream of the highest load level (one without levels: the benchmark is single-stream)
            argv += [str(flags["parallel"]), str(self.slots(space))]
        if flags.get("no_webui") and not given("--no-webui", "--no-ui", "--webui"):
            argv.append(str(flags["no_webui"]))
        if not eff.is_baseline and space.search.methods:
            argv += self.tree.argv(eff, space, flags, self.spec_types, self.help_flags)
        elif not eff.is_baseline:
            argv += self._draft_args(eff, space, flags)
        argv += extra
        return [str(a) for a in argv]

    def _draft_args(self, eff: TrialConfig, space: Space, flags: Mapping[str, str | None]) -> list[str]:
        """The speculative flags of effective config ``eff``: type, draft model, n_max / n_min / p_min (the type as
        the probed binary's ``--spec-type`` takes it: ``spec_type_args``)."""
        drafter = space.drafter(eff.drafter or "")
        spec_type = str(eff.knob("spec_type"))
        out = spec_type_args(spec_type, flags.get("spec_type"), self.spec_types, DRAFT_MODEL_TYPES, DEFAULT_SPEC_TYPE)
        if spec_type in DRAFT_MODEL_TYPES:
            out += [str(flags.get("draft_model") or "-md"), drafter.path]
        for knob in ("draft_n_max", "draft_n_min", "draft_p_min"):
            flag = flags.get(knob)
            if flag is None:
                raise InfeasibleConfig(f"this llama-server has no flag for {knob}")
            out += [str(flag), _fmt(eff.knob(knob))]
        return out

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        out = dict(space.server.env)
        if not config.cuda_graph:
            out["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        return out

    # -- deploying ----------------------------------------------------------------------------------

    #: drafters and targets are GGUF files: no other server here loads them as its checkpoints
    portable_checkpoints = False

    def deploy_method(self, config: TrialConfig, space: Space) -> str | None:
        """``--spec-type`` of the config (None for the baseline; a method space's method is its type list)."""
        if config.is_baseline:
            return None
        eff = self.effective(config, space)
        return str(eff.knob("method") if space.search.methods else eff.knob("spec_type"))

    def checks_engagement(self, config: TrialConfig) -> bool:
        """Not for model-free types alone (``llamacpp_methods.LlamaMethods.checks_engagement``)."""
        return config.knob("method") is None or self.tree.checks_engagement(config)

    def portable(self, config: TrialConfig, space: Space) -> Portable:
        raise ValueError(
            "llama.cpp's target and drafters are GGUF files, which no other server loads as its checkpoints"
        )

    def check_drafters(self, space: Space) -> list[Problem]:
        """Drafters are GGUF files: each must exist (no checkpoint config to compare)."""
        return checks.check_model_files(space)

    # -- reading ------------------------------------------------------------------------------------

    def read_effective(self, server_info: dict[str, Any]) -> dict[str, Any]:
        """From ``/props``: model path, slots, context, build, and the (unreliable) reported spec types."""
        dgs = server_info.get("default_generation_settings")
        dgs = dgs if isinstance(dgs, Mapping) else {}
        params = dgs.get("params")
        params = params if isinstance(params, Mapping) else {}
        out: dict[str, Any] = {
            "model_path": server_info.get("model_path"),
            "total_slots": _int_or_none(server_info.get("total_slots")),
            "n_ctx": _int_or_none(dgs.get("n_ctx")),
            "build_info": server_info.get("build_info"),
            "reported_spec_types": params.get("speculative.types"),
        }
        for knob, key in (
            ("draft_n_max", "speculative.n_max"),
            ("draft_n_min", "speculative.n_min"),
            ("draft_p_min", "speculative.p_min"),
        ):
            if key in params:
                out[knob] = _float_or_none(params[key]) if knob == "draft_p_min" else _int_or_none(params[key])
        return out

    def check_effective(self, config: TrialConfig, effective: Mapping[str, Any]) -> list[str]:
        """Knob values the server reports that differ from what we launched (spec types are not compared:
        ``/props`` reports ``none`` while speculating)."""
        if config.is_baseline:
            return []
        problems: list[str] = []
        for knob in ("draft_n_max", "draft_n_min", "draft_p_min"):
            got, launched = effective.get(knob), config.knob(knob)
            if got is None or launched is None:
                continue
            if abs(float(got) - float(launched)) > 1e-4 if knob == "draft_p_min" else int(got) != int(launched):
                problems.append(f"{knob}: launched {launched}, server runs {got}")
        return problems

    # -- benchmark requests -------------------------------------------------------------------------

    #: the OpenAI requests with ``cache_prompt: false``, so that repeated prompts are measured alike
    body_extra = {"cache_prompt": False}
    #: llama.cpp's completions endpoint then answers with a ``logprobs.content`` list of tokens, raw bytes and
    #: ``top_logprobs``
    top_n_field = "n_probs"

    def parse_chunk(self, obj: Mapping[str, object]) -> ChunkInfo:
        """An OpenAI chunk; a chunk carrying ``timings`` (llama.cpp's last ones) also gives the acceptance length."""
        info = parse_openai_chunk(obj)
        timings = obj.get("timings")
        if info.error is not None or not isinstance(timings, Mapping):
            return info
        length = timings_accept_length(timings)
        return info if length is None else dataclasses.replace(info, accept_length=length)

    def acceptance_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
        """Tokens per target forward pass between two /metrics scrapes (see the module docstring)."""
        d = metrics_delta(before, after)
        if not d.drafts:
            return None
        if d.predicted:
            length = accept_length(int(d.predicted), int(d.accepted))
            if length is not None:
                return length
        return 1.0 + d.accepted / d.drafts

    def positions_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> AcceptPositions | None:
        return streams.metrics_positions(before, after)  # the per-draft-position counter, where reported

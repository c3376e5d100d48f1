"""What a server backend is: one module per server (SGLang, llama.cpp, vLLM).

A backend knows its knobs and their rules (``suggest`` encodes the conditional space for Optuna so that configs the
server would reject or rewrite are unreachable; ``resolve`` returns the effective config the server will run or
raises InfeasibleConfig), how to launch it (``argv``, ``env``, ``files``; ``probe`` is an explicit step, ``argv``
never runs anything), how to read it (resolved settings, acceptance from the stream and /metrics), how to talk to it
for a benchmark (``request``, ``chunk_parser``), and how to deploy it (``autotune.export``: images, the schedule knob,
the export format named after it). The defaults speak the OpenAI API (SSE, usage via
``stream_options.include_usage``), which every supported server offers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NotRequired, TypedDict

from autotune import checks
from autotune.acceptance import AcceptPositions
from autotune.backends.methods import MethodWalk
from autotune.backends.streams import ChunkInfo, ChunkParser, parse_openai_chunk, parse_openai_logprobs
from autotune.config import EffectiveConfig, KnobValue, ReferenceOutput, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.servers import KnobDomain, Method

if TYPE_CHECKING:
    import optuna

    from autotune.checks import Problem
    from autotune.space import Prompt, Space

#: the drafter algorithms a space file may force (``drafters[].algorithm``) when the backend names none of its own:
#: the checkpoint families ``autotune.checks`` tells apart (NEXTN: EAGLE for MTP layers; STANDALONE: a draft model)
DRAFTER_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


@dataclass(frozen=True)
class Portable:
    """A config in server-neutral terms (``Backend.portable``): what another server's export needs to run the same
    drafter the same way."""

    drafter: str | None  # None: the baseline
    cuda_graph: bool
    algorithm: str | None = None  # the checkpoint's family (EAGLE3, EAGLE, NEXTN, STANDALONE, NGRAM)
    draft_tokens: int | None = None  # tokens drafted per step, as a chain
    settings: Mapping[str, str | bool] = field(default_factory=dict)  # server.extra_args as neutral settings
    source: str = ""  # the server it was measured on (display name)


@dataclass(frozen=True)
class ScheduledLaunch:
    """A per-level schedule as a launch (``Backend.schedule_launch``)."""

    argv: list[str]
    files: dict[str, str]
    note: str | None = None


class Backend(ABC):
    name: str = ""
    health_path: str = "/health"
    #: the endpoint returning the settings as the server resolved them (None: the server has none)
    info_path: str | None = None
    #: tried when ``info_path`` answers 404 (deprecated aliases)
    info_fallback_paths: tuple[str, ...] = ()
    metrics_path: str | None = "/metrics"
    #: True when acceptance is only available from /metrics deltas around each request (vLLM)
    acceptance_from_metrics_deltas: bool = False
    #: True when the per-position counts come from /metrics deltas around each request alone (llama-server):
    #: scraped for one stream only, never between concurrent requests (their windows would overlap)
    positions_from_metrics_deltas: bool = False
    #: a drafter found not engaged (acceptance ~1.0) is so in every config of this server (a wrong algorithm flag,
    #: a drafter/target mismatch): its other configs are not launched. False where a knob can cause it.
    not_engaged_is_per_drafter: bool = True
    #: what to check when a drafter is not engaged (completes "the drafter is not engaged; ...")
    not_engaged_hint: str = "check that the drafter was trained for this target and the speculative settings"
    #: knob names a space may search over (besides ``drafter`` and ``cuda_graph``), in the order of ``knob_domains``
    knob_names: tuple[str, ...] = ()
    #: each knob's values in a space file (``search.<knob>``)
    knob_domains: ClassVar[Mapping[str, KnobDomain]] = {}
    #: the speculative methods a space may search (``search.methods``; ``autotune.backends.methods``); empty: none
    methods: ClassVar[Mapping[str, Method]] = {}
    #: flags autotune sets itself (``--spec-*``: every flag starting so); in ``server.extra_args`` they would fight the
    #: search, so the space validator refuses them
    managed_flags: tuple[str, ...] = ()
    #: the knob whose larger values need more memory: after an out-of-memory startup, configs of the same drafter
    #: and CUDA-graph setting with at least that value are not launched; None: no such knob
    size_knob: str | None = None
    #: True when ``argv`` for a real server depends on what ``probe`` learns whatever ``server.version`` says
    #: (llama.cpp renamed flags between builds): whoever builds it for a real server calls ``probe`` first. False:
    #: ``server.version`` decides and ``probe`` only stands in for an unknown version (SGLang).
    probe_before_argv: bool = False
    #: the server's name in messages ("SGLang", "llama.cpp", "vLLM")
    display_name: str = ""
    #: flags of ``server.extra_args`` whose values multiply into the GPUs one server needs (tensor and pipeline
    #: parallel sizes; ``autotune.slots.gpus_needed``); none: one GPU
    parallel_size_flags: tuple[str, ...] = ()

    @abstractmethod
    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        """Ask Optuna for one config of ``space``. Baseline is drafter "none"."""

    @abstractmethod
    def params(self, config: TrialConfig, space: Space) -> dict[str, KnobValue | None]:
        """The Optuna params ``suggest`` would produce for ``config`` (for ``study.enqueue_trial``)."""

    @abstractmethod
    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        """The effective config the server would run. Raises InfeasibleConfig for configs it would reject."""

    def effective(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        """``config`` when it is already resolved, else ``resolve(config, space)``."""
        return config if isinstance(config, EffectiveConfig) else self.resolve(config, space)

    #: untimed passes of the prompts a start gets when ``benchmark.warmup_passes`` is not given (``autotune.warmup``):
    #: 0 for servers that capture their CUDA graphs at start-up
    warmup_passes: int = 0

    #: flags sized from the highest load level (``benchmark.concurrency``): each gets that level unless
    #: ``server.extra_args`` gives it; a given value below the level is an error (``level_flag_problems``)
    level_flags: tuple[str, ...] = ()

    def level_args(self, space: Space) -> list[str]:
        """``flag N`` for each of ``level_flags`` not in ``server.extra_args`` (N: the highest load level); []
        without load levels."""
        if not space.benchmark.loaded:
            return []
        top = str(max(space.benchmark.concurrency))
        out: list[str] = []
        for flag in self.level_flags:
            if flag_value(space.server.extra_args, flag) is None:
                out += [flag, top]
        return out

    @classmethod
    def level_flag_problems(cls, extra_args: tuple[str, ...], top: int) -> list[str]:
        """Values in ``extra_args`` of ``level_flags`` that do not cover ``top`` streams at once."""
        out = []
        for flag in cls.level_flags:
            v = flag_value(extra_args, flag)
            if v is None:
                continue
            try:
                ok = int(v) >= top
            except ValueError:
                ok = False
            if not ok:
                out.append(f"{flag} {v} does not cover the highest load level {top} (benchmark.concurrency)")
        return out

    @abstractmethod
    def argv(
        self, config: TrialConfig, space: Space, *, port: int, simulate: bool = False, files_dir: str | None = None
    ) -> list[str]:
        """The launch command as an argv list (never a shell string). Pure: it never runs anything (``probe``).
        ``files_dir``: the folder ``files`` are written to (None: argv names them bare, relative to the server's
        working directory; see ``file_arg``)."""

    def files(self, config: TrialConfig, space: Space) -> dict[str, str]:
        """Files the server reads at launch (relative name -> text), e.g. a speculative config file; written into
        the launch's folder before it starts (``ProcessRunner``), and beside an export written with ``-o``."""
        return {}

    @staticmethod
    def file_arg(name: str, files_dir: str | None) -> str:
        """How argv names file ``name`` of ``files`` written to ``files_dir``."""
        return f"{files_dir.rstrip('/')}/{name}" if files_dir else name

    @classmethod
    def sets_flag(cls, arg: str) -> bool:
        """Whether ``arg`` (an item of ``server.extra_args``) is one of the ``managed_flags`` (``--flag`` or
        ``--flag=value``; ``--prefix-*`` matches every flag starting with ``--prefix-``)."""
        for flag in cls.managed_flags:
            if flag.endswith("*"):
                if arg.startswith(flag[:-1]):
                    return True
            elif arg == flag or arg.startswith(flag + "="):
                return True
        return False

    def require_known(self, config: TrialConfig, space: Space) -> None:
        """A speculative config names a drafter of the space and only this backend's knobs (else InfeasibleConfig)."""
        try:
            space.drafter(config.drafter or "")
        except KeyError:
            raise InfeasibleConfig(f"drafter {config.drafter!r} is not in the space") from None
        unknown = sorted(set(config.knob_dict) - set(self.knob_names))
        if unknown:
            raise InfeasibleConfig(
                f"unknown {self.display_name or self.name} knobs {unknown}; expected some of {list(self.knob_names)}"
            )

    #: the command that starts this server on a deployment host when the space names no ``server.launcher``
    #: (``export``): never this machine's own paths (its interpreter, a cached build)
    deploy_launcher: tuple[str, ...] = ()

    def launcher(self, space: Space, *, deploy: bool = False) -> list[str]:
        """The argv prefix that starts the server: ``server.launcher``, else this machine's default (with ``deploy``:
        ``deploy_launcher``)."""
        return list(space.server.launcher) or list(self.deploy_launcher)

    #: how to get the server when this machine lacks its launcher (ends ``launcher_problem``'s message)
    install_hint: str = "install the server on this machine, or name its launcher in the space's server.launcher"

    def launcher_problem(self, space: Space) -> str | None:
        """Why this machine cannot start the server (``checks.missing_launcher``, then ``install_hint``), or None.
        Not asked with ``--simulate``, whose launcher is this interpreter. Nothing is run."""
        missing = checks.missing_launcher(self.launcher(space), space.server.env)
        if missing is None:
            return None
        server = self.display_name or self.name
        return f"{server}'s server cannot be started on this machine: {missing}. {self.install_hint}"

    def env(self, config: TrialConfig, space: Space) -> dict[str, str]:
        """Environment variables to set on top of the inherited environment."""
        return dict(space.server.env)

    #: the method tree of spaces with ``search.methods`` (``autotune.backends.methods``); None: no methods
    tree: MethodWalk | None = None

    def defaults(self, space: Space) -> list[TrialConfig]:
        """Configs worth trying first (the server's own defaults), already inside the space. Default: a method
        space's (``tree``), else none."""
        return self.tree.defaults(space) if self.tree is not None and space.search.methods else []

    def grid(self, space: Space) -> list[TrialConfig] | None:
        """Every feasible speculative config of the space (effective, no baselines), or None when the space is
        not a finite grid (a float range) or the backend does not enumerate it (the surrogate-guided last trials
        of the search use it). Default: a method space's (``tree``), else None."""
        return self.tree.grid(space) if self.tree is not None and space.search.methods else None

    def probe(self, space: Space, *, timeout_s: float = 60.0) -> None:  # noqa: B027 - optional hook
        """Optionally learn about the installed server (e.g. flag spelling from ``--help``), for ``argv`` to use;
        nothing else runs the server's help (``probe_before_argv``)."""

    #: the algorithms a drafter of this server's spaces may be forced to (``drafters[].algorithm``)
    drafter_algorithms: tuple[str, ...] = DRAFTER_ALGORITHMS

    def drafter_algorithm(self, space: Space, name: str) -> str | None:
        """The algorithm drafter ``name`` runs with, when known without a server. Default: its forced one."""
        return space.drafter(name).algorithm

    def algorithm_flag(self, algorithm: str) -> str:
        """How a launch with speculative ``algorithm`` (``EAGLE3``...) is spelled, for messages."""
        return f"--speculative-algorithm {algorithm}"

    def check_drafters(self, space: Space) -> list[Problem]:
        """Static checks of the searched drafters against the target, no server. Default: ``check_checkpoints``."""
        return checks.check_checkpoints(space, algorithm_flag=self.algorithm_flag)

    def read_effective(self, server_info: dict[str, Any]) -> dict[str, Any]:
        """Settings as resolved by the server, from its info endpoint's JSON."""
        return {}

    #: keys only ``read_effective``'s output has (not the server's raw info): ``settings`` tells the two apart
    read_keys: tuple[str, ...] = ("cuda_graph",)

    def settings(self, effective: Mapping[str, Any]) -> dict[str, Any]:
        """A launch's ``LaunchInfo.effective`` as ``read_effective`` reads it: a process runner stores it read, an
        in-process runner the server's raw info."""
        if any(k in effective for k in self.read_keys):
            return dict(effective)
        return self.read_effective(dict(effective))

    def check_effective(self, config: TrialConfig, effective: Mapping[str, Any]) -> list[str]:
        """Differences between the config we launched and what the server says it runs (empty: none)."""
        return []

    def checks_engagement(self, config: TrialConfig) -> bool:
        """Whether an acceptance of ~1.0 after the first prompt means ``config``'s drafter is not engaged (a
        misconfiguration: FAIL). False for model-free methods (an n-gram lookup that finds nothing to copy is a
        measured loss, left to the pruner)."""
        return True

    def method_unavailable(self, space: Space, method: str) -> str | None:
        """Why ``method`` of ``space``'s ``search.methods`` cannot run with its target (None: it can, or unknown
        without a server): e.g. MTP on a target without MTP layers. Such a method is not searched; reports say so."""
        return self.tree.unavailable(space, method) if self.tree is not None else None

    # -- deploying ----------------------------------------------------------------------------------

    #: container images for ``autotune export`` (compose, k8s) when ``--image`` is not given: (with
    #: ``server.version``, its ``{version}`` filled in; without one)
    images: tuple[str, str] = ("{version}", "latest")
    #: the entrypoint those images start with, as their Dockerfile sets it: a compose ``command:`` is appended to it,
    #: and it is the Kubernetes container's ``command`` (which replaces it); () when the image has none of its own,
    #: so that the command is the whole launch (``deploy_launcher``)
    image_entrypoint: tuple[str, ...] = ()
    #: the knob that is the draft length of a per-load-level schedule (``autotune.schedule``) and of the ladder
    #: measured after the search (``autotune.study.ladder``); None: no schedule
    schedule_knob: str | None = None
    #: knobs that stay fixed across the levels of a schedule (besides drafter and CUDA graphs)
    schedule_static_knobs: tuple[str, ...] = ()
    #: ``autotune export --format NAME`` named after this server (None: none): its launch command (with load levels
    #: running the schedule: ``schedule_launch``)
    export_format: str | None = None
    #: True: ``export_format`` is this server's launch command, the format a finished study suggests
    export_format_launches: bool = False
    #: whether another server could load this server's checkpoints (False: llama.cpp's GGUF files)
    portable_checkpoints: bool = True
    #: whether ``export_format`` takes another server's study, translated (``translate``) when faithful
    accepts_translation: bool = False

    def deploy_method(self, config: TrialConfig, space: Space) -> str | None:
        """The speculative method ``config`` runs, as this server names it (every export's provenance names it);
        None for the baseline. Default: the drafter's algorithm."""
        if config.is_baseline:
            return None
        return self.drafter_algorithm(space, config.drafter or "")

    def portable(self, config: TrialConfig, space: Space) -> Portable:
        """``config`` in terms another server's export can take (``translate``); ValueError saying why when it has no
        faithful equivalent elsewhere. Default: none."""
        raise ValueError(f"a {self.display_name or self.name} config has no translation to another server")

    def translate(self, space: Space, portable: Portable) -> tuple[Space, TrialConfig]:
        """Another server's study (``portable``) as a space and config of this server, for ``export_format``;
        ValueError when it would not run the same drafter the same way. Default: none."""
        raise ValueError(f"{self.display_name or self.name} takes no other server's study")

    def schedule_launch(
        self, space: Space, schedule: Mapping[str, Any], argv: list[str], *, files_dir: str | None
    ) -> ScheduledLaunch:
        """A per-level schedule (``autotune.schedule.build``) applied to ``argv``, the launch of its static config:
        the argv that runs the schedule, the files it reads (named in argv by ``file_arg(name, files_dir)``) and a
        note for the export. Default: no schedule form, the static config at every level."""
        return ScheduledLaunch(
            list(argv),
            {},
            f"{self.display_name or self.name} takes no per-level schedule: this launches the recommended config "
            "at every level",
        )

    # -- benchmark requests -------------------------------------------------------------------------

    #: fields every OpenAI request body of this server ends with (llama.cpp: ``cache_prompt: false``)
    body_extra: ClassVar[Mapping[str, bool]] = {}
    #: the field of a completions reference request that asks for the top tokens (llama.cpp: ``n_probs``)
    top_n_field: str = "logprobs"

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
        """One streaming request for ``prompt``: (path, JSON body). Default: the OpenAI API. ``request``: the space's
        prompt, whose logged ``top_p``, chat turns (``messages``, for the chat API) and thinking switch are sent as
        logged (``max_tokens`` and ``temperature`` come resolved: the caller's limits apply)."""
        body: dict[str, object] = {
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if model:
            body["model"] = model
        if request is not None and request.top_p is not None:
            body["top_p"] = float(request.top_p)
        if api == "chat":
            return "/v1/chat/completions", {**body, **_chat_turns(prompt, request), **self.body_extra}
        return "/v1/completions", {**body, "prompt": prompt, **self.body_extra}

    def parse_chunk(self, obj: Mapping[str, object]) -> ChunkInfo:
        """Read one streamed JSON chunk of a server launched with its default output settings."""
        return parse_openai_chunk(obj)

    def chunk_parser(self, space: Space) -> ChunkParser:
        """The reader of streamed chunks for servers launched from ``space`` (its ``extra_args`` may change the
        stream's form). Default: ``parse_chunk``."""
        return self.parse_chunk

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
        """One non-streaming temperature-0 request for ``prompt`` that asks for the ``top_n`` most likely tokens at
        every position (the lossless check's reference): (path, JSON body). Default: the OpenAI API. ``request``:
        as ``request``'s, its chat turns and thinking switch (its sampling not: the reference is greedy)."""
        body: dict[str, object] = {"max_tokens": int(max_tokens), "temperature": 0.0, "stream": False}
        if model:
            body["model"] = model
        if api == "chat":
            body.update(_chat_turns(prompt, request), logprobs=True, top_logprobs=int(top_n), **self.body_extra)
            return "/v1/chat/completions", body
        body.update({"prompt": prompt, self.top_n_field: int(top_n), **self.body_extra})
        return "/v1/completions", body

    def parse_reference(self, obj: Mapping[str, object], index: int) -> ReferenceOutput | None:
        """The reference answer in a ``reference_request`` response (None: no log-probabilities in it)."""
        return parse_openai_logprobs(obj, index)

    def acceptance_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
        """Mean acceptance length of the requests between two /metrics scrapes (None: unknown)."""
        return None

    def positions_from_metrics(self, before: Mapping[str, float], after: Mapping[str, float]) -> AcceptPositions | None:
        """Per-position acceptance counts of the requests between two /metrics scrapes (None: none there)."""
        return None


class ChatTurns(TypedDict):
    messages: list[dict[str, str]]
    chat_template_kwargs: NotRequired[dict[str, bool]]


def _chat_turns(prompt: str, request: Prompt | None) -> ChatTurns:
    """The chat API's ``messages`` (a logged request's turns, else ``prompt`` as the one user turn) and its thinking
    switch (``chat_template_kwargs.enable_thinking``) where the request has one."""
    turns = request.messages if request is not None and request.messages else (("user", prompt),)
    out: ChatTurns = {"messages": [{"role": role, "content": content} for role, content in turns]}
    if request is not None and request.thinking is not None:
        out["chat_template_kwargs"] = {"enable_thinking": bool(request.thinking)}
    return out


def flag_value(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The value given to ``flag`` in an argv list (``flag V`` or ``flag=V``; the last one wins), else None."""
    value = None
    items = [str(a) for a in args]
    for i, a in enumerate(items):
        if a == flag and i + 1 < len(items):
            value = items[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1 :]
    return value

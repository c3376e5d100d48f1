"""SGLang's speculative methods and flags: the CUDA-graph flag spelling by release, the method catalogue
(``METHODS``) with its resolution rules, and the method tree over ``search.methods`` (``MethodTree``).

Read from SGLang 0.5.23 (``srt/arg_groups/fields/spec.py``, ``srt/arg_groups/speculative_hook.py``,
``srt/speculative/adaptive_spec_params.py``):

- ``eagle`` / ``eagle3``: ``--speculative-algorithm EAGLE`` / ``EAGLE3`` with an EAGLE head; the tree knobs
  ``num_steps``, ``topk``, ``num_draft_tokens`` under the EAGLE-family rules of ``autotune.backends.sglang`` (all three
  passed, N := S+1 at topk 1, the tree bound). An EAGLE-3 head under ``eagle`` (or an EAGLE head under ``eagle3``) is
  refused: SGLang runs it with accept length ~1.0 and no warning.
- ``mtp``: ``NEXTN`` (an alias of EAGLE), no draft path: SGLang defaults it to the target for MTP architectures
  (``_handle_eagle_family``); any other target, or one whose ``config.json`` has no ``num_nextn_predict_layers``, has
  no MTP layers and the method is not searched (``mtp_unavailable``).
- ``standalone``: ``STANDALONE`` with a small full model as the draft; the same tree knobs (SGLang's auto choice for
  it is (3, 1, 4)).
- ``ngram``: ``NGRAM``, no draft model; ``--speculative-num-draft-tokens`` (SGLang's default 12) and the
  ``--speculative-ngram-*`` knobs. SGLang overwrites topk with the max BFS breadth and derives the steps as
  ``num_draft_tokens // topk`` (``_handle_ngram``): we pass neither and resolve both so.
- ``adaptive``: EAGLE / EAGLE3 (the drafter's own) with ``--speculative-adaptive`` and its config file
  (``--speculative-adaptive-config``, written through the backend's ``files``): the batch-size-1 slot's
  ``candidate_steps`` and hysteresis are the knobs, the other slots SGLang's defaults. SGLang switches adaptive off
  with only a warning for any algorithm but EAGLE/EAGLE3 or a topk other than 1 (``_maybe_disable_adaptive``):
  we always pass topk 1 and refuse any other algorithm, and read ``speculative_adaptive`` back from /server_info.
  The start steps are SGLang's own choice (the middle of the candidate steps' union), passed explicitly.
- ``adaptive-mtp``: the same over ``NEXTN`` (the target's MTP layers, no drafter, available where ``mtp`` is).
  SGLang resolves NEXTN to EAGLE (``speculative_hook._resolve_speculative_algorithm_alias``) before it asks
  ``adaptive_spec_params.adaptive_unsupported_reason``, so adaptive stays on.

Optuna params: ``method``, ``cuda_graph``, ``METHOD.drafter``, ``METHOD.KNOB`` (cut names prefixed by the method),
through ``autotune.backends.methods.MethodWalk``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from autotune import checks
from autotune.backends.methods import (
    METHOD_KNOB,
    MethodWalk,
    cut_name,
    feasible,
    int_values,
    nearest,
    param_name,
    spec_values,
)
from autotune.config import EffectiveConfig, KnobValue, TrialConfig
from autotune.errors import InfeasibleConfig, ValidationFailed
from autotune.servers import KnobDomain, Method
from autotune.space.model import Choices, ParamSpec

if TYPE_CHECKING:
    from autotune.space import Space


#: the SGLang release targeted when the space does not name one
DEFAULT_VERSION = "0.5.23"
#: the first release written with the per-phase CUDA-graph flags: SGLang 0.5.23's server_args.py deprecates
#: ``--disable-cuda-graph`` (a ``DeprecatedStoreTrueAction``) for ``--disable-decode-cuda-graph`` /
#: ``--disable-prefill-cuda-graph`` (arg_groups/fields/exec_.py). A space without ``server.version`` is probed.
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
    return ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]


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


def cuda_graph_state(info: Mapping[str, object]) -> bool | None:
    """Whether the server runs with CUDA graphs, from its server args (None: they do not say)."""
    keys = ("disable_cuda_graph", "disable_decode_cuda_graph", "disable_prefill_cuda_graph")
    seen = [bool(info[k]) for k in keys if k in info and info[k] is not None]
    backend = info.get("cuda_graph_backend_decode")
    if backend is not None:
        seen.append(str(backend).lower() == "disabled")
    if not seen:
        return None
    return not any(seen)


#: target architectures whose draft path SGLang 0.5.23 defaults to the target (their MTP/NextN layers):
#: ``_handle_eagle_family`` in ``arg_groups/speculative_hook.py``
MTP_ARCHITECTURES = (
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "HYV3ForCausalLM",
    "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration",
)

#: tree depth S, branching k, verified nodes N (the root counts, so N >= 2)
TREE_KNOBS = {
    "num_steps": KnobDomain("int", 1),
    "topk": KnobDomain("int", 1),
    "num_draft_tokens": KnobDomain("int", 2),
}
#: SGLang's n-gram defaults (``fields/spec.py``; 12 draft tokens from ``_handle_ngram``)
NGRAM_DEFAULTS: dict[str, float | str] = {
    "num_draft_tokens": 12,
    "min_bfs_breadth": 1,
    "max_bfs_breadth": 10,
    "match_type": "BFS",
    "max_trie_depth": 18,
}
NGRAM_FLAGS = {
    "min_bfs_breadth": "--speculative-ngram-min-bfs-breadth",
    "max_bfs_breadth": "--speculative-ngram-max-bfs-breadth",
    "match_type": "--speculative-ngram-match-type",
    "max_trie_depth": "--speculative-ngram-max-trie-depth",
}
MATCH_TYPES = ("BFS", "PROB")


class AdaptiveEntry(TypedDict, total=False):
    """One batch-size slot of SGLang's adaptive config (``speculative/adaptive_spec_params.py``): the step counts it
    moves between and its rule's settings (absent: SGLang's defaults)."""

    candidate_steps: list[int]
    up_hysteresis: float
    down_hysteresis: float
    ceiling_coeff: float


#: SGLang 0.5.23's ``DEFAULT_ADAPTIVE_CONFIG`` (``speculative/adaptive_spec_params.py``), by batch size
DEFAULT_ADAPTIVE_CONFIG: dict[str, AdaptiveEntry] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
ADAPTIVE_FILE = "adaptive.json"

_ADAPTIVE_SINCE_NOTE = (
    " (assumed: 0.5.23 is the earliest SGLang release whose source autotune was checked against; "
    "older releases may lack --speculative-adaptive)"
)

_ADAPTIVE_KNOBS = {
    "candidate_steps": KnobDomain("str"),
    "up_hysteresis": KnobDomain("float"),
    "down_hysteresis": KnobDomain("float"),
}
_ADAPTIVE_DEFAULTS: dict[str, float | str] = {
    "candidate_steps": "1,3,5,7",
    "up_hysteresis": 0.0,
    "down_hysteresis": -0.25,
}

METHODS: dict[str, Method] = {
    "eagle": Method("eagle", "EAGLE", True, TREE_KNOBS, drafter_kind="an EAGLE head"),
    "eagle3": Method("eagle3", "EAGLE-3", True, TREE_KNOBS, drafter_kind="an EAGLE-3 head"),
    "mtp": Method("mtp", "MTP", False, TREE_KNOBS),
    "standalone": Method("standalone", "draft model", True, TREE_KNOBS, drafter_kind="a small draft model"),
    "ngram": Method(
        "ngram",
        "n-gram",
        False,
        {
            "num_draft_tokens": KnobDomain("int", 2),
            "min_bfs_breadth": KnobDomain("int", 1),
            "max_bfs_breadth": KnobDomain("int", 1),
            "match_type": KnobDomain("str"),
            "max_trie_depth": KnobDomain("int", 1),
        },
        defaults=NGRAM_DEFAULTS,
    ),
    "adaptive": Method(
        "adaptive",
        "adaptive",
        True,
        _ADAPTIVE_KNOBS,
        defaults=_ADAPTIVE_DEFAULTS,
        adaptive=True,
        since="0.5.23",
        since_note=_ADAPTIVE_SINCE_NOTE,
        drafter_kind="an EAGLE or EAGLE-3 head",
    ),
    # adaptive stays on over NEXTN (the module's docstring); tests/servers/test_sglang_parser.py checks it with
    # SGLang's own code (spaces/methods-mtp.yaml)
    "adaptive-mtp": Method(
        "adaptive-mtp",
        "adaptive MTP",
        False,
        _ADAPTIVE_KNOBS,
        defaults=_ADAPTIVE_DEFAULTS,
        adaptive=True,
        adapts="mtp",
        since="0.5.23",
        since_note=_ADAPTIVE_SINCE_NOTE,
    ),
}
#: the methods that run SGLang's adaptive mode
ADAPTIVE_METHODS = ("adaptive", "adaptive-mtp")
#: ``--speculative-algorithm`` of each method (adaptive: the drafter's own, EAGLE or EAGLE3)
ALGORITHMS = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "standalone": "STANDALONE",
    "ngram": "NGRAM",
    "adaptive-mtp": "NEXTN",
}
#: what /server_info reports as the algorithm after SGLang's alias resolution
REPORTED = {"NEXTN": "EAGLE"}
_STANDALONE_DEFAULT = (3, 1, 4)
#: the n-gram knobs in the nesting order of its grid
_NGRAM_GRID_ORDER = ("num_draft_tokens", "max_bfs_breadth", "min_bfs_breadth", "match_type", "max_trie_depth")


def _read_json(path: str | Path) -> dict[str, Any] | None:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        with p.open(encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mtp_unavailable(model_path: str) -> str | None:
    """Why the target at ``model_path`` has no MTP layers SGLang would run (None: it has, or its config.json is not
    readable here, e.g. a hub id: then the server decides)."""
    cfg = _read_json(model_path) if model_path else None
    if cfg is None:
        return None
    archs = [str(a) for a in cfg.get("architectures") or ()]
    if not any(a in MTP_ARCHITECTURES for a in archs):
        return (
            f"MTP not available for this target: {', '.join(archs) or 'its architecture'} is not one SGLang runs "
            "MTP layers for (the draft path defaults to the target only for DeepSeek-V3-style, GLM-4 MoE, ... "
            "architectures)"
        )
    layers = cfg.get("num_nextn_predict_layers")
    if not isinstance(layers, int) or layers < 1:
        return f"MTP not available for this target: its config.json has num_nextn_predict_layers {layers!r}"
    return None


def parse_steps(text: Any) -> list[int] | None:
    """``"1,3,5,7"`` -> [1, 3, 5, 7] (sorted, distinct, non-negative, one positive at least); None when invalid."""
    try:
        steps = sorted({int(x) for x in str(text).split(",") if x.strip() != ""})
    except ValueError:
        return None
    if not steps or steps[0] < 0 or steps[-1] < 1:
        return None
    return steps


def adaptive_file(config: TrialConfig) -> dict[str, AdaptiveEntry]:
    """The ``--speculative-adaptive-config`` JSON of an adaptive config: SGLang's default with the batch-size-1
    slot's candidate steps and hysteresis from the config's knobs."""
    steps = parse_steps(config.knob("candidate_steps")) or [1, 3, 5, 7]
    out: dict[str, AdaptiveEntry] = json.loads(json.dumps(DEFAULT_ADAPTIVE_CONFIG))
    out["1"].update(
        {
            "candidate_steps": steps,
            "up_hysteresis": float(config.knob("up_hysteresis", 0.0)),
            "down_hysteresis": float(config.knob("down_hysteresis", -0.25)),
        }
    )
    return out


def adaptive_start(config: TrialConfig) -> int:
    """SGLang's start steps: the middle of the union of every slot's candidate steps (``_init_adaptive_...``)."""
    union: set[int] = set()
    for key, entry in adaptive_file(config).items():
        if key.isdigit():
            union.update(entry["candidate_steps"])
    ordered = sorted(union)
    return ordered[len(ordered) // 2]


def tree_bound(num_steps: int, topk: int) -> int:
    """The largest feasible ``num_draft_tokens`` at (steps, topk): candidates + the root."""
    return topk + (num_steps - 1) * topk * topk + 1


def tree_flags(algorithm: str, draft_path: str | None, config: TrialConfig) -> list[str]:
    """``--speculative-algorithm`` and the draft path (when there is one), then the three tree knobs of a resolved
    config (all three always passed: SGLang picks its own for any left out)."""
    out = ["--speculative-algorithm", algorithm]
    if draft_path is not None:
        out += ["--speculative-draft-model-path", draft_path]
    for knob, flag in (
        ("num_steps", "--speculative-num-steps"),
        ("topk", "--speculative-eagle-topk"),
        ("num_draft_tokens", "--speculative-num-draft-tokens"),
    ):
        out += [flag, str(config.knob(knob))]
    return out


def feasibility_reason(num_steps: int, topk: int, num_draft_tokens: int) -> str | None:
    """Why (S, k, N) cannot run (None: it can). Assumes N already forced to S+1 when k == 1."""
    if num_steps < 1:
        return f"num_steps must be at least 1 but got {num_steps}"
    if topk < 1:
        return f"topk must be at least 1 but got {topk}"
    if num_draft_tokens < 2:
        return f"num_draft_tokens must be at least 2 but got {num_draft_tokens}"
    bound = tree_bound(num_steps, topk)
    if num_draft_tokens > bound:
        return (
            f"num_draft_tokens={num_draft_tokens} exceeds the draft tree: topk + (num_steps-1)*topk^2 = "
            f"{bound - 1} candidates (+1 root) at num_steps={num_steps}, topk={topk}"
        )
    return None


# -- the tree walk, shared by suggest (Optuna) and params (replay) ----------------------------------------------


class MethodTree(MethodWalk):
    """Suggest, replay, resolve, enumerate and launch the configs of a space with ``search.methods``."""

    catalogue = METHODS

    def __init__(self, auto_triple: Any) -> None:
        #: ``auto_triple(space)``: SGLang's auto choice (steps, topk, draft tokens) for the space's target
        self.auto_triple = auto_triple

    # -- what the space offers -----------------------------------------------------------------------------

    def unavailable(self, space: Space, method: str) -> str | None:
        if method in ("mtp", "adaptive-mtp"):
            return mtp_unavailable(space.server.model_path)
        return None

    # A space without ``search.methods`` is the tree of method None: its knobs unprefixed (``walk_tree``), a knob it
    # does not search at SGLang's auto choice.

    def spec(self, space: Space, method: str | None, knob: str) -> ParamSpec:
        if method is None:
            got = space.search.knobs.get(knob)
            return got if got is not None else Choices((self.default(space, None, knob),))
        return super().spec(space, method, knob)

    def default(self, space: Space, method: str | None, knob: str) -> Any:
        """The catalogue's default; a tree knob without one: SGLang's auto choice (STANDALONE's own for it)."""
        if method is not None and knob in METHODS[method].defaults:
            return METHODS[method].defaults[knob]
        triple = _STANDALONE_DEFAULT if method == "standalone" else self.auto_triple(space)
        return dict(zip(("num_steps", "topk", "num_draft_tokens"), triple, strict=True))[knob]

    # -- the walk ------------------------------------------------------------------------------------------

    def walk_knobs(self, ask: Any, space: Space, method: str) -> Mapping[str, KnobValue]:
        if method == "ngram":
            return self._walk_ngram(ask, space)
        if method in ADAPTIVE_METHODS:
            return {
                k: ask.number(k, param_name(method, k), self.spec(space, method, k))
                for k in ("candidate_steps", "up_hysteresis", "down_hysteresis")
            }
        return self.walk_tree(ask, space, method)

    def _values(self, space: Space, method: str | None, knob: str) -> list[Any]:
        spec = self.spec(space, method, knob)
        return (int_values(spec, "SGLang") if method is None else spec_values(spec)) or []

    def ndts(self, space: Space, method: str | None, s: int, k: int) -> list[int]:
        return [int(n) for n in self._values(space, method, "num_draft_tokens") if feasibility_reason(s, k, n) is None]

    def topks(self, space: Space, method: str | None, s: int) -> list[int]:
        return [
            int(k) for k in self._values(space, method, "topk") if k >= 1 and (k == 1 or self.ndts(space, method, s, k))
        ]

    def steps(self, space: Space, method: str | None) -> list[int]:
        return [int(s) for s in self._values(space, method, "num_steps") if s >= 1 and self.topks(space, method, s)]

    def walk_tree(self, ask: Any, space: Space, method: str | None) -> dict[str, int]:
        steps_allowed = self.steps(space, method)
        if not steps_allowed:
            where = "in the space" if method is None else f"for method {method}"
            raise InfeasibleConfig(f"no feasible (num_steps, topk, num_draft_tokens) {where}")

        def param_name(name: str) -> str:
            return name if method is None else f"{method}.{name}"

        spec = {k: self.spec(space, method, k) for k in TREE_KNOBS}
        s = ask.int("num_steps", param_name("num_steps"), spec["num_steps"], steps_allowed)
        topk_allowed = self.topks(space, method, s)
        topk_name = cut_name("topk", topk_allowed, spec_values(spec["topk"]), f"s{s}")
        k = ask.int("topk", param_name(topk_name), spec["topk"], topk_allowed)
        if k == 1:
            return {"num_steps": s, "topk": 1, "num_draft_tokens": s + 1}
        ndt_allowed = self.ndts(space, method, s, k)
        ndt_name = cut_name("num_draft_tokens", ndt_allowed, spec_values(spec["num_draft_tokens"]), f"s{s}_k{k}")
        n = ask.int("num_draft_tokens", param_name(ndt_name), spec["num_draft_tokens"], ndt_allowed)
        return {"num_steps": s, "topk": k, "num_draft_tokens": n}

    def _walk_ngram(self, ask: Any, space: Space) -> dict[str, KnobValue]:
        method = "ngram"
        spec = {k: self.spec(space, method, k) for k in METHODS[method].knobs}
        out: dict[str, KnobValue] = {}
        ndt = [int(v) for v in self._values(space, method, "num_draft_tokens") if v >= 2]
        out["num_draft_tokens"] = ask.int(
            "num_draft_tokens", param_name(method, "num_draft_tokens"), spec["num_draft_tokens"], ndt
        )
        widest = [int(v) for v in self._values(space, method, "max_bfs_breadth") if v >= 1]
        mins = [int(v) for v in self._values(space, method, "min_bfs_breadth") if v >= 1]
        widest = [w for w in widest if any(m <= w for m in mins)]
        if not widest:
            raise InfeasibleConfig("no n-gram BFS breadth with min_bfs_breadth <= max_bfs_breadth")
        b = ask.int("max_bfs_breadth", param_name(method, "max_bfs_breadth"), spec["max_bfs_breadth"], widest)
        mins_ok = [m for m in mins if m <= b]
        min_name = cut_name("min_bfs_breadth", mins_ok, spec_values(spec["min_bfs_breadth"]), f"b{b}")
        out["min_bfs_breadth"] = ask.int(
            "min_bfs_breadth", param_name(method, min_name), spec["min_bfs_breadth"], mins_ok
        )
        out["max_bfs_breadth"] = b
        out["match_type"] = str(ask.number("match_type", param_name(method, "match_type"), spec["match_type"]))
        depth = [int(v) for v in self._values(space, method, "max_trie_depth") if v >= 1]
        out["max_trie_depth"] = ask.int(
            "max_trie_depth", param_name(method, "max_trie_depth"), spec["max_trie_depth"], depth
        )
        return out

    # -- resolution ----------------------------------------------------------------------------------------

    def knob_names(self, method: str) -> set[str]:
        """The method's knobs and the tree knobs every method resolves (the n-gram's topk and steps too)."""
        return {*METHODS[method].knobs, *TREE_KNOBS}

    def resolve_knobs(self, config: TrialConfig, space: Space, method: str) -> EffectiveConfig:
        if method == "ngram":
            return self._resolve_ngram(config, space)
        if method in ADAPTIVE_METHODS:
            return self._resolve_adaptive(config, space, method)
        return self._resolve_tree(config, space, method)

    def _resolve_tree(self, config: TrialConfig, space: Space, method: str) -> EffectiveConfig:
        if method in ("eagle", "eagle3"):
            self._check_head(space, str(config.drafter), ALGORITHMS[method], method)
        s = int(self.knob_or_default(config, space, method, "num_steps"))
        k = int(self.knob_or_default(config, space, method, "topk"))
        n = s + 1 if k == 1 else int(self.knob_or_default(config, space, method, "num_draft_tokens"))
        reason = feasibility_reason(s, k, n)
        if reason:
            raise InfeasibleConfig(reason)
        return EffectiveConfig.make(
            config.drafter, config.cuda_graph, method=method, num_steps=s, topk=k, num_draft_tokens=n
        )

    def _resolve_ngram(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        v = {k: self.knob_or_default(config, space, "ngram", k) for k in METHODS["ngram"].knobs}
        n, b, lo = int(v["num_draft_tokens"]), int(v["max_bfs_breadth"]), int(v["min_bfs_breadth"])
        if n < 2:
            raise InfeasibleConfig(f"n-gram num_draft_tokens must be at least 2 but got {n}")
        if lo > b:
            raise InfeasibleConfig(f"n-gram min_bfs_breadth {lo} exceeds max_bfs_breadth {b}")
        if str(v["match_type"]) not in MATCH_TYPES:
            raise InfeasibleConfig(
                f"n-gram match_type must be one of {', '.join(MATCH_TYPES)} but got {v['match_type']!r}"
            )
        v.update(num_draft_tokens=n, max_bfs_breadth=b, min_bfs_breadth=lo, max_trie_depth=int(v["max_trie_depth"]))
        v["match_type"] = str(v["match_type"])
        # _handle_ngram: topk := the max BFS breadth, steps := num_draft_tokens // topk
        return EffectiveConfig.make(None, config.cuda_graph, method="ngram", **v, topk=b, num_steps=n // b)

    def _resolve_adaptive(self, config: TrialConfig, space: Space, method: str) -> EffectiveConfig:
        if method == "adaptive":  # adaptive-mtp: NEXTN, which SGLang runs as EAGLE before its adaptive check
            algo = self.drafter_algorithm(space, str(config.drafter))
            if algo not in ("EAGLE", "EAGLE3"):
                # SGLang would switch adaptive off with only a warning (_maybe_disable_adaptive): never launch that
                raise InfeasibleConfig(
                    f"adaptive needs an EAGLE or EAGLE-3 head; drafter {config.drafter!r} runs {algo}, for which "
                    "SGLang switches --speculative-adaptive off with only a warning"
                )
        text = self.knob_or_default(config, space, method, "candidate_steps")
        steps = parse_steps(text)
        if steps is None:
            raise InfeasibleConfig(
                f"adaptive candidate_steps {text!r}: expected comma-separated non-negative integers, one positive"
            )
        cfg = TrialConfig.make(
            config.drafter,
            config.cuda_graph,
            method=method,
            candidate_steps=str(text),
            up_hysteresis=float(self.knob_or_default(config, space, method, "up_hysteresis")),
            down_hysteresis=float(self.knob_or_default(config, space, method, "down_hysteresis")),
        )
        start = adaptive_start(cfg)
        return EffectiveConfig.of(cfg.with_knobs(num_steps=start, topk=1, num_draft_tokens=start + 1))

    def drafter_algorithm(self, space: Space, name: str) -> str:
        try:
            return str(checks.resolved_algorithm(space, name)).upper()
        except ValidationFailed as e:
            raise InfeasibleConfig(str(e)) from None

    def _check_head(self, space: Space, name: str, algorithm: str, method: str) -> None:
        """The EAGLE/EAGLE3 trap: a head launched under the other algorithm runs with accept length ~1.0."""
        try:
            got = str(checks.resolved_algorithm(space, name)).upper()
        except ValidationFailed:
            return  # cannot tell from its config.json: the method names the algorithm
        if got in ("EAGLE", "EAGLE3") and got != algorithm:
            raise InfeasibleConfig(
                f"drafter {name!r} is an {'EAGLE-3' if got == 'EAGLE3' else 'EAGLE'} head; method {method} would "
                f"launch it with --speculative-algorithm {algorithm} (accept length ~1.0, no warning from SGLang)"
            )

    def defaults(self, space: Space) -> list[TrialConfig]:
        configs: list[TrialConfig] = []
        for method in self.available(space):
            drafters: list[str | None] = list(space.search.methods[method].drafters) or [None]
            knobs: dict[str, Any] = {}
            if method == "ngram" or method in ADAPTIVE_METHODS:
                for k in METHODS[method].knobs:
                    vals = spec_values(self.spec(space, method, k))
                    d = self.default(space, method, k)
                    knobs[k] = nearest(vals, d) if vals else d
                if method == "ngram" and knobs["min_bfs_breadth"] > knobs["max_bfs_breadth"]:
                    knobs["min_bfs_breadth"] = knobs["max_bfs_breadth"]
            else:
                steps = self.steps(space, method)
                if not steps:
                    continue
                s = nearest(steps, self.default(space, method, "num_steps"))
                k = nearest(self.topks(space, method, s), self.default(space, method, "topk"))
                n = (
                    s + 1
                    if k == 1
                    else nearest(self.ndts(space, method, s, k), self.default(space, method, "num_draft_tokens"))
                )
                knobs = {"num_steps": s, "topk": k, "num_draft_tokens": n}
            configs += [TrialConfig.make(d, any(space.search.cuda_graph), method=method, **knobs) for d in drafters]
        return feasible(self.resolve, configs, space)

    def grid(self, space: Space) -> list[TrialConfig] | None:
        configs: list[TrialConfig] = []
        for method in self.available(space):
            if any(spec_values(self.spec(space, method, k)) is None for k in METHODS[method].knobs):
                return None
            points: list[dict[str, Any]]
            if method == "ngram" or method in ADAPTIVE_METHODS:
                order = _NGRAM_GRID_ORDER if method == "ngram" else tuple(_ADAPTIVE_KNOBS)
                axes = [self._values(space, method, k) for k in order]
                points = [dict(zip(order, p, strict=True)) for p in itertools.product(*axes)]
                if method == "ngram":
                    points = [p for p in points if p["min_bfs_breadth"] <= p["max_bfs_breadth"]]
                    points = [p for p in points if p["num_draft_tokens"] >= 2]
            else:
                points = [
                    dict(num_steps=s, topk=k, num_draft_tokens=n)
                    for s in self.steps(space, method)
                    for k in self.topks(space, method, s)
                    for n in ([s + 1] if k == 1 else self.ndts(space, method, s, k))
                ]
            drafters: list[str | None] = list(space.search.methods[method].drafters) or [None]
            graphs = [bool(cg) for cg in space.search.cuda_graph]
            configs += [TrialConfig.make(d, cg, method=method, **p) for d in drafters for cg in graphs for p in points]
        return feasible(self.resolve, configs, space)

    def algorithm(self, eff: TrialConfig, space: Space) -> str:
        """``--speculative-algorithm`` of a method config: the method's own, an adaptive one's drafter's (adaptive
        MTP: NEXTN)."""
        method = str(eff.knob(METHOD_KNOB))
        return self.drafter_algorithm(space, str(eff.drafter)) if method == "adaptive" else ALGORITHMS[method]

    def argv(self, eff: TrialConfig, space: Space, files_dir: str | None, file_arg: Any) -> list[str]:
        """The speculative flags of a resolved method config."""
        method = str(eff.knob(METHOD_KNOB))
        if method == "ngram":
            out = [
                "--speculative-algorithm",
                "NGRAM",
                "--speculative-num-draft-tokens",
                str(eff.knob("num_draft_tokens")),
            ]
            for knob, flag in NGRAM_FLAGS.items():
                out += [flag, str(eff.knob(knob))]
            return out
        out = tree_flags(
            self.algorithm(eff, space), space.drafter(eff.drafter).path if eff.drafter is not None else None, eff
        )
        if method in ADAPTIVE_METHODS:
            out += ["--speculative-adaptive", "--speculative-adaptive-config", file_arg(ADAPTIVE_FILE, files_dir)]
        return out

    def files(self, config: TrialConfig) -> dict[str, str]:
        if config.knob(METHOD_KNOB) not in ADAPTIVE_METHODS:
            return {}
        return {ADAPTIVE_FILE: json.dumps(adaptive_file(config), indent=1, sort_keys=True) + "\n"}

    def check_effective(self, config: TrialConfig, effective: Mapping[str, Any]) -> list[str]:
        """What /server_info says against the method config launched: the algorithm (after SGLang's aliasing), the
        tree knobs, adaptive on or off."""
        problems: list[str] = []
        method = str(config.knob(METHOD_KNOB))
        algo = effective.get("speculative_algorithm")
        want = None if method == "adaptive" else REPORTED.get(ALGORITHMS[method], ALGORITHMS[method])
        adaptive = method in ADAPTIVE_METHODS
        if algo is None:
            problems.append(f"method {method} launched but the server reports no speculative algorithm")
        elif want is not None and algo != want:
            problems.append(f"method {method}: launched {ALGORITHMS[method]}, server runs {algo}")
        for knob in ("num_steps", "topk", "num_draft_tokens"):
            got = effective.get(knob)
            if got is not None and config.knob(knob) is not None and got != config.knob(knob):
                problems.append(f"{knob}: launched {config.knob(knob)}, server runs {got}")
        if adaptive and effective.get("speculative_adaptive") is False:
            problems.append("adaptive launched but the server switched --speculative-adaptive off")
        if not adaptive and effective.get("speculative_adaptive"):
            problems.append(f"method {method} launched static but the server runs adaptive")
        return problems

"""SGLang 0.5.23's speculative methods: the catalogue (``METHODS``: each method's algorithm, knobs and defaults)
and its resolution rules (MTP availability, the adaptive config file and start steps, the EAGLE tree bound), read
from SGLang's ``srt/arg_groups/`` and ``srt/speculative/adaptive_spec_params.py``; the tree walk over a space's
methods is ``autotune.backends.sglang_methods``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config import TrialConfig
from autotune.servers import KnobDomain, Method

if TYPE_CHECKING:
    pass

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

_TREE = {
    "num_steps": KnobDomain("int", 1),
    "topk": KnobDomain("int", 1),
    "num_draft_tokens": KnobDomain("int", 2),
}
#: SGLang's n-gram defaults (``fields/spec.py``; 12 draft tokens from ``_handle_ngram``)
NGRAM_DEFAULTS: dict[str, Any] = {
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
#: SGLang 0.5.23's ``DEFAULT_ADAPTIVE_CONFIG`` (``speculative/adaptive_spec_params.py``)
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
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
_ADAPTIVE_DEFAULTS: dict[str, Any] = {"candidate_steps": "1,3,5,7", "up_hysteresis": 0.0, "down_hysteresis": -0.25}

METHODS: dict[str, Method] = {
    "eagle": Method("eagle", "EAGLE", True, _TREE, drafter_kind="an EAGLE head"),
    "eagle3": Method("eagle3", "EAGLE-3", True, _TREE, drafter_kind="an EAGLE-3 head"),
    "mtp": Method("mtp", "MTP", False, _TREE),
    "standalone": Method("standalone", "draft model", True, _TREE, drafter_kind="a small draft model"),
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
    # NEXTN (the target's MTP layers) under --speculative-adaptive: SGLang 0.5.23 resolves NEXTN to EAGLE
    # (``speculative_hook._resolve_speculative_algorithm_alias``, called in ``handle_speculative_decoding``) before
    # its adaptive check (``adaptive_spec_params.adaptive_unsupported_reason``: EAGLE/EAGLE3 at topk 1), so it keeps
    # adaptive on; tests/servers/test_sglang_parser.py checks it with SGLang's own code (spaces/methods-mtp.yaml)
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


def adaptive_file(config: TrialConfig) -> dict[str, Any]:
    """The ``--speculative-adaptive-config`` JSON of an adaptive config: SGLang's default with the batch-size-1
    slot's candidate steps and hysteresis from the config's knobs."""
    steps = parse_steps(config.knob("candidate_steps")) or [1, 3, 5, 7]
    out: dict[str, Any] = json.loads(json.dumps(DEFAULT_ADAPTIVE_CONFIG))
    out["1"].update(
        candidate_steps=steps,
        up_hysteresis=float(config.knob("up_hysteresis", 0.0)),
        down_hysteresis=float(config.knob("down_hysteresis", -0.25)),
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

"""vLLM's speculative methods as a searched choice (``search.methods``), read from vLLM 0.33.0's
``vllm/config/speculative.py`` (``SpeculativeConfig``):

- ``eagle`` / ``eagle3`` (an EAGLE / EAGLE-3 head), ``draft_model`` (a small draft model): the drafter's path as
  ``model``, ``num_speculative_tokens`` (> 0), ``draft_tensor_parallel_size`` 1. A head launched under the other EAGLE
  method is refused (the acceptance collapse).
- ``mtp``: the target's own MTP layers, no ``model``; a target whose ``config.json`` names no MTP layers
  (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``, ``num_mtp_layers``, in it or its ``text_config``) has
  none, and the method is not searched.
- ``ngram``: no model; ``prompt_lookup_min`` / ``prompt_lookup_max`` (each >= 1, min <= max; vLLM's default 5 / 5
  when neither is given, one given copies to the other: we always pass both).

The release that added each (``SINCE``), read from the released wheels' ``SpeculativeConfig`` and ``EngineArgs``:
``--speculative-config`` with ``eagle``, ``draft_model`` and ``ngram`` 0.8.2; ``eagle3`` 0.8.5; the generic ``mtp``
0.11.0; ``num_speculative_tokens_per_batch_size`` 0.24.0. A space whose ``server.version`` predates one is refused.

Which drafter checkpoints 0.33.0 loads under ``eagle`` and ``eagle3``: it builds the draft's ``ModelConfig`` from the
drafter's ``config.json`` (``architectures`` must be in ``vllm/model_executor/models/registry.py``), wraps it in
``EAGLEConfig`` (``vllm/transformers_utils/configs/eagle.py``), which renames each architecture (``eagle``: ``A`` ->
``EagleA`` unless it starts with ``Eagle``; ``eagle3``: ``A`` -> ``Eagle3A`` unless it starts or ends with
``Eagle3``), and asks the registry again (``SpeculativeConfig.update_arch_``); an architecture neither finds is
refused at startup. ``ACCEPTED`` lists those the registry has (tests/servers/test_vllm_parser.py asks vLLM's own
code). SGLang's EAGLE-1 format (``LlamaForCausalLMEagle``) is not among them; its EAGLE-3 format is. The check is made
only on a local ``config.json`` with ``architectures``, not vLLM's own formats (``model_type: eagle``, a
``speculators_config``) and no ``auto_map`` (custom code may supply the model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import checks
from autotune.backends.methods import METHOD_KNOB, FlatMethods
from autotune.config import EffectiveConfig, TrialConfig
from autotune.errors import InfeasibleConfig, ValidationFailed
from autotune.servers import KnobDomain, Method

if TYPE_CHECKING:
    from autotune.space import Space


_K = {"num_speculative_tokens": KnobDomain("int", 1)}
#: the first vLLM release with each method in ``--speculative-config`` (see the module's docstring)
SINCE = {"eagle": "0.8.2", "draft_model": "0.8.2", "ngram": "0.8.2", "eagle3": "0.8.5", "mtp": "0.11.0"}
#: the first vLLM release with ``num_speculative_tokens_per_batch_size`` (a per-load-level schedule)
PER_BATCH_SIZE_SINCE = "0.24.0"
_K_DEFAULT = {"num_speculative_tokens": 3}

METHODS: dict[str, Method] = {
    "eagle": Method("eagle", "EAGLE", True, _K, _K_DEFAULT, drafter_kind="an EAGLE head", since=SINCE["eagle"]),
    "eagle3": Method("eagle3", "EAGLE-3", True, _K, _K_DEFAULT, drafter_kind="an EAGLE-3 head", since=SINCE["eagle3"]),
    "draft_model": Method(
        "draft_model",
        "draft model",
        True,
        _K,
        _K_DEFAULT,
        drafter_kind="a small draft model",
        since=SINCE["draft_model"],
    ),
    "mtp": Method("mtp", "MTP", False, _K, {"num_speculative_tokens": 1}, since=SINCE["mtp"]),
    "ngram": Method(
        "ngram",
        "n-gram",
        False,
        {**_K, "prompt_lookup_max": KnobDomain("int", 1), "prompt_lookup_min": KnobDomain("int", 1)},
        {"num_speculative_tokens": 3, "prompt_lookup_max": 5, "prompt_lookup_min": 5},
        since=SINCE["ngram"],
    ),
}
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def mtp_unavailable(model_path: str) -> str | None:
    """Why the target has no MTP layers vLLM would run (None: it has, or its config.json is not readable here)."""
    p = Path(model_path) / "config.json" if model_path else None
    try:
        cfg = json.loads(p.read_text(encoding="utf-8")) if p is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    text = cfg.get("text_config")
    for where in (cfg, text if isinstance(text, dict) else {}):
        for key in _MTP_KEYS:
            if isinstance(where.get(key), int) and where[key] >= 1:
                return None
    return "MTP not available for this target: its config.json names no MTP layers (" + ", ".join(_MTP_KEYS) + ")"


class VLLMMethods(FlatMethods):
    """The method tree of a vLLM space with ``search.methods``: the walk, resolution, the speculative config."""

    catalogue = METHODS
    pairs = (("prompt_lookup_max", "prompt_lookup_min", 1),)

    def unavailable(self, space: Space, method: str) -> str | None:
        return mtp_unavailable(space.server.model_path) if method == "mtp" else None

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        eff = super().resolve(config, space)
        method = str(eff.knob(METHOD_KNOB))
        if method in ("eagle", "eagle3"):
            try:
                got = str(checks.resolved_algorithm(space, str(eff.drafter))).upper()
            except ValidationFailed:
                got = ""
            want = method.upper()
            if got in ("EAGLE", "EAGLE3") and got != want:
                raise InfeasibleConfig(
                    f"drafter {eff.drafter!r} is an {'EAGLE-3' if got == 'EAGLE3' else 'EAGLE'} head; method {method} "
                    "would run it wrongly (acceptance collapses, no error from vLLM)"
                )
        return eff

    def speculative_config(self, eff: TrialConfig, space: Space) -> dict[str, Any]:
        """The ``--speculative-config`` object of a resolved config (of a method space or not: a flat space's n-gram
        runs with a drafter and autotune's lookup sizes 4 and 1; its mtp uses the target's layers)."""
        method = str(eff.knob(METHOD_KNOB))
        out: dict[str, Any] = {"method": method, "num_speculative_tokens": int(eff.knob("num_speculative_tokens"))}
        if method == "ngram":
            out["prompt_lookup_max"] = int(eff.knob("prompt_lookup_max", 4))
            out["prompt_lookup_min"] = int(eff.knob("prompt_lookup_min", 1))
        elif method != "mtp" and eff.drafter is not None:
            out["model"] = space.drafter(eff.drafter).path
            out["draft_tensor_parallel_size"] = 1
        return out


#: the vLLM release the tables below were read from
VERSION = "0.33.0"

#: drafter architectures (``config.json``) that vLLM 0.33.0 loads under each method
ACCEPTED: dict[str, frozenset[str]] = {
    "eagle": frozenset(
        {
            "CohereForCausalLM",
            "DeepSeekMTPModel",
            "Eagle2_5_VLForConditionalGeneration",
            "Eagle3DeepseekV2ForCausalLM",
            "Eagle3DeepseekV3ForCausalLM",
            "Eagle3LlamaForCausalLM",
            "Eagle3MiniMaxM2ForCausalLM",
            "Eagle3Qwen2_5vlForCausalLM",
            "Eagle3Qwen3ForCausalLM",
            "Eagle3Qwen3vlForCausalLM",
            "EagleCohereForCausalLM",
            "EagleDeepSeekMTPModel",
            "EagleLlama4ForCausalLM",
            "EagleLlamaForCausalLM",
            "EagleMiniCPMForCausalLM",
            "EagleMistralForCausalLM",
            "EagleMistralLarge3ForCausalLM",
            "Llama4ForCausalLM",
            "LlamaForCausalLM",
            "MiniCPMForCausalLM",
            "MistralForCausalLM",
            "MistralLarge3ForCausalLM",
        }
    ),
    "eagle3": frozenset(
        {
            "DeepseekV2ForCausalLM",
            "DeepseekV3ForCausalLM",
            "Eagle3DeepseekV2ForCausalLM",
            "Eagle3DeepseekV3ForCausalLM",
            "Eagle3LlamaForCausalLM",
            "Eagle3MiniMaxM2ForCausalLM",
            "Eagle3Qwen2_5vlForCausalLM",
            "Eagle3Qwen3ForCausalLM",
            "Eagle3Qwen3vlForCausalLM",
            "LlamaForCausalLM",
            "LlamaForCausalLMEagle3",
            "MiniMaxM2ForCausalLM",
            "Qwen3ForCausalLM",
        }
    ),
}
#: what a refused head of each method should name instead (for the message)
_HINT = {
    "eagle": "an EAGLE-1 head in vLLM's format names its base architecture (e.g. LlamaForCausalLM); "
    "SGLang's format (LlamaForCausalLMEagle) is not loaded by vLLM",
    "eagle3": "an EAGLE-3 head names e.g. LlamaForCausalLMEagle3 or Eagle3LlamaForCausalLM",
}


def renamed(method: str, arch: str) -> str:
    """The architecture vLLM 0.33.0's ``EAGLEConfig`` asks its registry for, for ``arch`` under ``method``."""
    if method == "eagle":
        return arch if arch.startswith("Eagle") else f"Eagle{arch}"
    if method == "eagle3":
        return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
    return arch


def _config(path: str) -> dict[str, Any] | None:
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def architecture_problem(method: str, drafter: str, path: str) -> str | None:
    """Why vLLM 0.33.0 would refuse drafter ``drafter`` (checkpoint ``path``) under ``method`` (one line), or None:
    it would load it, the method is not ``eagle`` / ``eagle3``, or its config.json does not tell here."""
    if method not in ACCEPTED:
        return None
    cfg = _config(path)
    if cfg is None or cfg.get("model_type") == "eagle" or "speculators_config" in cfg or "auto_map" in cfg:
        return None
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return None
    if any(a in ACCEPTED[method] for a in archs):
        return None
    as_asked = [renamed(method, a) for a in archs]
    return (
        f"drafter {drafter} ({Path(path) / 'config.json'}): architectures {archs} are not loaded by vLLM {VERSION} "
        f"under method {method} (it asks its model registry for {as_asked}: not there); it accepts "
        f"{', '.join(sorted(ACCEPTED[method]))}; {_HINT[method]}"
    )

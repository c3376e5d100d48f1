"""Which drafter checkpoints vLLM 0.33.0 loads under its ``eagle`` and ``eagle3`` methods, checked before launch.

vLLM builds the draft's ``ModelConfig`` from the drafter's ``config.json`` (its ``architectures`` must name a model
of its registry, ``vllm/model_executor/models/registry.py``), then, for ``eagle`` / ``eagle3``, wraps the config in
``EAGLEConfig`` (``vllm/transformers_utils/configs/eagle.py``), which renames each architecture, and inspects the
registry again (``SpeculativeConfig.update_arch_``, ``vllm/config/speculative.py``):

- ``eagle``: ``A`` -> ``EagleA`` unless ``A`` starts with ``Eagle``;
- ``eagle3``: ``A`` -> ``Eagle3A`` unless ``A`` starts or ends with ``Eagle3``.

An architecture neither step finds is refused at startup: "Model architectures [...] are not supported for now".
``ACCEPTED`` is every architecture of 0.33.0's registry whose renamed form is in it too (read from the registry
with the rule above; tests/servers/test_vllm_parser.py asks vLLM's own code about each and about the refused ones).
SGLang's EAGLE-1 format (``LlamaForCausalLMEagle``) is not among them: vLLM's EAGLE-1 heads name the base
architecture (``LlamaForCausalLM``, one layer). SGLang's EAGLE-3 format (``LlamaForCausalLMEagle3``) is.

The check is made only where it is certain: a local ``config.json`` with ``architectures``, not vLLM's own
formats (``model_type: eagle``, a ``speculators_config``: vLLM reads those otherwise) and no ``auto_map`` (custom
code may supply the model). ``draft_model`` and the model-free methods are not checked here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ACCEPTED", "VERSION", "architecture_problem", "renamed"]

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

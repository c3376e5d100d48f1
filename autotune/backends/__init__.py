"""Server backends. Adding a server is one module here plus one line in ``_BACKENDS``."""

from __future__ import annotations

import importlib

from autotune.backends.base import Backend

#: knob names each backend can search over (besides ``drafter`` and ``cuda_graph``)
KNOBS: dict[str, tuple[str, ...]] = {
    "sglang": ("num_steps", "topk", "num_draft_tokens"),
    "llamacpp": ("spec_type", "draft_n_max", "draft_n_min", "draft_p_min"),
    "vllm": ("method", "num_speculative_tokens"),
}

_BACKENDS = {
    "sglang": ("autotune.backends.sglang", "SGLangBackend"),
    "llamacpp": ("autotune.backends.llamacpp", "LlamaCppBackend"),
    "vllm": ("autotune.backends.vllm", "VLLMBackend"),
}


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def get_backend(name: str) -> Backend:
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


__all__ = ["KNOBS", "Backend", "backend_names", "get_backend"]

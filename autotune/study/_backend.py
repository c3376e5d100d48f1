"""Until ``Backend.params`` and ``Backend.size_knob`` land (wt-space, issue #12): the two backend members the study
uses that the ``Backend`` ABC of this branch does not declare yet. Delete this module at the merge and call
``backend.params(config, space)`` and ``backend.size_knob`` directly."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import Backend
from autotune.config import TrialConfig
from autotune.space import Space

#: the tree-size knob of each backend (SGLang, llama.cpp, vLLM), as the study found it before ``size_knob``
_SIZE_KNOBS = ("num_draft_tokens", "draft_n_max", "num_speculative_tokens")


def backend_params(backend: Backend, config: TrialConfig, space: Space) -> dict[str, Any]:
    """The Optuna params of ``config`` (what ``Backend.suggest`` would have suggested for it)."""
    to_params = getattr(backend, "params", None)  # until Backend.params lands
    return to_params(config, space) if to_params else config.to_dict()


def backend_size_knob(backend: Backend) -> str | None:
    """The knob that sets the draft tree's size (memory grows with it), None when the backend has none."""
    if hasattr(backend, "size_knob"):  # until Backend.size_knob lands
        return backend.size_knob  # type: ignore[attr-defined]
    return next((k for k in _SIZE_KNOBS if k in backend.knob_names), None)

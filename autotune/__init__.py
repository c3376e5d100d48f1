"""autotune: find the fastest speculative-decoding configuration of an LLM inference server, or prove that none
beats the baseline.

The command line (``autotune study|report|export ...``) is the product; for scripts, the same steps are here,
imported on first use (``import autotune`` itself loads nothing heavy)::

    import optuna
    import autotune

    space = autotune.load_space("spaces/llama-8b-eagle3.yaml")      # checked: SpaceError on bad input
    backend = autotune.get_backend(space.server.backend)
    sim = autotune.simulated_space(space)                           # the simulated server's space
    clock = autotune.VirtualClock()
    runner = autotune.ModelRunner(sim, backend, clock, seed=0)      # in-process simulator on a virtual clock
    study = autotune.open_study(space, optuna.storages.InMemoryStorage(), "demo", seed=0, simulated=True)
    autotune.run(sim, backend, runner, study, n_trials=8, clock=clock)  # baselines, search, confirmation
    report = autotune.build_report(study)                           # typed; .to_json() is `autotune report --json`
    print(report.verdict.value, report.recommended.config)

On real servers, a ``ProcessRunner`` (``autotune.process``) takes the ModelRunner's place.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

#: the public names and the module each is imported from on first use
_PUBLIC = {
    "load_space": "autotune.space",
    "Space": "autotune.space",
    "SpaceError": "autotune.errors",
    "UserError": "autotune.errors",
    "get_backend": "autotune.backends",
    "simulated_space": "autotune.sim",
    "ModelRunner": "autotune.sim.runner",
    "VirtualClock": "autotune.seam",
    "open_study": "autotune.study",
    "run": "autotune.study",
    "build_report": "autotune.report",
    "Verdict": "autotune.verdict",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value

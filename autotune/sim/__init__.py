"""The simulated server (SGLang's or vLLM's): a performance model of speculative decoding, served over real HTTP
(``python -m autotune.sim``) or run in-process on a virtual clock (``ModelRunner``).

``simulated_space(space)`` points a space at a scenario's stand-in checkpoints and at the simulator's launcher, so
everything downstream (checks, argv, process supervision, the HTTP client) runs unchanged.

``FIELD_REPORT_PROMPTS``: the field report's benchmark prompts (5 fixed prompts, max_tokens 1024, temperature 0).
"""

from __future__ import annotations

import dataclasses
import sys

from autotune.errors import SpaceError
from autotune.sim.launch import ENGINES, parse_launch_args
from autotune.sim.runner import ModelRunner
from autotune.sim.scenario import ScenarioError, ScenarioLoader, load_scenario, scenario_names
from autotune.space import SimulateSpec, Space

__all__ = [
    "FIELD_REPORT_PROMPTS",
    "ModelRunner",
    "PLAYED_BACKENDS",
    "load_scenario",
    "parse_launch_args",
    "scenario_names",
    "sim_launcher",
    "simulated_space",
]


def sim_launcher(spec: SimulateSpec, engine: str = "sglang") -> tuple[str, ...]:
    """The argv prefix that starts the simulator for ``spec`` playing server ``engine``; that server's flags follow
    it (``vllm serve``'s: the model first). ``--near-ties`` only when the space sets ``near_ties`` (else the
    scenario's value applies)."""
    argv: tuple[str, ...] = (sys.executable, "-m", "autotune.sim")
    if engine != "sglang":
        argv += ("--engine", engine)
    argv += (
        "--scenario",
        spec.scenario,
        "--time-scale",
        str(spec.time_scale),
        "--seed",
        str(spec.seed),
    )
    if spec.near_ties is not None:
        argv += ("--near-ties", str(spec.near_ties))
    return argv


#: the servers the simulator plays: it parses their launch flags (SGLang 0.5.23's, vLLM 0.33.0's)
PLAYED_BACKENDS = ENGINES


def simulated_space(space: Space, *, scenarios: ScenarioLoader = load_scenario, seam: bool = False) -> Space:
    """A copy of ``space`` that runs on the simulator: the target and each drafter point at the scenario's stand-in
    checkpoints (matched by drafter name), and the launcher starts ``python -m autotune.sim``. ``scenarios``
    resolves the scenario's name (default: the shipped ones; give the same to ``ModelRunner``). Raises SpaceError,
    also for a server the simulator does not play (``PLAYED_BACKENDS``) unless ``seam``: the caller's seam turns
    that server's launches into SGLang flags (a test's backend)."""
    if not seam and space.server.backend not in PLAYED_BACKENDS:
        raise SpaceError(
            f"--simulate plays {' and '.join(PLAYED_BACKENDS)} only (the simulator parses their launch flags); this "
            f"space's server is {space.server.backend!r}: run it on that server, without --simulate",
            path=space.path,
            field="server.backend",
        )
    spec = space.simulate or SimulateSpec()
    try:
        scenario = scenarios(spec.scenario)
    except ScenarioError as e:
        raise SpaceError(str(e), path=space.path, field="simulate.scenario") from None
    drafters = []
    for d in space.drafters:
        sd = scenario.drafters.get(d.name)
        if sd is None:
            raise SpaceError(
                f"drafter {d.name!r} has no stand-in in simulator scenario {scenario.name!r}; "
                f"its drafters are: {', '.join(scenario.drafters)}",
                path=space.path,
                field=f"drafters.{d.name}",
            )
        drafters.append(dataclasses.replace(d, path=sd.dir))
    engine = space.server.backend if space.server.backend in PLAYED_BACKENDS else "sglang"
    server = dataclasses.replace(space.server, model_path=scenario.target_dir, launcher=sim_launcher(spec, engine))
    return dataclasses.replace(space, server=server, drafters=tuple(drafters), simulate=spec)


#: (id, text): general relativity; merge sort (code); climate change; photosynthesis; ML vs traditional programming
FIELD_REPORT_PROMPTS: tuple[tuple[str, str], ...] = (
    ("relativity", "Explain the theory of general relativity in simple terms."),
    ("merge-sort", "Write a Python function that implements merge sort, and explain how it works."),
    ("climate", "What are the main causes and consequences of climate change?"),
    ("photosynthesis", "Describe the process of photosynthesis in detail."),
    ("ml-vs-programming", "How does machine learning differ from traditional programming?"),
)

"""What one server start costs on the simulated hardware, for the plan before a simulated study (``autotune.plan``):
the baseline's start-up and its expected seconds per prompt, from the same model the simulator serves with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.config import TrialConfig
from autotune.plan import Costs
from autotune.sim.engine import SimEngine
from autotune.sim.launch import SimLaunchError, parse_launch_args
from autotune.sim.runner import sim_argv

if TYPE_CHECKING:
    from autotune.space import Space


def costs(run_space: Space, backend: Any) -> Costs | None:
    """The baseline's start-up and mean expected seconds per prompt (``run_space``: the space as
    ``simulated_space`` rewrote it). None when the simulator would refuse the baseline (the study will say why)."""
    cg = bool(run_space.search.cuda_graph[-1]) if run_space.search.cuda_graph else True
    argv = list(backend.argv(TrialConfig.baseline(cg), run_space, port=run_space.server.port, simulate=True))
    try:
        args = parse_launch_args(sim_argv(argv))
    except SimLaunchError:
        return None
    engine = SimEngine(args, 0)
    bench = run_space.benchmark
    per = [
        engine.expected_ms(p.text, bench.max_tokens, temperature=bench.temperature, category=p.category) / 1000.0
        for p in bench.prompts
    ]
    name = run_space.simulate.scenario if run_space.simulate else "?"
    return Costs(
        startup_s=args.startup_s(),
        request_s=sum(per) / len(per) if per else 0.0,
        source=f"the simulated scenario {name}'s baseline",
    )


__all__ = ["costs"]

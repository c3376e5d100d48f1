"""Commands that measure without a study: ``bench`` (one config) and ``reverify`` (an exported config and its
baseline again). Each returns what the CLI renders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.commands.context import CommandOptions, Context, Note, preflight, reap, require_launcher

if TYPE_CHECKING:
    from autotune.config import Config, EffectiveConfig, KnobValue
    from autotune.measure import Measurement
    from autotune.reverify import ReverifyResult


@dataclass(frozen=True)
class BenchResult:
    """What ``autotune bench`` measured (``to_dict``: ``bench --json``)."""

    config: EffectiveConfig
    measurement: Measurement
    #: a simulated run's scenario and time scale (``study.storage.simulation_label``); None on a real server
    simulated: dict[str, Any] | None

    @property
    def objective(self) -> float | None:
        """With load levels: the weighted geometric mean over the levels; None without."""
        return self.measurement.tok_per_s if self.measurement.levels else None

    def to_dict(self) -> dict[str, object]:
        m = self.measurement
        data: dict[str, object] = {
            "config": self.config.to_dict(),
            "simulated": self.simulated,
            "argv": m.info.argv,
            "startup_s": m.info.startup_s,
            "server_effective": m.info.effective,
            "summary": m.summary,
            "prompts": [r.to_dict() for r in m.results],
        }
        if m.levels:  # load levels: each level's figures and the objective
            judged = ("speedup", "slo_broken")  # what a trial judges a level by: a bench has no baseline, no limits
            data["levels"] = [{k: v for k, v in lv.summary().to_dict().items() if k not in judged} for lv in m.levels]
            data["objective_tok_per_s"] = m.tok_per_s
        return data


def parse_value(v: str) -> KnobValue:
    """A ``--set`` value: true/on/yes, false/off/no, an int, a float, else the string."""
    low = v.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    for cast in (int, float):
        try:
            out: KnobValue = cast(v)
            return out
        except ValueError:
            pass
    return v


def bench_config(ctx: Context) -> EffectiveConfig:
    """The effective config of ``--set KEY=VALUE ...`` (``UserError`` for an unknown key or drafter, or a config
    the server would reject or rewrite)."""
    from autotune.config import TrialConfig
    from autotune.errors import InfeasibleConfig, UserError

    values: Config = {}
    for item in ctx.args.set:
        if "=" not in item:
            raise UserError(f"--set expects KEY=VALUE but got {item!r}")
        k, v = item.split("=", 1)
        values[k.strip()] = parse_value(v.strip())
    allowed = {"drafter", "cuda_graph", *ctx.backend.knob_names}
    if ctx.space.search.methods:  # a method space: the method and its knobs (each checked against it by resolve)
        allowed |= {"method", *(k for m in ctx.backend.methods.values() for k in m.knobs)}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise UserError(f"--set: unknown key(s) {', '.join(unknown)}; expected one of {', '.join(sorted(allowed))}")
    drafter = values.get("drafter")
    if drafter not in (None, "none") and drafter not in {d.name for d in ctx.space.drafters}:
        raise UserError(
            f"--set drafter={drafter}: no such drafter in {ctx.args.space}; expected one of "
            f"{', '.join(['none'] + [d.name for d in ctx.space.drafters])}"
        )
    values.setdefault("cuda_graph", ctx.space.search.cuda_graph[0])
    config = TrialConfig.from_dict(values)
    try:
        return ctx.backend.resolve(config, ctx.run_space)
    except InfeasibleConfig as e:
        raise UserError(f"this config would be rejected or rewritten by the server: {e}") from None


def bench(ctx: Context, *, note: Note, on_prompt: Callable[..., None] | None = None) -> BenchResult:
    """``autotune bench``: one config measured (launch, warm-up, prompts, load levels); ``on_prompt(i, result,
    results)`` after each prompt."""
    from autotune.measure import measure_config
    from autotune.study.storage import simulation_label

    eff = bench_config(ctx)
    require_launcher(ctx, "nothing was measured")
    reap(ctx, note)
    preflight(ctx)
    ctx.ensure_dirs()
    runner, _ = ctx.runner()
    m = measure_config(runner, eff, ctx.space, on_prompt=on_prompt)
    return BenchResult(eff, m, simulation_label(ctx.space) if ctx.simulated else None)


@dataclass(frozen=True)
class ReverifyOptions:
    """What ``autotune reverify`` was asked (``space``: when not the one the export names)."""

    exported: str
    space: str | None = None
    simulate: bool = False
    in_process: bool = False
    #: interleaved rounds of baseline + config (None: the space's ``verdict.repeats``)
    repeats: int | None = None
    studies_dir: str = "studies"


def reverify(args: ReverifyOptions, *, note: Note) -> ReverifyResult:
    """``autotune reverify``: the exported config and its baseline measured again, interleaved; the result (its
    ``holds``: the new interval overlaps the exported one)."""
    from autotune.errors import UserError
    from autotune.export_bundle import read_provenance
    from autotune.reverify import reverify as measure_again

    path = Path(args.exported)
    if not path.is_file():
        raise UserError(f"{args.exported}: no such file (expected a file written by `autotune export`)")
    try:
        prov = read_provenance(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except ValueError as e:
        raise UserError(str(e)) from None
    space = args.space or prov.get("space")
    if not space:
        raise UserError(f"{path}: the export names no space file; give one with --space")
    if args.repeats is not None and args.repeats < 2:
        raise UserError(f"--repeats must be at least 2 but got {args.repeats}")
    if prov.get("simulated") and not args.simulate:
        raise UserError(f"{path} was exported from a simulated study: re-verify it with --simulate")
    ctx = Context(
        CommandOptions(space, simulate=args.simulate, studies_dir=args.studies_dir, in_process=args.in_process)
    )
    if prov.get("study") and ctx.study_name != prov["study"]:
        # the space file was replaced or renamed since the export: what is measured must be the export's study
        raise UserError(
            f"{path} was exported from study {prov['study']}, but its space file {space} now describes study "
            f"{ctx.study_name}: give the space file that study ran with (--space FILE)"
        )
    require_launcher(ctx, "nothing was measured")
    reap(ctx, note)
    preflight(ctx)
    ctx.ensure_dirs()
    runner, _clock = ctx.runner(seed=ctx.space.simulate.seed if (ctx.simulated and ctx.space.simulate) else 0)
    return measure_again(
        ctx.run_space, ctx.backend, runner, prov, repeats=args.repeats, note=note, journal=_journal(ctx, prov)
    )


def _journal(ctx: Context, prov: dict[str, Any]) -> Path:
    """Where a re-verification keeps its rounds until its result stands, named by what is measured, so that only
    the same re-verification resumes from it."""
    import hashlib
    import json

    from autotune.study.storage import space_digest

    what = {"config": prov.get("config"), "baseline": (prov.get("baseline") or {}).get("config")}
    key = json.dumps({**what, "space": space_digest(ctx.run_space), "simulated": ctx.simulated}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return ctx.studies_dir / ctx.study_name / "reverify" / f"trial{prov.get('trial')}-{digest}.json"

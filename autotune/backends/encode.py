"""The Optuna encoding every backend's conditional knob tree goes through.

A backend walks its own tree (which knob depends on which) and asks here for each parameter, so that every
backend draws alike: ``drafter`` and ``cuda_graph`` first (``suggest_drafter``), then each knob among the values
its rules allow at that point of the tree (``suggest_int``: the space's range when nothing is cut, a prefix of it as
a shorter range, else a categorical). A parameter name always carries one distribution: a knob whose allowed
values depend on an earlier choice gets its own name where they differ from the space's (``cut_name``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.errors import InfeasibleConfig
from autotune.space.model import Choices, IntRange, ParamSpec

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space

__all__ = ["cut_name", "int_values", "spec_values", "suggest_drafter", "suggest_int"]


def spec_values(spec: ParamSpec | None) -> list[Any] | None:
    """Every value of a range of integers or a list of choices; None for no spec or a float range."""
    if isinstance(spec, IntRange):
        return spec.values()
    if isinstance(spec, Choices):
        return list(spec.values)
    return None


def int_values(spec: ParamSpec | None, server: str) -> list[int] | None:
    """``spec_values`` as integers, for knobs that only take integers; a float range is InfeasibleConfig."""
    if spec is None:
        return None
    values = spec_values(spec)
    if values is None:
        raise InfeasibleConfig(f"{server} knobs are integers; got a float range {spec!r}")
    return [int(v) for v in values]


def suggest_drafter(trial: optuna.trial.BaseTrial, space: Space, drafters: list[str] | None = None) -> tuple[str, bool]:
    """(drafter, cuda_graph): ``drafters`` (default: the searched ones) and the space's CUDA-graph settings. The
    baseline is never among them: the study enqueues it (role=baseline) once per CUDA-graph setting."""
    names = list(space.searched_drafters()) if drafters is None else drafters
    drafter = str(trial.suggest_categorical("drafter", names))
    cuda_graph = bool(trial.suggest_categorical("cuda_graph", [bool(b) for b in space.search.cuda_graph]))
    return drafter, cuda_graph


def suggest_int(
    trial: optuna.trial.BaseTrial, name: str, spec: ParamSpec | None, allowed: list[int], *, log: bool | None = None
) -> int:
    """One of ``allowed`` (the values of ``spec`` the tree allows here): the space's whole range as an integer
    range (on a log scale when ``log``, default the range's own), a prefix of it as a shorter range, otherwise a
    categorical. Without a spec a single allowed value is taken as is."""
    if len(allowed) == 1 and spec is None:
        return allowed[0]
    full = spec_values(spec)
    if isinstance(spec, IntRange) and allowed == full:
        return int(trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log if log is None else log))
    if isinstance(spec, IntRange) and full is not None and allowed and allowed == full[: len(allowed)] and not spec.log:
        return int(trial.suggest_int(name, allowed[0], allowed[-1], step=spec.step))
    return int(trial.suggest_categorical(name, list(allowed)))


def cut_name(name: str, allowed: list[Any], full: list[Any] | None, suffix: str) -> str:
    """``name`` when ``allowed`` is the space's whole list ``full``, else ``name_suffix`` (its own distribution)."""
    return name if allowed == (full or []) else f"{name}_{suffix}"

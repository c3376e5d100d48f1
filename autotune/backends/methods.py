"""Speculative methods as a searched choice, and the Optuna encoding every backend's conditional knob tree goes
through.

A space that lists ``search.methods`` searches which way of speculating as well as each way's knobs; each backend
declares its catalogue (``Backend.methods``: name -> ``autotune.servers.Method``). In a ``TrialConfig`` the method is
the knob ``method``; a model-free method's config has drafter None. Optuna params of a method space: ``method``,
``cuda_graph``, ``METHOD.drafter`` and each knob as ``METHOD.KNOB`` (``param_name``).

Every backend draws alike: ``drafter`` and ``cuda_graph`` first (``suggest_drafter``), then each knob among the
values its rules allow at that point of the tree (``suggest_int``). A parameter name always carries one
distribution: a knob whose allowed values depend on an earlier choice gets its own name where they differ from the
space's (``cut_name``).
"""

from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.config import EffectiveConfig, KnobValue, TrialConfig
from autotune.errors import InfeasibleConfig
from autotune.servers import Method
from autotune.space.model import Choices, FloatRange, IntRange, ParamSpec

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space


#: the knob of a ``TrialConfig`` that names its method (only in spaces with ``search.methods``)
METHOD_KNOB = "method"


def param_name(method: str, knob: str) -> str:
    """The Optuna param of ``knob`` of ``method`` (``eagle3.num_steps``); ``drafter`` for its drafter."""
    return f"{method}.{knob}"


# -- a method tree walk asks its questions of one of these: Optuna (suggest) or a config's values (params) --


class OptunaAsk:
    """Answers a method tree walk's questions from an Optuna trial (``suggest``)."""

    def __init__(self, trial: optuna.trial.BaseTrial) -> None:
        self.trial = trial

    def categorical(self, knob: str, name: str, choices: list[Any]) -> Any:
        return self.trial.suggest_categorical(name, choices)

    def int(self, knob: str, name: str, spec: ParamSpec | None, allowed: list[int]) -> int:
        return suggest_int(self.trial, name, spec, allowed)

    def number(self, knob: str, name: str, spec: ParamSpec) -> Any:
        if isinstance(spec, FloatRange):
            return float(self.trial.suggest_float(name, spec.low, spec.high, log=spec.log))
        if isinstance(spec, IntRange):
            return int(self.trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log))
        assert isinstance(spec, Choices)
        return self.trial.suggest_categorical(name, list(spec.values))


class ReplayAsk:
    """Answers from a config's values and records the params the walk asked (``params``)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        self.params: dict[str, KnobValue | None] = {}

    def _take(self, knob: str, name: str, value: Any) -> Any:
        self.params[name] = value
        return value

    def categorical(self, knob: str, name: str, choices: list[Any]) -> Any:
        v = self.values.get(knob)
        if v not in choices:
            raise InfeasibleConfig(f"{knob}={v!r} is not among the space's values {choices}")
        return self._take(knob, name, v)

    def int(self, knob: str, name: str, spec: ParamSpec | None, allowed: list[int]) -> int:
        v = self.values.get(knob)
        if len(allowed) == 1 and spec is None:
            return allowed[0]
        if v not in allowed:
            raise InfeasibleConfig(f"{knob}={v!r} is not among the feasible values {allowed}")
        return int(self._take(knob, name, int(v)))

    def number(self, knob: str, name: str, spec: ParamSpec) -> Any:
        return self._take(knob, name, self.values.get(knob))


class MethodWalk(ABC):
    """What every backend's method tree shares: the methods a space offers, each knob's spec, and the one walk
    behind ``suggest`` (Optuna asks) and ``params`` (a config's values replayed), which draws ``method``,
    ``cuda_graph`` and the method's drafter, then the method's knobs (``walk_knobs``), so the two never disagree;
    ``resolve`` checks the method, its drafter and its knob names, then resolves the knobs (``resolve_knobs``)."""

    #: the backend's catalogue (name -> ``Method``)
    catalogue: Mapping[str, Method] = {}

    # -- what the space offers -----------------------------------------------------------------------------

    def unavailable(self, space: Space, method: str) -> str | None:
        """Why ``method`` cannot run with the space's target (None: it can, or unknown here)."""
        return None

    def available(self, space: Space) -> list[str]:
        return [m for m in space.search.methods if self.unavailable(space, m) is None]

    def default(self, space: Space, method: str, knob: str) -> Any:
        """The server's own value of ``knob`` of ``method`` (what a launch without the flag runs)."""
        return self.catalogue[method].defaults[knob]

    def spec(self, space: Space, method: str, knob: str) -> ParamSpec:
        """The method's spec of ``knob``; a knob not searched stays at the server's own value."""
        got = space.search.methods[method].knobs.get(knob)
        return got if got is not None else Choices((self.default(space, method, knob),))

    # -- the walk ------------------------------------------------------------------------------------------

    def walk(self, ask: Any, space: Space, method: str | None = None) -> TrialConfig:
        methods = self.available(space)
        if not methods:
            raise InfeasibleConfig("no method of search.methods can run with this target")
        method = ask.categorical(METHOD_KNOB, METHOD_KNOB, methods) if method is None else method
        cg = ask.categorical("cuda_graph", "cuda_graph", [bool(b) for b in space.search.cuda_graph])
        drafter = None
        if self.catalogue[method].needs_drafter:
            drafter = ask.categorical(
                "drafter", param_name(method, "drafter"), list(space.search.methods[method].drafters)
            )
        return TrialConfig.make(drafter, bool(cg), method=method, **self.walk_knobs(ask, space, method))

    @abstractmethod
    def walk_knobs(self, ask: Any, space: Space, method: str) -> Mapping[str, KnobValue]:
        """The knobs of ``method``, each asked of ``ask`` (``OptunaAsk`` or ``ReplayAsk``) in the tree's order."""

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        return self.walk(OptunaAsk(trial), space)

    def params(self, config: TrialConfig, space: Space) -> dict[str, KnobValue | None]:
        values = {**config.knob_dict, "cuda_graph": bool(config.cuda_graph), "drafter": config.drafter}
        ask = ReplayAsk(values)
        method = str(config.knob(METHOD_KNOB))
        ask.params[METHOD_KNOB] = method
        self.walk(ask, space, method=method)
        return ask.params

    # -- resolution ----------------------------------------------------------------------------------------

    def knob_names(self, method: str) -> set[str]:
        """The knobs a config of ``method`` may carry (besides ``method``)."""
        return set(self.catalogue[method].knobs)

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        method = config.knob(METHOD_KNOB)
        if method not in space.search.methods:
            raise InfeasibleConfig(f"method {method!r} is not in the space's search.methods")
        why = self.unavailable(space, str(method))
        if why:
            raise InfeasibleConfig(why)
        cat = self.catalogue[method]
        if cat.needs_drafter:
            if config.drafter not in space.search.methods[method].drafters:
                raise InfeasibleConfig(f"drafter {config.drafter!r} is not one of method {method}'s drafters")
        elif config.drafter is not None:
            raise InfeasibleConfig(f"method {method} ({cat.label}) runs no drafter; got {config.drafter!r}")
        unknown = sorted(set(config.knob_dict) - {METHOD_KNOB, *self.knob_names(str(method))})
        if unknown:
            raise InfeasibleConfig(f"unknown knobs {unknown} for method {method}")
        return self.resolve_knobs(config, space, str(method))

    @abstractmethod
    def resolve_knobs(self, config: TrialConfig, space: Space, method: str) -> EffectiveConfig:
        """``config`` of ``method`` (its method, drafter and knob names checked) as the server would run it;
        InfeasibleConfig when the server would refuse it."""

    @abstractmethod
    def defaults(self, space: Space) -> list[TrialConfig]:
        """The server's own config of every available method x drafter, moved to the nearest point of the space."""

    @abstractmethod
    def grid(self, space: Space) -> list[TrialConfig] | None:
        """Every feasible point of every available method (None when a knob is a float range)."""

    def knob_or_default(self, config: TrialConfig, space: Space, method: str, knob: str) -> Any:
        """``config``'s value of ``knob``, else the server's own (``default``)."""
        v = config.knob(knob)
        return self.default(space, method, knob) if v is None else v


class FlatMethods(MethodWalk):
    """Suggest, replay, resolve and enumerate the configs of a space with ``search.methods`` whose methods' knobs are
    flat (integers and floats in their domains), with ``pairs``: (maximum, minimum, lowest maximum) knob pairs where
    the minimum is drawn at most the maximum (named ``MIN_le{N}`` when that cuts the list). A backend subclasses it
    with its catalogue, its pairs and ``unavailable``, and adds its argv."""

    #: (maximum knob, minimum knob, lowest maximum)
    pairs: tuple[tuple[str, str, int], ...] = ()

    def _ints(self, space: Space, method: str, knob: str, low: int, high: int = 1024) -> list[int]:
        return [int(v) for v in spec_values(self.spec(space, method, knob)) or [] if low <= int(v) <= high]

    # -- the walk ------------------------------------------------------------------------------------------

    def walk_knobs(self, ask: Any, space: Space, method: str) -> Mapping[str, KnobValue]:
        cat = self.catalogue[method]
        knobs: dict[str, KnobValue] = {}
        for top, bottom, low in self.pairs:
            if top in cat.knobs:
                knobs.update(self._walk_pair(ask, space, method, top, bottom, low))
        for knob in cat.knobs:
            if knob in knobs:
                continue
            dom = cat.knobs[knob]
            if dom.kind == "float":
                knobs[knob] = float(ask.number(knob, param_name(method, knob), self.spec(space, method, knob)))
                continue
            allowed = self._ints(space, method, knob, int(dom.low or 0), int(dom.high or 1024))
            if not allowed:
                raise InfeasibleConfig(f"no value of {method}.{knob} lies in [{dom.low}, {dom.high or 1024}]")
            knobs[knob] = ask.int(knob, param_name(method, knob), self.spec(space, method, knob), allowed)
        return knobs

    def _walk_pair(self, ask: Any, space: Space, method: str, top: str, bottom: str, low: int) -> dict[str, int]:
        """A maximum and a minimum drawn at most the maximum (named ``BOTTOM_le{N}`` when that cuts the list)."""
        tops = [t for t in self._ints(space, method, top, low) if self._ints(space, method, bottom, 0, t)]
        if not tops:
            raise InfeasibleConfig(f"no {method}.{top} with a {bottom} at most it")
        t = ask.int(top, param_name(method, top), self.spec(space, method, top), tops)
        mins = self._ints(space, method, bottom, 0, t)
        full = spec_values(self.spec(space, method, bottom))
        name = cut_name(bottom, mins, full, f"le{t}")
        return {top: t, bottom: ask.int(bottom, param_name(method, name), self.spec(space, method, bottom), mins)}

    def pair_problem(self, top: str, bottom: str, high: int, low: int) -> str:
        return f"{bottom} ({low}) must not exceed {top} ({high})"

    # -- resolution ----------------------------------------------------------------------------------------

    def resolve_knobs(self, config: TrialConfig, space: Space, method: str) -> EffectiveConfig:
        cat = self.catalogue[method]
        v: dict[str, Any] = {}
        for knob, dom in cat.knobs.items():
            raw = self.knob_or_default(config, space, method, knob)
            if dom.kind == "float":
                x: Any = float(raw)
                if (dom.low is not None and x < dom.low) or (dom.high is not None and x > dom.high):
                    raise InfeasibleConfig(f"{knob} must be in [{dom.low}, {dom.high}] but got {raw!r}")
            else:
                x = int(raw)
                lo, hi = int(dom.low or 0), int(dom.high) if dom.high is not None else None
                if x < lo or (hi is not None and x > hi):
                    raise InfeasibleConfig(f"{knob} must be in [{lo}, {hi if hi is not None else 'inf'}] but got {x}")
            v[knob] = x
        for top, bottom, _ in self.pairs:
            if top in v and v[bottom] > v[top]:
                raise InfeasibleConfig(self.pair_problem(top, bottom, v[top], v[bottom]))
        return EffectiveConfig.make(config.drafter, config.cuda_graph, method=method, **v)

    # -- enumeration ---------------------------------------------------------------------------------------

    def _points(self, space: Space, method: str, nearest_default: bool) -> list[dict[str, Any]] | None:
        cat = self.catalogue[method]
        axes: dict[str, list[Any]] = {}
        for knob in cat.knobs:
            spec = self.spec(space, method, knob)
            values = spec_values(spec)
            if values is None:
                if not nearest_default:
                    return None
                assert isinstance(spec, FloatRange)
                values = [min(max(float(cat.defaults[knob]), spec.low), spec.high)]
            if nearest_default:
                d = cat.defaults[knob]
                values = [min(values, key=lambda x: (abs(float(x) - float(d)), float(x)))]
            axes[knob] = list(values)
        return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]

    def _configs(
        self, space: Space, method: str, points: list[dict[str, Any]], graphs: list[bool]
    ) -> list[TrialConfig]:
        out: list[TrialConfig] = []
        drafters = list(space.search.methods[method].drafters) if self.catalogue[method].needs_drafter else [None]
        for d in drafters:
            for cg in graphs:
                for p in points:
                    try:
                        out.append(self.resolve(TrialConfig.make(d, cg, method=method, **p), space))
                    except (InfeasibleConfig, ValueError):
                        continue
        return out

    def defaults(self, space: Space) -> list[TrialConfig]:
        """As ``MethodWalk.defaults``, a minimum above its maximum lowered to it."""
        cg = any(space.search.cuda_graph)
        out: list[TrialConfig] = []
        for method in self.available(space):
            points = self._points(space, method, nearest_default=True) or []
            for p in points:
                for top, bottom, _ in self.pairs:
                    if top in p and p[bottom] > p[top]:
                        lower = self._ints(space, method, bottom, 0, p[top])
                        if lower:
                            p[bottom] = max(lower)
            out += self._configs(space, method, points, [cg])
        return out

    def grid(self, space: Space) -> list[TrialConfig] | None:
        out: list[TrialConfig] = []
        graphs = [bool(b) for b in space.search.cuda_graph]
        for method in self.available(space):
            points = self._points(space, method, nearest_default=False)
            if points is None:
                return None
            out += self._configs(space, method, points, graphs)
        return out


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
    """(drafter, cuda_graph) among ``drafters`` (default: the searched ones) and the space's CUDA-graph settings. The
    baseline is never among them: the study enqueues it (role=baseline)."""
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


def nearest(values: list[Any], target: Any) -> Any:
    """``target`` when among ``values``, else the number of ``values`` nearest it (the smaller on a tie), else the
    first value (``target`` when there are none)."""
    if target in values:
        return target
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if nums and isinstance(target, int | float):
        return min(nums, key=lambda v: (abs(v - target), v))
    return values[0] if values else target


def feasible(
    resolve: Callable[[TrialConfig, Space], EffectiveConfig], configs: Iterable[TrialConfig], space: Space
) -> list[TrialConfig]:
    """``configs`` resolved, those the server would refuse (InfeasibleConfig) left out."""
    out: list[TrialConfig] = []
    for cfg in configs:
        with contextlib.suppress(InfeasibleConfig):
            out.append(resolve(cfg, space))
    return out


def cut_name(name: str, allowed: list[Any], full: list[Any] | None, suffix: str) -> str:
    """``name`` when ``allowed`` is the space's whole list ``full``, else ``name_suffix`` (its own distribution)."""
    return name if allowed == (full or []) else f"{name}_{suffix}"

"""Speculative methods as a searched choice: the generic catalogue entry (``Method``) every backend fills.

A space that lists ``search.methods`` searches *which way of speculating* as well as each way's knobs. Each backend
declares its catalogue (``Backend.methods``: name -> ``Method``): the method's name in a space file, a label for
reports, whether it needs a drafter from the space's ``drafters`` (and which kind), its knobs with their domains and
the server's own defaults, whether it is the engine's adaptive mode, and the server version that added it.

In a ``TrialConfig`` the method is the knob ``method`` (present only in method spaces); a model-free method's config
has drafter None. Optuna params of a method space: ``method`` (categorical over the space's methods), ``cuda_graph``,
``METHOD.drafter`` (categorical over that method's drafters, when it needs one) and each knob as ``METHOD.KNOB``
(``param_name``), so every parameter name keeps one distribution whichever method a trial draws.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.backends import encode
from autotune.backends.base import KnobDomain
from autotune.errors import InfeasibleConfig
from autotune.space.model import Choices, FloatRange, IntRange, ParamSpec

if TYPE_CHECKING:
    import optuna

__all__ = ["METHOD_KNOB", "Method", "OptunaAsk", "ReplayAsk", "param_name", "version_lacks"]

#: the knob of a ``TrialConfig`` that names its method (only in spaces with ``search.methods``)
METHOD_KNOB = "method"


@dataclass(frozen=True)
class Method:
    """One way of speculating a backend offers.

    ``name``: the key in ``search.methods``; ``label``: how reports name it ("EAGLE-3", "n-gram");
    ``needs_drafter``: the method runs a checkpoint from the space's ``drafters`` (``drafter_kind`` says which: "an
    EAGLE head", "a small draft model"); ``knobs``: the knobs ``search.methods.NAME`` may search, with their domains;
    ``defaults``: the server's own value of each knob (what a launch without the flag runs); ``adaptive``: the
    engine's runtime controller (compared in reports with the tuned static config it competes with); ``since``:
    the first server version that has the method (None: every version autotune targets); ``knob_since``: the same
    per knob."""

    name: str
    label: str
    needs_drafter: bool
    knobs: Mapping[str, KnobDomain] = field(default_factory=dict)
    defaults: Mapping[str, object] = field(default_factory=dict)
    adaptive: bool = False
    since: str | None = None
    knob_since: Mapping[str, str] = field(default_factory=dict)
    drafter_kind: str = "a drafter"
    #: what the version note says when ``since`` was assumed rather than read from the server's source
    since_note: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.defaults) - set(self.knobs))
        if unknown:
            raise ValueError(f"method {self.name}: defaults for unknown knobs {unknown}")


def param_name(method: str, knob: str) -> str:
    """The Optuna param of ``knob`` of ``method`` (``eagle3.num_steps``); ``drafter`` for its drafter."""
    return f"{method}.{knob}"


def version_lacks(version: str | None, since: str | None) -> bool:
    """Whether server ``version`` predates ``since`` (False when either is unknown)."""
    if not version or not since:
        return False
    a, b = _numbers(version), _numbers(since)
    return bool(a and b and a < b)


def _numbers(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)``: the leading numeric components."""
    out: list[int] = []
    for piece in version.strip().lstrip("vVb").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        out.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(out)


# -- a method tree walk asks its questions of one of these: Optuna (suggest) or a config's values (params) --


class OptunaAsk:
    """Answers a method tree walk's questions from an Optuna trial (``suggest``)."""

    def __init__(self, trial: optuna.trial.BaseTrial) -> None:
        self.trial = trial

    def categorical(self, knob: str, name: str, choices: list[Any]) -> Any:
        return self.trial.suggest_categorical(name, choices)

    def int(self, knob: str, name: str, spec: ParamSpec | None, allowed: list[int]) -> int:
        return encode.suggest_int(self.trial, name, spec, allowed)

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
        self.params: dict[str, Any] = {}

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

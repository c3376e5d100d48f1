"""The study attr ``confirmation`` typed: the confirmation's state (``ConfirmationState``) and its rounds (``Round``).

Both read from and write to the stored JSON unchanged: rounds keep CUDA-graph settings as ``"True"``/``"False"``
and trial numbers and load levels as strings there, real ``bool`` / ``int`` keys here; the state writes its keys
in the order they were first set (as the dict it replaces did), and keeps keys it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from autotune.verdict import Verdict
from autotune.warmup import WarmUp

_GRAPHS = {"True": True, "False": False}


def _graph(key: str) -> bool:
    if key not in _GRAPHS:
        raise ValueError(f"a round's CUDA-graph key must be 'True' or 'False' but got {key!r}")
    return _GRAPHS[key]


@dataclass
class RoundLevels:
    """With load levels: each start's ``{level: tok/s}``, baselines by setting, candidates by trial number."""

    baseline: dict[bool, dict[int, float]] = field(default_factory=dict)
    candidates: dict[int, dict[int, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoundLevels:
        return cls(
            {_graph(k): {int(c): v for c, v in lv.items()} for k, lv in (d.get("baseline") or {}).items()},
            {int(k): {int(c): v for c, v in lv.items()} for k, lv in (d.get("candidates") or {}).items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": {str(k): {str(c): v for c, v in lv.items()} for k, lv in self.baseline.items()},
            "candidates": {str(k): {str(c): v for c, v in lv.items()} for k, lv in self.candidates.items()},
        }


@dataclass
class StartRecord:
    """One confirmation start's detail: its per-prompt tok/s (one list: the pass of the prompts it measured), its
    start-up seconds, its timed seconds (the prompts, and the load levels above 1), its warm-up passes, and the
    server seconds of the starts of the same config that failed before it in its round (``measure.measure_fresh``)."""

    tok_per_s: list[list[float]]
    startup_s: float
    seconds: float
    warmup: WarmUp = WarmUp()  # its untimed warm-up passes (``autotune.warmup``), when it had any
    failed_s: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StartRecord:
        return cls(
            [list(map(float, p)) for p in d.get("tok_per_s") or []],
            float(d["startup_s"]),
            float(d["seconds"]),
            WarmUp.from_dict(d.get("warmup")),
            tuple(float(x) for x in d.get("failed_s") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tok_per_s": self.tok_per_s, "startup_s": self.startup_s, "seconds": self.seconds}
        if self.warmup.passes:
            out["warmup"] = self.warmup.to_dict()
        if self.failed_s:
            out["failed_s"] = list(self.failed_s)
        return out


@dataclass
class RoundStarts:
    """Each start's ``StartRecord``: baselines by CUDA-graph setting, candidates by trial number."""

    baseline: dict[bool, StartRecord] = field(default_factory=dict)
    candidates: dict[int, StartRecord] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoundStarts:
        return cls(
            {_graph(k): StartRecord.from_dict(v) for k, v in (d.get("baseline") or {}).items()},
            {int(k): StartRecord.from_dict(v) for k, v in (d.get("candidates") or {}).items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": {str(k): v.to_dict() for k, v in self.baseline.items()},
            "candidates": {str(k): v.to_dict() for k, v in self.candidates.items()},
        }


@dataclass
class Round:
    """One round: a fresh baseline start per CUDA-graph setting and one start per candidate still racing (tok/s);
    ``starts`` each start's per-prompt detail (rounds recorded before it was kept have none)."""

    baseline: dict[bool, float] = field(default_factory=dict)
    candidates: dict[int, float] = field(default_factory=dict)
    levels: RoundLevels | None = None
    starts: RoundStarts | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Round:
        lv, st = d.get("levels"), d.get("starts")
        return cls(
            {_graph(k): v for k, v in (d.get("baseline") or {}).items()},
            {int(k): v for k, v in (d.get("candidates") or {}).items()},
            None if lv is None else RoundLevels.from_dict(lv),
            None if st is None else RoundStarts.from_dict(st),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "baseline": {str(k): v for k, v in self.baseline.items()},
            "candidates": {str(k): v for k, v in self.candidates.items()},
        }
        if self.levels is not None:
            out["levels"] = self.levels.to_dict()
        if self.starts is not None:
            out["starts"] = self.starts.to_dict()
        return out


def rounds_from(stored: list[dict[str, Any]] | None) -> list[Round]:
    return [Round.from_dict(r) for r in stored or []]


def rounds_to(rounds: list[Round]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in rounds]


@dataclass(eq=False)
class ConfirmationState:
    """The study attr ``confirmation``: recorded after every round, so that a killed run resumes it. A field is
    stored once it is set (``recorded``); unset ones read as None."""

    keys: list[str | None]  # the candidates' config keys
    rounds: list[Round] = field(default_factory=list)
    done: bool = field(default=False, init=False)
    level_only: list[int] | None = field(default=None, init=False)  # candidates confirmed for a level's sake
    deploy_cuda_graph: bool | None = field(default=None, init=False)  # the fastest search baseline's setting
    results: list[dict[str, Any]] | None = field(default=None, init=False)  # per candidate (``race.candidate_result``)
    # with load levels (``autotune.study.levels``): per candidate {level: interval}; per level the best candidate,
    # its interval and the level's verdict; "speculation wins up to 8 streams, loses from 32"
    level_results: dict[str, dict[str, Any]] | None = field(default=None, init=False)
    level_verdicts: list[dict[str, Any]] | None = field(default=None, init=False)
    level_text: str | None = field(default=None, init=False)
    confidence: float | None = field(default=None, init=False)  # of the verdict's intervals
    exclusions: list[dict[str, Any]] | None = field(default=None, init=False)  # ``records.find_exclusions``
    verdict: Verdict | None = field(default=None, init=False)
    best: int | None = field(default=None, init=False)
    basis: str | None = field(default=None, init=False)  # confirmed | not-confirmed | search
    rests_on: str | None = field(default=None, init=False)  # what the verdict rests on, in words
    note: str | None = field(default=None, init=False)
    # the search's baseline against confirmation's fresh ones (``autotune.study.baseline_check``): fresh baselines
    # alone when the search left nothing to confirm, the checks, baseline-rule prunes a fast baseline may have caused
    check_rounds: list[Round] | None = field(default=None, init=False)
    baseline_check: list[dict[str, Any]] | None = field(default=None, init=False)
    suspect_prunes: list[dict[str, Any]] | None = field(default=None, init=False)
    # an inconclusive verdict whose pick straddles the bar: what settling it would take (``confirm._to_settle``)
    to_settle: dict[str, Any] | None = field(default=None, init=False)
    # candidates whose starts failed in a round (a crash on every fresh start it got, a refusal, a timeout):
    # [{"trial", "kind", "reason", "round", "failed_s"}] (``failed_s``: each failed start's server seconds), out of
    # the race and listed among the exclusions
    failed: list[dict[str, Any]] | None = field(default=None, init=False)
    # the server seconds of fresh baseline starts that failed in a round whose baseline could not be measured
    # (``confirm._baseline``: confirmation stopped there; a resumed study goes on from the rounds), billed
    lost_s: list[float] | None = field(default=None, init=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _FIELDS:
            order = self.__dict__.setdefault("_order", [])
            if name not in order:
                order.append(name)

    def recorded(self, name: str) -> bool:
        """Whether ``name`` is stored (set, to None or not)."""
        return name in self.__dict__.get("_order", [])

    @classmethod
    def not_confirmed(cls, note: str, exclusions: list[dict[str, Any]]) -> ConfirmationState:
        """Configs worth confirming exist but the space asks for no (usable) confirmation: nothing is proven."""
        s = cls.__new__(cls)
        s.keys, s.rounds, s.results, s.best, s.done = [], [], [], None, True
        s.verdict, s.basis, s.rests_on, s.note, s.exclusions = (
            Verdict.INCONCLUSIVE,
            "not-confirmed",
            note,
            note,
            exclusions,
        )
        return s

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConfirmationState:
        s = cls.__new__(cls)
        object.__setattr__(s, "rounds", [])
        extra: dict[str, Any] = {}
        object.__setattr__(s, "_extra", extra)
        for k, v in d.items():
            if k in _DECODE:
                setattr(s, k, _DECODE[k](v))
            elif k in _FIELDS:
                setattr(s, k, v)
            else:
                extra[k] = v
                s.__dict__.setdefault("_order", []).append(k)
        return s

    def to_dict(self) -> dict[str, Any]:
        extra = self.__dict__.get("_extra", {})
        out = {}
        for k in self.__dict__.get("_order", []):
            if k in extra:
                out[k] = extra[k]
            else:
                v = getattr(self, k)
                out[k] = _ENCODE[k](v) if k in _ENCODE and v is not None else v
        return out

    def __getitem__(self, key: str) -> Any:
        """The stored (JSON) form of one key, for readers of the study attr's shape."""
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when the state has no such key (the benchmark scripts read it so)."""
        return self.to_dict().get(key, default)


_FIELDS = frozenset(f.name for f in fields(ConfirmationState))
_DECODE: dict[str, Any] = {
    "rounds": rounds_from,
    "check_rounds": rounds_from,
    "level_only": lambda v: None if v is None else [int(x) for x in v],
    "verdict": lambda v: None if v is None else Verdict(v),
}
_ENCODE: dict[str, Any] = {
    "rounds": rounds_to,
    "check_rounds": rounds_to,
    "level_only": lambda v: [str(x) for x in v],
    "verdict": lambda v: Verdict(v).value,
}

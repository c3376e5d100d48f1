"""llama.cpp's speculative types as a searched choice (``search.methods``), with llama-server's own rules.

Read from the llama.cpp vendored by llama-cpp-python 0.3.36 (commit 0c1e570: ``common/arg.cpp``,
``common/speculative.cpp``, ``common/common.h``, ``tools/server/server-context.cpp``):

- ``--spec-type`` takes a comma list; each name is looked up (an unknown one is an error, ``none`` anywhere means no
  speculation). A method's name is the type, or the comma list of types for a combination
  (``draft-simple,ngram-mod``): every listed type gets an implementation, tried per step in a fixed priority
  (``common_speculative_init``: ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, then the draft
  types); the first one that drafts wins that step. So the list's order does not matter to the server.
- Draft types: ``draft-simple`` (a small draft GGUF, ``-md``), ``draft-eagle3`` (an EAGLE-3 GGUF, ``-md``),
  ``draft-mtp`` (the target's own MTP layers: no ``-md``; a target whose GGUF has no ``blk.N.nextn.eh_proj.weight``
  tensor has none, and the method is not searched). They share ``draft_n_max`` / ``draft_n_min`` / ``draft_p_min``
  (``--spec-draft-n-max`` 3, ``--spec-draft-n-min`` 0, ``--spec-draft-p-min`` 0.0). One server loads one draft model:
  a combination names at most one draft type.
- Model-free types, each with its own flags (``common.h`` defaults): ``ngram-simple``, ``ngram-map-k``,
  ``ngram-map-k4v`` (``--spec-ngram-{TYPE}-size-n`` 12, ``-size-m`` 48, ``-min-hits`` 1; sizes 1..1024, hits >= 1),
  ``ngram-mod`` (``--spec-ngram-mod-n-match`` 24, ``-n-max`` 64, ``-n-min`` 48; a draft shorter than n-min is dropped,
  so n-min > n-max never drafts and is refused), ``ngram-cache`` (no flags: 8 draft tokens, fixed in the source).
  The draft knobs do not apply to them.
- The binary lists its types in ``--help`` (``--spec-type none,draft-simple,...``): a method naming a type the probed
  binary does not list is refused before launch (``UserError``), naming what it lists.

Whether a type engaged is read from each answer's ``timings.draft_n`` / ``draft_n_accepted`` (the backend's accept
length). A model-free method is not held to the not-engaged alarm: a prompt with nothing to copy drafts nothing,
a measured loss, not a misconfiguration (``checks_engagement``).

Optuna params: ``method``, ``cuda_graph``, ``METHOD.drafter`` and ``METHOD.KNOB`` (``draft_n_min`` and
``ngram_mod_n_min`` cut below their maximum as ``encode.cut_name`` names it), one walk for ``suggest`` and ``params``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from autotune.backends import encode
from autotune.backends.base import KnobDomain
from autotune.backends.methods import METHOD_KNOB, Method, OptunaAsk, ReplayAsk, param_name
from autotune.config import EffectiveConfig, TrialConfig
from autotune.errors import InfeasibleConfig, UserError
from autotune.space.model import Choices, FloatRange, ParamSpec

if TYPE_CHECKING:
    import optuna

    from autotune.space import Space

#: the draft types' shared knobs and the server's defaults (``common_params_speculative_draft``)
DRAFT_KNOBS: dict[str, KnobDomain] = {
    "draft_n_max": KnobDomain("int", 1),
    "draft_n_min": KnobDomain("int", 0),
    "draft_p_min": KnobDomain("float", 0.0, 1.0),
}
DRAFT_DEFAULTS: dict[str, Any] = {"draft_n_max": 3, "draft_n_min": 0, "draft_p_min": 0.0}


def _map_knobs(prefix: str) -> tuple[dict[str, KnobDomain], dict[str, Any]]:
    knobs = {
        f"{prefix}_size_n": KnobDomain("int", 1, 1024),
        f"{prefix}_size_m": KnobDomain("int", 1, 1024),
        f"{prefix}_min_hits": KnobDomain("int", 1),
    }
    return knobs, {f"{prefix}_size_n": 12, f"{prefix}_size_m": 48, f"{prefix}_min_hits": 1}


_SIMPLE = _map_knobs("ngram_simple")
_MAP_K = _map_knobs("ngram_map_k")
_MAP_K4V = _map_knobs("ngram_map_k4v")
_MOD = (
    {
        "ngram_mod_n_match": KnobDomain("int", 1, 1024),
        "ngram_mod_n_max": KnobDomain("int", 0, 1024),
        "ngram_mod_n_min": KnobDomain("int", 0, 1024),
    },
    {"ngram_mod_n_match": 24, "ngram_mod_n_max": 64, "ngram_mod_n_min": 48},
)

#: the single types autotune searches (draft-dflash / draft-dspark need drafters of their own kind: not here)
SINGLE: dict[str, Method] = {
    "draft-simple": Method(
        "draft-simple", "draft model", True, DRAFT_KNOBS, DRAFT_DEFAULTS, drafter_kind="a small draft GGUF model"
    ),
    "draft-eagle3": Method(
        "draft-eagle3", "EAGLE-3", True, DRAFT_KNOBS, DRAFT_DEFAULTS, drafter_kind="an EAGLE-3 GGUF"
    ),
    "draft-mtp": Method("draft-mtp", "MTP", False, DRAFT_KNOBS, DRAFT_DEFAULTS),
    "ngram-simple": Method("ngram-simple", "ngram-simple", False, *_SIMPLE),
    "ngram-map-k": Method("ngram-map-k", "ngram-map-k", False, *_MAP_K),
    "ngram-map-k4v": Method("ngram-map-k4v", "ngram-map-k4v", False, *_MAP_K4V),
    "ngram-mod": Method("ngram-mod", "ngram-mod", False, *_MOD),
    "ngram-cache": Method("ngram-cache", "ngram-cache", False),
}
DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp")
#: the types that load a draft model with ``-md``
DRAFTER_TYPES = ("draft-simple", "draft-eagle3")


def types_of(name: str) -> tuple[str, ...]:
    """``"draft-simple,ngram-mod"`` -> ``("draft-simple", "ngram-mod")``."""
    return tuple(t.strip() for t in str(name).split(","))


def combination_problem(name: str) -> str | None:
    """Why ``name`` is not a method of the catalogue (None: it is)."""
    types = types_of(name)
    unknown = [t for t in types if t not in SINGLE]
    if unknown:
        return f"unknown speculative type {unknown[0]!r}"
    if len(set(types)) != len(types):
        return "a type is listed twice"
    if sum(t in DRAFT_TYPES for t in types) > 1:
        return "one server loads one draft model: combine at most one draft-* type"
    return None


def _combine(name: str) -> Method:
    parts = [SINGLE[t] for t in types_of(name)]
    knobs: dict[str, KnobDomain] = {}
    defaults: dict[str, Any] = {}
    for m in parts:
        knobs.update(m.knobs)
        defaults.update(m.defaults)
    with_drafter = [m for m in parts if m.needs_drafter]
    return Method(
        name,
        " + ".join(m.label for m in parts),
        bool(with_drafter),
        knobs,
        defaults,
        drafter_kind=with_drafter[0].drafter_kind if with_drafter else "a drafter",
    )


class Catalogue(Mapping[str, Method]):
    """The single types, plus every valid comma list of them as a method of its own (looked up, not listed)."""

    def __getitem__(self, name: str) -> Method:
        if name in SINGLE:
            return SINGLE[name]
        if not isinstance(name, str) or "," not in name or combination_problem(name):
            raise KeyError(name)
        return _combine(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in SINGLE or ("," in name and combination_problem(name) is None))

    def __iter__(self) -> Iterator[str]:
        return iter(SINGLE)

    def __len__(self) -> int:
        return len(SINGLE)


METHODS = Catalogue()


def help_spec_types(help_text: str) -> tuple[str, ...] | None:
    """The ``--spec-type`` values a llama-server's ``--help`` lists (None: it lists none, e.g. an old build)."""
    for line in help_text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "--spec-type" and "," in parts[1]:
            return tuple(t for t in parts[1].split(",") if t and t != "none")
    return None


def mtp_unavailable(model_path: str) -> str | None:
    """Why the target GGUF has no MTP layers llama.cpp would run (None: it has, or the file cannot be read here).
    llama.cpp's own test (``common_speculative_types_from_gguf``): a tensor ``blk.{LAST}.nextn.eh_proj.weight``."""
    try:
        from gguf import GGUFReader  # the gguf package (installed with autotune's llama.cpp extras)

        reader = GGUFReader(model_path)
    except Exception:  # noqa: BLE001 - not a readable GGUF here: the server decides
        return None
    arch_field = reader.fields.get("general.architecture")
    try:
        arch = bytes(arch_field.parts[arch_field.data[0]]).decode() if arch_field else ""
        count_field = reader.fields.get(f"{arch}.block_count")
        blocks = int(count_field.parts[count_field.data[0]][0]) if count_field else 0
    except (IndexError, ValueError, TypeError):
        return None
    names = {t.name for t in reader.tensors}
    if f"blk.{blocks - 1}.nextn.eh_proj.weight" not in names:
        return f"MTP not available for this target: its GGUF has no nextn (MTP) layers (blk.{blocks - 1}.nextn.*)"
    return None


class LlamaMethods:
    """Suggest, replay, resolve, enumerate and launch the configs of a llama.cpp space with ``search.methods``."""

    # -- what the space offers -----------------------------------------------------------------------------

    def unavailable(self, space: Space, method: str) -> str | None:
        if "draft-mtp" in types_of(method):
            return mtp_unavailable(space.server.model_path)
        return None

    def available(self, space: Space) -> list[str]:
        return [m for m in space.search.methods if self.unavailable(space, m) is None]

    @staticmethod
    def spec(space: Space, method: str, knob: str) -> ParamSpec:
        got = space.search.methods[method].knobs.get(knob)
        return got if got is not None else Choices((METHODS[method].defaults[knob],))

    def _ints(self, space: Space, method: str, knob: str, low: int, high: int = 1024) -> list[int]:
        return [int(v) for v in encode.spec_values(self.spec(space, method, knob)) or [] if low <= int(v) <= high]

    # -- the walk ------------------------------------------------------------------------------------------

    def walk(self, ask: Any, space: Space, method: str | None = None) -> TrialConfig:
        methods = self.available(space)
        if not methods:
            raise InfeasibleConfig("no method of search.methods can run with this target")
        method = ask.categorical(METHOD_KNOB, METHOD_KNOB, methods) if method is None else method
        cg = ask.categorical("cuda_graph", "cuda_graph", [bool(b) for b in space.search.cuda_graph])
        cat = METHODS[method]
        drafter = None
        if cat.needs_drafter:
            drafter = ask.categorical(
                "drafter", param_name(method, "drafter"), list(space.search.methods[method].drafters)
            )
        knobs: dict[str, Any] = {}
        if "draft_n_max" in cat.knobs:
            knobs.update(self._walk_pair(ask, space, method, "draft_n_max", "draft_n_min", 1))
            knobs["draft_p_min"] = float(
                ask.number("draft_p_min", param_name(method, "draft_p_min"), self.spec(space, method, "draft_p_min"))
            )
        if "ngram_mod_n_max" in cat.knobs:
            knobs.update(self._walk_pair(ask, space, method, "ngram_mod_n_max", "ngram_mod_n_min", 0))
        for knob in cat.knobs:
            if knob in knobs:
                continue
            dom = cat.knobs[knob]
            allowed = self._ints(space, method, knob, int(dom.low or 0), int(dom.high or 1024))
            if not allowed:
                raise InfeasibleConfig(f"no value of {method}.{knob} lies in [{dom.low}, {dom.high or 1024}]")
            knobs[knob] = ask.int(knob, param_name(method, knob), self.spec(space, method, knob), allowed)
        return TrialConfig.make(drafter, bool(cg), method=method, **knobs)

    def _walk_pair(self, ask: Any, space: Space, method: str, top: str, bottom: str, low: int) -> dict[str, int]:
        """A maximum and a minimum drawn at most the maximum (named ``BOTTOM_le{N}`` when that cuts the list)."""
        tops = [t for t in self._ints(space, method, top, low) if self._ints(space, method, bottom, 0, t)]
        if not tops:
            raise InfeasibleConfig(f"no {method}.{top} with a {bottom} at most it")
        t = ask.int(top, param_name(method, top), self.spec(space, method, top), tops)
        mins = self._ints(space, method, bottom, 0, t)
        full = encode.spec_values(self.spec(space, method, bottom))
        name = encode.cut_name(bottom, mins, full, f"le{t}")
        return {top: t, bottom: ask.int(bottom, param_name(method, name), self.spec(space, method, bottom), mins)}

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
        return self.walk(OptunaAsk(trial), space)

    def params(self, config: TrialConfig, space: Space) -> dict[str, Any]:
        values = {**config.knob_dict, "cuda_graph": bool(config.cuda_graph), "drafter": config.drafter}
        ask = ReplayAsk(values)
        method = str(config.knob(METHOD_KNOB))
        ask.params[METHOD_KNOB] = method
        self.walk(ask, space, method=method)
        return ask.params

    # -- resolution ----------------------------------------------------------------------------------------

    def resolve(self, config: TrialConfig, space: Space) -> EffectiveConfig:
        method = config.knob(METHOD_KNOB)
        if method not in space.search.methods:
            raise InfeasibleConfig(f"method {method!r} is not in the space's search.methods")
        why = self.unavailable(space, str(method))
        if why:
            raise InfeasibleConfig(why)
        cat = METHODS[method]
        if cat.needs_drafter:
            if config.drafter not in space.search.methods[method].drafters:
                raise InfeasibleConfig(f"drafter {config.drafter!r} is not one of method {method}'s drafters")
        elif config.drafter is not None:
            raise InfeasibleConfig(f"method {method} ({cat.label}) runs no drafter; got {config.drafter!r}")
        unknown = sorted(set(config.knob_dict) - {METHOD_KNOB, *cat.knobs})
        if unknown:
            raise InfeasibleConfig(f"unknown knobs {unknown} for method {method}")
        v: dict[str, Any] = {}
        for knob, dom in cat.knobs.items():
            raw = config.knob(knob)
            raw = cat.defaults[knob] if raw is None else raw
            if dom.kind == "float":
                x: Any = float(raw)
                if not 0.0 <= x <= 1.0:
                    raise InfeasibleConfig(f"{knob} must be in [0, 1] but got {raw!r}")
            else:
                x = int(raw)
                lo, hi = int(dom.low or 0), int(dom.high) if dom.high is not None else None
                if x < lo or (hi is not None and x > hi):
                    raise InfeasibleConfig(f"{knob} must be in [{lo}, {hi if hi is not None else 'inf'}] but got {x}")
            v[knob] = x
        if "draft_n_max" in v and v["draft_n_min"] > v["draft_n_max"]:
            raise InfeasibleConfig(f"draft_n_min ({v['draft_n_min']}) must not exceed draft_n_max ({v['draft_n_max']})")
        if "ngram_mod_n_max" in v and v["ngram_mod_n_min"] > v["ngram_mod_n_max"]:
            raise InfeasibleConfig(
                f"ngram_mod_n_min ({v['ngram_mod_n_min']}) exceeds ngram_mod_n_max ({v['ngram_mod_n_max']}): "
                "ngram-mod would drop every draft"
            )
        return EffectiveConfig.make(config.drafter, config.cuda_graph, method=str(method), **v)

    # -- enumeration ---------------------------------------------------------------------------------------

    def _points(self, space: Space, method: str, nearest_default: bool) -> list[dict[str, Any]] | None:
        cat = METHODS[method]
        axes: dict[str, list[Any]] = {}
        for knob in cat.knobs:
            spec = self.spec(space, method, knob)
            values = encode.spec_values(spec)
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
        drafters = list(space.search.methods[method].drafters) if METHODS[method].needs_drafter else [None]
        for d in drafters:
            for cg in graphs:
                for p in points:
                    try:
                        out.append(self.resolve(TrialConfig.make(d, cg, method=method, **p), space))
                    except (InfeasibleConfig, ValueError):
                        continue
        return out

    def defaults(self, space: Space) -> list[TrialConfig]:
        """The server's own config of every available method x drafter, moved to the nearest point of the space
        (a minimum above its maximum lowered to it)."""
        graphs = [bool(b) for b in space.search.cuda_graph]
        cg = True if True in graphs else graphs[0]
        out: list[TrialConfig] = []
        for method in self.available(space):
            points = self._points(space, method, nearest_default=True) or []
            for p in points:
                for top, bottom in (("draft_n_max", "draft_n_min"), ("ngram_mod_n_max", "ngram_mod_n_min")):
                    if top in p and p[bottom] > p[top]:
                        lower = self._ints(space, method, bottom, 0, p[top])
                        if lower:
                            p[bottom] = max(lower)
            out += self._configs(space, method, points, [cg])
        return out

    def grid(self, space: Space) -> list[TrialConfig] | None:
        """Every feasible point of every available method (None when a knob is a float range)."""
        out: list[TrialConfig] = []
        graphs = [bool(b) for b in space.search.cuda_graph]
        for method in self.available(space):
            points = self._points(space, method, nearest_default=False)
            if points is None:
                return None
            out += self._configs(space, method, points, graphs)
        return out

    # -- launching -----------------------------------------------------------------------------------------

    @staticmethod
    def check_listed(method: str, listed: tuple[str, ...] | None) -> None:
        """Refuse a method naming a type the probed binary's ``--spec-type`` does not list (``UserError``)."""
        if listed is None:
            return
        missing = [t for t in types_of(method) if t not in listed]
        if missing:
            raise UserError(
                f"search.methods.{method}: this llama-server does not list --spec-type {missing[0]}; "
                f"it lists {', '.join(listed)}"
            )

    def argv(
        self,
        eff: TrialConfig,
        space: Space,
        flags: Mapping[str, str | None],
        listed: tuple[str, ...] | None,
        help_flags: set[str] | None,
    ) -> list[str]:
        """The speculative flags of a resolved method config: ``--spec-type LIST``, the draft model, each knob."""
        method = str(eff.knob(METHOD_KNOB))
        self.check_listed(method, listed)
        if not flags.get("spec_type"):
            raise UserError(f"search.methods.{method}: this llama-server has no --spec-type (an older build)")
        out = [str(flags["spec_type"]), method]
        if eff.drafter is not None:
            out += [str(flags.get("draft_model") or "-md"), space.drafter(eff.drafter).path]
        for knob, value in eff.knob_dict.items():
            if knob == METHOD_KNOB:
                continue
            flag = flags.get(knob) if knob in DRAFT_KNOBS else "--spec-" + knob.replace("_", "-")
            if not flag or (help_flags is not None and knob not in DRAFT_KNOBS and flag not in help_flags):
                raise UserError(f"search.methods.{method}: this llama-server has no flag for {knob}")
            out += [str(flag), _fmt(value)]
        return out

    @staticmethod
    def checks_engagement(config: TrialConfig) -> bool:
        """Only where a draft type runs: a model-free type that finds nothing to copy drafts nothing (a measured
        loss, not a misconfiguration)."""
        return any(t in DRAFT_TYPES for t in types_of(str(config.knob(METHOD_KNOB))))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v) if v != int(v) else f"{v:.1f}"
    return str(v)


__all__ = [
    "DRAFTER_TYPES",
    "DRAFT_DEFAULTS",
    "DRAFT_KNOBS",
    "DRAFT_TYPES",
    "METHODS",
    "SINGLE",
    "Catalogue",
    "LlamaMethods",
    "combination_problem",
    "help_spec_types",
    "mtp_unavailable",
    "types_of",
]

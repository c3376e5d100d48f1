"""Scenarios: data files ``autotune/sim/scenarios/<name>.yaml`` plus stand-in checkpoint directories.

A scenario names a target (a stand-in directory with a realistic ``config.json``, no weights), its hardware sets
(CUDA graphs on and off), its drafters (stand-in directories and acceptance profiles), startup times and faults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import yaml

from autotune.sim.acceptance import REQUEST_NOISE_SD, START_NOISE_SD, DrafterProfile
from autotune.sim.method_models import NgramProfile
from autotune.sim.timing import Hardware

SCENARIO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")


class ScenarioError(ValueError):
    """A scenario name or file that cannot be used."""


@dataclass(frozen=True)
class SimDrafter:
    name: str
    dir: str  # absolute path of the stand-in checkpoint
    profile: DrafterProfile
    config: dict[str, Any]
    diverges: bool = False
    kind: str = "eagle"  # eagle (an EAGLE/EAGLE-3 head) | standalone (a small full model) | mtp (the target's own)
    costs: dict[bool, dict[str, float]] = field(default_factory=dict)  # per CUDA graphs on/off: Hardware overrides

    def hardware(self, hw: Hardware, cuda_graph: bool) -> Hardware:
        """``hw`` with this drafter's own draft costs (a standalone model's forward, an MTP layer) in place."""
        changes: dict[str, Any] = self.costs.get(cuda_graph) or {}  # names checked against Hardware's on reading
        return replace(hw, **changes) if changes else hw

    @property
    def is_eagle3(self) -> bool:
        return any("Eagle3" in a for a in self.config.get("architectures", []))

    @property
    def hidden_size(self) -> int | None:
        v = self.config.get("target_hidden_size", self.config.get("hidden_size"))
        return int(v) if v is not None else None

    @property
    def max_positions(self) -> int | None:
        v = self.config.get("max_position_embeddings")
        return int(v) if v is not None else None


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    target_name: str
    target_dir: str
    target_config: dict[str, Any]
    family: str  # deepseek | llama | other: SGLang's auto-chosen speculative shape
    load_s: float
    speculative_s: float
    cuda_graph_s: float
    cuda_graph_speculative_s: float
    graphs_on: Hardware
    graphs_off: Hardware
    drafters: dict[str, SimDrafter]
    faults: tuple[str, ...] = ()
    eos_after: int | None = None  # every request stops after this many tokens (finish_reason "stop"); None = never
    category_offsets: dict[str, float] = field(default_factory=dict)
    near_ties: float = 0.0  # probability that a prompt has a near tie (see autotune.sim.text); --near-ties overrides
    start_noise_sd: float = START_NOISE_SD  # sd of the log of a server start's time factor
    request_noise_sd: float = REQUEST_NOISE_SD  # sd of the log of one request's time factor
    mtp: SimDrafter | None = None  # the target's own MTP layer as a drafter (NEXTN), when the scenario gives one
    ngram: NgramProfile = field(default_factory=NgramProfile)  # the model-free n-gram drafter on this hardware

    @property
    def mtp_layers(self) -> int:
        """The target's MTP (NextN) layers, from its config.json."""
        return int(self.target_config.get("num_nextn_predict_layers") or 0)

    @property
    def target_architecture(self) -> str:
        archs = self.target_config.get("architectures") or [""]
        return str(archs[0])

    def hardware(self, cuda_graph: bool) -> Hardware:
        return self.graphs_on if cuda_graph else self.graphs_off

    def startup_s(self, *, speculative: bool, cuda_graph: bool) -> float:
        """Hardware seconds from launch to healthy."""
        t = self.load_s
        if speculative:
            t += self.speculative_s
        if cuda_graph:
            t += self.cuda_graph_s + (self.cuda_graph_speculative_s if speculative else 0.0)
        return t

    @property
    def hidden_size(self) -> int:
        return int(self.target_config.get("hidden_size", 0))

    def drafter_by_path(self, path: str) -> SimDrafter | None:
        """The scenario drafter a ``--speculative-draft-model-path`` value names: a bare drafter name, a directory
        whose ``config.json`` carries ``autotune_sim.name``, or a directory named like a drafter."""
        if path in self.drafters:
            return self.drafters[path]
        if self.mtp is not None and path in (self.target_name, self.target_dir, self.mtp.name):
            return self.mtp
        cfg_path = os.path.join(path, "config.json")
        if os.path.isdir(path) and os.path.isfile(cfg_path):
            try:
                with open(cfg_path, encoding="utf-8") as f:
                    cfg = json.load(f)
            except (OSError, ValueError):
                cfg = {}
            name = (cfg.get("autotune_sim") or {}).get("name") if isinstance(cfg, dict) else None
            if name in self.drafters:
                return self.drafters[name]
            base = os.path.basename(os.path.normpath(path))
            if base in self.drafters:
                return self.drafters[base]
        return None


def scenario_names() -> list[str]:
    """Names of the scenarios shipped with the package, sorted."""
    return sorted(f[:-5] for f in os.listdir(SCENARIO_DIR) if f.endswith(".yaml"))


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _hardware(d: dict[str, Any], where: str) -> Hardware:
    try:
        return Hardware(**d)
    except TypeError as e:
        raise ScenarioError(f"{where}: {e}") from None


def _costs(d: dict[str, Any] | None, where: str) -> dict[bool, dict[str, float]]:
    """``{graphs_on: {t_ds: ...}, graphs_off: {...}}`` -> {True: ..., False: ...}, names checked against Hardware."""
    out: dict[bool, dict[str, float]] = {}
    fields = set(Hardware.__dataclass_fields__)
    for key, on in (("graphs_on", True), ("graphs_off", False)):
        vals = dict((d or {}).get(key) or {})
        bad = sorted(set(vals) - fields)
        if bad:
            raise ScenarioError(f"{where}.{key}: unknown hardware field(s) {', '.join(bad)}")
        out[on] = {k: float(v) for k, v in vals.items()}
    return out


def _probability(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ScenarioError(f"{where}: expected a probability between 0 and 1, got {v!r}")
    return float(v)


#: how a scenario name becomes a ``Scenario`` (``load_scenario``: the shipped ones; ``scenario_loader`` adds more)
ScenarioLoader = Callable[[str], Scenario]


@lru_cache(maxsize=32)
def load_scenario(name: str) -> Scenario:
    """Load a shipped scenario by name. Raises ScenarioError naming the known scenarios."""
    path = os.path.join(SCENARIO_DIR, f"{name}.yaml")
    if not name or "/" in name or not os.path.isfile(path):
        raise ScenarioError(f"unknown simulator scenario {name!r}; known: {', '.join(scenario_names())}")
    return read_scenario(path, name=name)


def read_scenario(path: str, *, name: str | None = None, dirs: Sequence[str] | None = None) -> Scenario:
    """A scenario file. Its stand-in directories (``dir:``) resolve in the first of ``dirs`` that has them, else
    in the last (default: the package's scenario directory). Raises ScenarioError."""
    dirs = [SCENARIO_DIR] if dirs is None else list(dirs)

    def resolve(d: str) -> str:
        return next((os.path.join(x, d) for x in dirs if os.path.exists(os.path.join(x, d))), os.path.join(dirs[-1], d))

    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    origin = path
    try:
        target = raw["target"]
        startup = raw.get("startup", {})
        drafters = {}
        for dname, d in (raw.get("drafters") or {}).items():
            ddir = resolve(d["dir"])
            drafters[dname] = SimDrafter(
                name=dname,
                dir=ddir,
                profile=DrafterProfile(**d["profile"]),
                config=_read_json(os.path.join(ddir, "config.json")),
                diverges=bool(d.get("diverges", False)),
                kind=str(d.get("kind", "eagle")),
                costs=_costs(d.get("costs"), f"{origin}: drafters.{dname}.costs"),
            )
            if drafters[dname].kind not in ("eagle", "standalone"):
                raise ScenarioError(f"{origin}: drafters.{dname}.kind must be eagle or standalone")
        tdir = resolve(target["dir"])
        tconfig = _read_json(os.path.join(tdir, "config.json"))
        mtp = None
        if target.get("mtp") is not None:
            if not int(tconfig.get("num_nextn_predict_layers") or 0):
                raise ScenarioError(f"{origin}: target.mtp given but the target's config.json has no MTP layers")
            mtp = SimDrafter(
                name="mtp",
                dir=tdir,
                profile=DrafterProfile(**target["mtp"]["profile"]),
                config=tconfig,
                kind="mtp",
                costs=_costs(target["mtp"].get("costs"), f"{origin}: target.mtp.costs"),
            )
        return Scenario(
            name=raw.get("name", name),
            description=raw.get("description", ""),
            target_name=target["name"],
            target_dir=tdir,
            target_config=tconfig,
            family=target.get("family", "other"),
            load_s=float(startup.get("load_s", 60.0)),
            speculative_s=float(startup.get("speculative_s", 0.0)),
            cuda_graph_s=float(startup.get("cuda_graph_s", 0.0)),
            cuda_graph_speculative_s=float(startup.get("cuda_graph_speculative_s", 0.0)),
            graphs_on=_hardware(raw["hardware"]["graphs_on"], f"{origin}: hardware.graphs_on"),
            graphs_off=_hardware(raw["hardware"]["graphs_off"], f"{origin}: hardware.graphs_off"),
            drafters=drafters,
            faults=tuple(raw.get("faults") or ()),
            eos_after=raw.get("eos_after"),
            category_offsets=dict(raw.get("category_offsets") or {}),
            near_ties=_probability(raw.get("near_ties", 0.0), f"{origin}: near_ties"),
            start_noise_sd=float((raw.get("noise") or {}).get("start_sd", START_NOISE_SD)),
            request_noise_sd=float((raw.get("noise") or {}).get("request_sd", REQUEST_NOISE_SD)),
            mtp=mtp,
            ngram=NgramProfile(**(raw.get("ngram") or {})),
        )
    except (KeyError, TypeError, OSError, ValueError) as e:
        if isinstance(e, ScenarioError):
            raise
        raise ScenarioError(f"{origin}: invalid scenario ({type(e).__name__}: {e})") from None


def scenario_loader(extra: Mapping[str, Scenario]) -> ScenarioLoader:
    """A loader that knows ``extra`` (by name) besides the shipped scenarios."""

    def load(name: str) -> Scenario:
        return extra[name] if name in extra else load_scenario(name)

    return load

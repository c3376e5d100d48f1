"""llama.cpp's speculative types as a searched choice (``search.methods``), llama-server's flag spelling by build
(``flag_spelling``) and where this machine's llama-server is (``find_llama_server``).

Read from the llama.cpp vendored by llama-cpp-python 0.3.36 (commit 0c1e570: ``common/arg.cpp``,
``common/speculative.cpp``, ``common/common.h``, ``tools/server/server-context.cpp``):

- ``--spec-type`` takes a comma list (an unknown name is an error, ``none`` means no speculation). A method is a type
  or a comma list of types: each listed type is tried per step in a fixed priority (``common_speculative_init``), the
  first that drafts wins, so the list's order does not matter.
- Draft types: ``draft-simple`` (a small draft GGUF, ``-md``), ``draft-eagle3`` (an EAGLE-3 GGUF, ``-md``),
  ``draft-mtp`` (the target's own MTP layers: no ``-md``; a target GGUF without ``blk.N.nextn.eh_proj.weight`` has
  none). They share ``draft_n_max`` / ``draft_n_min`` / ``draft_p_min`` (3, 0, 0.0). One server loads one draft
  model: a combination names at most one draft type.
- Model-free types, each with its own flags (``common.h`` defaults): ``ngram-simple``, ``ngram-map-k``,
  ``ngram-map-k4v`` (``--spec-ngram-{TYPE}-size-n`` 12, ``-size-m`` 48, ``-min-hits`` 1; sizes 1..1024, hits >= 1),
  ``ngram-mod`` (``--spec-ngram-mod-n-match`` 24, ``-n-max`` 64, ``-n-min`` 48; a draft shorter than n-min is dropped,
  so n-min > n-max never drafts and is refused), ``ngram-cache`` (no flags: 8 draft tokens, fixed in the source).
- The binary lists its types in ``--help``: a method naming a type it does not list is refused before launch.

A model-free method is not held to the not-engaged alarm: a prompt with nothing to copy drafts nothing, a measured
loss, not a misconfiguration (``checks_engagement``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backends.methods import METHOD_KNOB, FlatMethods
from autotune.config import TrialConfig
from autotune.errors import InfeasibleConfig, UserError
from autotune.servers import KnobDomain, Method

if TYPE_CHECKING:
    from autotune.space import Space


#: the draft types' shared knobs and the server's defaults (``common_params_speculative_draft``)
DRAFT_KNOBS: dict[str, KnobDomain] = {
    "draft_n_max": KnobDomain("int", 1),
    "draft_n_min": KnobDomain("int", 0),
    "draft_p_min": KnobDomain("float", 0.0, 1.0),
}
DRAFT_DEFAULTS: dict[str, float] = {"draft_n_max": 3, "draft_n_min": 0, "draft_p_min": 0.0}


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
    defaults: dict[str, float | str] = {}
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
    """The ``--spec-type`` values a llama-server's ``--help`` lists (None: none, e.g. an old build): a comma list
    (``none,draft-simple,...``, 0.3.36) or ``[none|ngram-cache|...]`` (one model-free type, used "when no draft model
    is provided": a draft model speculates by itself, llama-cpp-python 0.3.2x)."""
    for line in help_text.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "--spec-type":
            continue
        if parts[1].startswith("[") and parts[1].endswith("]") and "|" in parts[1]:
            return tuple(t for t in parts[1][1:-1].split("|") if t and t != "none")
        if "," in parts[1]:
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


class LlamaMethods(FlatMethods):
    """Suggest, replay, resolve, enumerate and launch the configs of a llama.cpp space with ``search.methods``."""

    catalogue = METHODS
    pairs = (("draft_n_max", "draft_n_min", 1), ("ngram_mod_n_max", "ngram_mod_n_min", 0))

    def unavailable(self, space: Space, method: str) -> str | None:
        if "draft-mtp" in types_of(method):
            return mtp_unavailable(space.server.model_path)
        return None

    def pair_problem(self, top: str, bottom: str, high: int, low: int) -> str:
        if top == "ngram_mod_n_max":
            return f"ngram_mod_n_min ({low}) exceeds ngram_mod_n_max ({high}): ngram-mod would drop every draft"
        return f"{bottom} ({low}) must not exceed {top} ({high})"

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


#: the llama-cpp-python release whose vendored llama.cpp ``scripts/llamacpp_setup.sh`` builds
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

#: flag names by role for the newest known release
NEW_SPELLING: dict[str, str | None] = {
    "draft_model": "--spec-draft-model",
    "spec_type": "--spec-type",
    "draft_n_max": "--spec-draft-n-max",
    "draft_n_min": "--spec-draft-n-min",
    "draft_p_min": "--spec-draft-p-min",
    "no_webui": None,
    "parallel": "-np",
}

#: candidate names per role, preferred first
_CANDIDATES: dict[str, tuple[str, ...]] = {
    "draft_model": ("--spec-draft-model", "--model-draft", "-md"),
    "spec_type": ("--spec-type",),
    "draft_n_max": ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"),
    "draft_n_min": ("--spec-draft-n-min", "--draft-min", "--draft-n-min"),
    "draft_p_min": ("--spec-draft-p-min", "--draft-p-min"),
    "no_webui": ("--no-ui", "--no-webui"),  # --no-webui is the older name (logged as deprecated where both exist)
    "parallel": ("-np", "--parallel"),
}

_ENTRY = re.compile(r"^[ \t]{0,8}(-{1,2}[A-Za-z0-9][\w-]*(?:\s*,\s*-{1,2}[A-Za-z0-9][\w-]*)*)", re.M)


def help_flags(help_text: str) -> set[str]:
    """Every flag ``--help`` lists, minus those whose entry says the argument has been removed."""
    flags: set[str] = set()
    matches = list(_ENTRY.finditer(help_text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(help_text)
        entry = help_text[m.start() : end]
        if re.search(r"has been removed", entry, re.I):
            continue
        flags.update(f.strip() for f in m.group(1).split(","))
    return flags


def flag_spelling(help_text: str) -> dict[str, str | None]:
    """Flag name per role (``_CANDIDATES``) for the ``llama-server`` whose ``--help`` output is ``help_text`` (None: it
    lacks the role). Text that lists no draft-count flag at all (not a llama-server help) gives ``NEW_SPELLING``."""
    flags = help_flags(help_text)
    if not any(f in flags for f in _CANDIDATES["draft_n_max"]):
        return dict(NEW_SPELLING)
    return {role: next((c for c in names if c in flags), None) for role, names in _CANDIDATES.items()}


def spec_type_args(
    spec_type: str, flag: str | None, listed: Sequence[str] | None, draft_types: Sequence[str], default: str
) -> list[str]:
    """The ``--spec-type`` argument for ``spec_type`` on a binary with type flag ``flag`` whose ``--help`` lists
    ``listed`` (None: not known); ``default``: the draft type a draft model runs by itself. Builds without the flag or
    whose ``--spec-type`` names only model-free types (0.3.2x) draft with ``-md`` alone: there ``default`` needs no
    flag and other draft types cannot run (``InfeasibleConfig``)."""
    model_alone = listed is not None and not any(t in draft_types for t in listed)
    if flag and not (model_alone and spec_type in draft_types):
        if listed is not None and spec_type not in listed:
            raise InfeasibleConfig(
                f"spec_type {spec_type!r}: this llama-server's --spec-type lists only {', '.join(listed)}"
            )
        return [flag, spec_type]
    if spec_type != default:
        raise InfeasibleConfig(
            f"spec_type {spec_type!r} needs a llama-server with --spec-type for it; this one only drafts with -md"
        )
    return []


def cache_dir() -> Path:
    """Where ``scripts/llamacpp_setup.sh`` caches its build: ``$AUTOTUNE_CACHE`` or ``~/.cache/autotune``."""
    root = os.environ.get("AUTOTUNE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "autotune")
    return Path(root)


def cached_server_path(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """The setup script's cached build of llama-cpp-python ``version``'s llama-server."""
    return cache_dir() / f"llama-server-{version}" / "llama-server"


def _executable(path: str | Path) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_llama_server() -> str | None:
    """The llama-server to run: ``$AUTOTUNE_LLAMA_SERVER``, else ``llama-server`` on PATH, else the setup
    script's cached build; None when there is none."""
    env = os.environ.get("AUTOTUNE_LLAMA_SERVER")
    if env:
        return env if _executable(env) else None
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    cached = cached_server_path()
    return str(cached) if _executable(cached) else None

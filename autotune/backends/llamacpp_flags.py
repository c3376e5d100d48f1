"""llama-server's flag spelling by build, read from its ``--help`` (``flag_spelling``), and where this machine's
llama-server is (``find_llama_server``: ``$AUTOTUNE_LLAMA_SERVER``, PATH, the setup script's cached build)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from autotune.errors import InfeasibleConfig

#: the llama-cpp-python release whose vendored llama.cpp ``scripts/llamacpp_setup.sh`` builds
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

#: flag names by role for the newest known release, and for releases before the ``--spec-*`` rename
NEW_SPELLING: dict[str, str | None] = {
    "draft_model": "--spec-draft-model",
    "spec_type": "--spec-type",
    "draft_n_max": "--spec-draft-n-max",
    "draft_n_min": "--spec-draft-n-min",
    "draft_p_min": "--spec-draft-p-min",
    "no_webui": None,
    "parallel": "-np",
}
OLD_SPELLING: dict[str, str | None] = {
    "draft_model": "--model-draft",
    "spec_type": None,
    "draft_n_max": "--draft-max",
    "draft_n_min": "--draft-min",
    "draft_p_min": "--draft-p-min",
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
    """Flag name per role (``draft_model``, ``spec_type``, ``draft_n_max``, ``draft_n_min``, ``draft_p_min``,
    ``no_webui``, ``parallel``) for the ``llama-server`` whose ``--help`` output is ``help_text``.

    A role the binary lacks maps to None. Text that lists no draft-count flag at all (not a llama-server help)
    gives ``NEW_SPELLING``.
    """
    flags = help_flags(help_text)
    if not any(f in flags for f in _CANDIDATES["draft_n_max"]):
        return dict(NEW_SPELLING)
    return {role: next((c for c in names if c in flags), None) for role, names in _CANDIDATES.items()}


def spec_type_args(
    spec_type: str, flag: str | None, listed: Sequence[str] | None, draft_types: Sequence[str], default: str
) -> list[str]:
    """The ``--spec-type`` argument for ``spec_type`` on a binary with type flag ``flag`` whose ``--help`` lists
    the types ``listed`` (None: not known); ``draft_types``: the types that run a draft model; ``default``: the
    one a draft model runs by itself. Builds without the flag, and builds whose ``--spec-type`` names only
    model-free types (llama-cpp-python 0.3.2x: "when no draft model is provided"), draft with ``-md`` alone: there
    ``default`` needs no flag and other draft types cannot run (``InfeasibleConfig``)."""
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


__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "NEW_SPELLING",
    "OLD_SPELLING",
    "cache_dir",
    "cached_server_path",
    "find_llama_server",
    "flag_spelling",
    "help_flags",
    "spec_type_args",
]

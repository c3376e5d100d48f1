"""Load a script of ``scripts/`` (not a package) as a module, for tests that call its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """``scripts/RELATIVE`` (e.g. ``gpu/truth.py``) as a module named ``name`` (default: from the path), registered in
    ``sys.modules`` so that its dataclasses and pickling resolve."""
    path = SCRIPTS / relative
    name = name or "script_" + relative.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""The scripting API (``autotune/__init__.py``): its documented example runs as written, every public name
resolves, and ``import autotune`` stays light (the CLI's start-up pays for nothing it does not use)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autotune

ROOT = Path(__file__).resolve().parents[1]


def test_the_documented_example_runs_as_written(monkeypatch, capsys):
    doc = autotune.__doc__ or ""
    code = textwrap.dedent(doc.split("::\n", 1)[1].split("\nOn real servers", 1)[0])
    assert "autotune.run(" in code and "autotune.build_report(" in code
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(code, "autotune.__doc__", "exec"), scope)
    report = scope["report"].to_json()
    assert report["verdict"] in {v.value for v in autotune.Verdict}
    assert report["simulated"] and report["recommended"]["trial"] is not None
    assert report["verdict"] in capsys.readouterr().out


def test_every_public_name_resolves_and_others_do_not():
    for name in autotune.__all__:
        assert getattr(autotune, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        autotune.nothing_here  # noqa: B018


def test_import_autotune_loads_nothing_heavy():
    heavy = "('optuna', 'numpy', 'scipy', 'autotune.study')"
    code = f"import sys, autotune; print(sorted(m for m in {heavy} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == "[]"

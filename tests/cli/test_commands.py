"""The library side of the CLI (``autotune.commands``): pure pieces, without a subprocess."""

from __future__ import annotations

import pytest

from autotune.commands import parse_value


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("ON", True), ("no", False), ("3", 3), ("0.5", 0.5), ("eagle3", "eagle3"), ("1e-3", 1e-3)],
)
def test_a_set_value_is_read_like_the_flag_says(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


def test_the_cli_imports_no_study_machinery_for_help():
    import subprocess
    import sys

    code = (
        "import sys, autotune.cli; print(sorted(m for m in ('optuna', 'autotune.study', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

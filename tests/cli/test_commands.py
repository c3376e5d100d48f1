"""The library side of the CLI (``autotune.commands``): pure pieces, without a subprocess."""

from __future__ import annotations

import pytest

from autotune.commands.measure import parse_value


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


def test_the_signal_handler_s_module_loads_no_http_client():
    """Every command imports ``autotune.process.server`` (the CLI's signal handler); the runner and its HTTP client
    load only where a real server is run (``autotune.process``'s names load on first use)."""
    import subprocess
    import sys

    code = (
        "import sys, autotune.process.server; before = 'httpx' in sys.modules; "
        "from autotune.process import ProcessRunner, reap_leftovers; print(before, 'httpx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_version_prints_the_installed_version():
    import subprocess
    import sys
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "autotune", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"autotune {version('autotune')}\n", "")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["study", "s.yaml", "--gpus", "0-1", "--gpus", "2-3", "--n-trials", "5"],
            {"gpus": ("0-1", "2-3"), "n_trials": 5},
        ),
        (["study", "s.yaml", "--dry-run", "--no-confirm"], {"dry_run": True, "no_confirm": True, "gpus": ()}),
        (["worker", "s.yaml", "--gpus", "4-7", "--slot", "1"], {"gpus": ("4-7",), "slot": 1}),
        (
            ["bench", "s.yaml", "--set", "drafter=none", "--set", "cuda_graph=false"],
            {"set": ("drafter=none", "cuda_graph=false")},
        ),
        (
            ["export", "s.yaml", "--gpus", "2", "--format", "k8s", "-o", "x.yaml"],
            {"reserve_gpus": 2, "gpus": (), "format": "k8s", "output": "x.yaml"},
        ),
        (["dashboard", "s.yaml", "--port", "9000"], {"port": 9000, "host": "127.0.0.1"}),
        (
            ["report", "s.yaml", "--simulate", "--in-process", "--studies-dir", "d"],
            {"simulate": True, "in_process": True, "studies_dir": "d"},
        ),
    ],
)
def test_each_command_s_flags_become_its_typed_options(argv, expected):
    from autotune.cli import build_parser, command_options

    options = command_options(build_parser().parse_args(argv))
    assert options.space == "s.yaml"
    assert {k: getattr(options, k) for k in expected} == expected

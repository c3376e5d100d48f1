"""Suite-wide settings.

Tests that need a live service are marked (``postgres``, ``llamacpp``, ``chromium``) and skip locally when it is
missing. In CI (``CI=true``, where ``.ci/run`` starts PostgreSQL, builds llama-server and installs Chromium) such a
skip is turned into a failure: a green CI must mean those tests ran.
"""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

import pytest

LIVE_MARKERS = ("postgres", "llamacpp", "chromium")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and any(item.get_closest_marker(m) for m in LIVE_MARKERS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where its service must be available: {report.longrepr}"


def pytest_configure(config):
    """The suite starts hundreds of Python processes (CLI commands, simulated servers), each importing the package.
    Where bytecode writing is off (``PYTHONDONTWRITEBYTECODE``, as on the CI machine) every one of them would
    compile autotune's modules from source again (0.2 CPU-s a CLI command here): compile them once first (the
    controller only; the processes read the bytecode, they still write none)."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        compileall.compile_dir(Path(__file__).resolve().parents[1] / "autotune", quiet=1)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers per core (at most 16). The suite's tests mostly wait on the servers and CLI processes
    they start: with one worker per core the 2-core CI machine ran at about half its CPU (pytest 1,706 s), with four
    workers at 95% (885 s). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides it."""
    return min(16, 2 * (os.cpu_count() or 1))

"""Suite-wide settings.

Tests that need a live service are marked (``postgres``, ``llamacpp``, ``chromium``) and skip locally when it is
missing. In CI (``CI=true``, where ``.ci/run`` starts PostgreSQL, builds llama-server and installs Chromium) such a
skip is turned into a failure: a green CI must mean those tests ran.
"""

from __future__ import annotations

import os

import pytest

LIVE_MARKERS = ("postgres", "llamacpp", "chromium")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and any(item.get_closest_marker(m) for m in LIVE_MARKERS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where its service must be available: {report.longrepr}"

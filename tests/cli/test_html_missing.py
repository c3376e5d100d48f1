"""A host without the plotting package still finishes its study: the HTML report is skipped with one line (the
H200 harness of 2026-12-01 lacked plotly and the study ended with a traceback after its verdict)."""

from __future__ import annotations

import sys

import pytest

from autotune import cli


def test_html_report_is_skipped_with_a_line_when_plotly_is_missing(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "autotune.plots", raising=False)
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ImportError
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    out = tmp_path / "report.html"
    cli._write_html(None, None, {}, out)  # type: ignore[arg-type]
    assert not out.exists()
    err = capsys.readouterr().err
    assert "HTML report skipped" in err and "plotly" in err

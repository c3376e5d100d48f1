"""Atomic writes: a reader sees the old file or the new one, never a part; no temporary file is left behind."""

from __future__ import annotations

import pytest

from autotune._io import atomic_path, atomic_write


def test_atomic_write_replaces_the_file(tmp_path):
    path = tmp_path / "report.html"
    path.write_text("old")
    atomic_write(path, "néw")
    assert path.read_text(encoding="utf-8") == "néw"
    atomic_write(path, b"\x00raw", fsync=True)
    assert path.read_bytes() == b"\x00raw"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".model.gguf.") and tmp.name.endswith(".tmp")
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_a_block_that_writes_nothing_fails_loudly(tmp_path):
    with pytest.raises(FileNotFoundError), atomic_path(tmp_path / "x"):
        pass
    assert list(tmp_path.iterdir()) == []

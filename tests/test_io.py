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


def test_atomic_write_all_writes_every_file_or_none(tmp_path):
    from autotune._io import atomic_write_all

    (tmp_path / "launch.sh").write_text("old")
    atomic_write_all({tmp_path / "launch.sh": "new", tmp_path / "adaptive.json": "{}"})
    assert (tmp_path / "launch.sh").read_text() == "new" and (tmp_path / "adaptive.json").read_text() == "{}"
    # the second file's folder is missing: its write fails, the first is not renamed either, no temp file is left
    with pytest.raises(OSError) as e:
        atomic_write_all({tmp_path / "launch.sh": "newer", tmp_path / "gone" / "adaptive.json": "[]"})
    assert e.value.filename == str(tmp_path / "gone" / "adaptive.json")
    assert (tmp_path / "launch.sh").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adaptive.json", "launch.sh"]


@pytest.mark.parametrize(
    "name, problem",
    [("x.yaml", None), ("sub", "it is a directory"), ("missing/x.yaml", "no such directory {tmp}/missing")],
)
def test_output_problem(tmp_path, name, problem):
    from autotune._io import output_problem

    (tmp_path / "sub").mkdir()
    assert output_problem(tmp_path / name) == (problem.format(tmp=tmp_path) if problem else None)

"""The corpus of bad space files: each names the exact error it must produce on its first line.

``# expect: {path}:LINE: FIELD: MESSAGE`` where ``{path}`` is the file as passed to ``load_space`` and ``{dir}``
the corpus folder (for messages naming a resolved prompts file).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import SpaceError, UserError
from autotune.space import load_space
from autotune.space.loader import MAX_BYTES
from autotune.space.validate import space_errors

BAD = Path(__file__).parent / "bad"
CASES = sorted(BAD.glob("*.yaml"))


def expected_message(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8")
    assert first.startswith("# expect: "), f"{path.name} has no '# expect:' first line"
    return first[len("# expect: ") :].replace("{path}", str(path)).replace("{dir}", str(BAD.resolve()))


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 35


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_space_gives_its_exact_error(path: Path):
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(info.value) == expected_message(path)
    assert isinstance(info.value, UserError)  # the CLI turns it into exit code 2


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_error_attributes_match_the_message(path: Path):
    with pytest.raises(SpaceError) as info:
        load_space(str(path))
    err = info.value
    assert err.path == str(path)
    prefix = f"{err.path}:{err.line}: " if err.line else f"{err.path}: "
    assert str(err).startswith(prefix)
    if err.field:
        assert str(err)[len(prefix) :].startswith(f"{err.field}: ")
    assert space_errors(path)[0].args == err.args  # space_errors lists the same first error


def test_huge_file_is_refused_before_parsing(tmp_path: Path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"name: t\n" + b"# padding padding padding padding padding padding\n" * (MAX_BYTES // 50 + 1))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(info.value) == f"{path}: the file is larger than {MAX_BYTES} bytes (1 MiB); refusing to read it"


def test_missing_file(tmp_path: Path):
    with pytest.raises(SpaceError, match="no such file"):
        load_space(tmp_path / "nope.yaml")


def test_directory_instead_of_file(tmp_path: Path):
    with pytest.raises(SpaceError, match="is a directory"):
        load_space(tmp_path)


def test_deep_nesting_is_a_space_error(tmp_path: Path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpaceError, match=r"deep.yaml:1: nested more than 50 levels deep"):
        load_space(path)


def test_space_errors_lists_every_problem_in_file_order():
    errors = space_errors(BAD / "unknown-top-key.yaml")
    assert [e.field for e in errors] == ["serverr", "server"]  # the missing key (no line) comes last
    assert errors[0].line == 3 and errors[1].line is None


def test_first_error_in_file_order_wins(tmp_path: Path):
    path = tmp_path / "two.yaml"
    path.write_text(
        "name: t\n"
        "server: {backend: sglang, model_path: /m, port: 0}\n"  # line 2
        "drafters: [{name: d, path: /d}]\n"
        "search: {num_steps: {low: 4, high: 1}}\n"  # line 4
        "benchmark: {prompts: [hi], max_tokens: -1}\n"  # line 5
    )
    assert [(e.line, e.field) for e in space_errors(path)] == [
        (2, "server.port"),
        (4, "search.num_steps.high"),
        (5, "benchmark.max_tokens"),
    ]
    with pytest.raises(SpaceError, match=r":2: server.port: expected an integer between 1 and 65535, got 0"):
        load_space(path)

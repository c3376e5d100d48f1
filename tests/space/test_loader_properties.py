"""Property tests: whatever the file holds, ``load_space`` returns a Space or raises SpaceError, nothing else."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.errors import SpaceError
from autotune.space import Space, load_space

REPO = Path(__file__).resolve().parents[2]
# every section of eagle3.yaml, with short prompts so that each example parses quickly
VALID = yaml.safe_load((REPO / "spaces" / "eagle3.yaml").read_text())
VALID["benchmark"]["prompts"] = ["short", {"id": "merge-sort", "text": "merge sort", "category": "code"}]

# AUTOTUNE_FUZZ_EXAMPLES=3000 for a longer hunt
SETTINGS = settings(
    max_examples=int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["sglang", "vllm", "llamacpp", "EAGLE", "EAGLE3", "fail", "chat", "0.5.23", "d1", "", " "]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(), st.booleans()), children, max_size=4),
    ),
    max_leaves=12,
)


def load_text(data: bytes) -> Space | None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "space.yaml"
        path.write_bytes(data)
        try:
            return load_space(path)
        except SpaceError:
            return None


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes):
    load_text(data)


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("abc:-[]{}&*!|>'\"#%@`,?\n\t 0123.~<=")), max_size=200))
def test_yaml_ish_text(text: str):
    load_text(text.encode("utf-8"))


@SETTINGS
@given(values)
def test_arbitrary_documents(doc: Any):
    load_text(yaml.safe_dump(doc).encode())


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside a parsed document."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = paths(VALID)


def parent_of(doc: Any, path: tuple) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


mutation = st.tuples(
    st.sampled_from(ALL_PATHS),
    st.sampled_from(["replace", "delete", "rename", "add"]),
    values,
    st.text(max_size=12),
)


@SETTINGS
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutations_of_a_valid_space(mutations: list):
    doc = copy.deepcopy(VALID)
    for path, kind, value, key in mutations:
        try:
            parent = parent_of(doc, path)
            last = path[-1]
            parent[last]  # noqa: B018 - the path may be gone after an earlier mutation
        except (KeyError, IndexError, TypeError):
            continue
        if kind == "replace":
            parent[last] = value
        elif kind == "delete":
            del parent[last]
        elif kind == "rename" and isinstance(parent, dict):
            parent[key] = parent.pop(last)
        elif kind == "add" and isinstance(parent, dict):
            parent[key] = value
        elif kind == "add" and isinstance(parent, list):
            parent.append(value)
    load_text(yaml.safe_dump(doc).encode())


def test_the_unmutated_space_loads():
    assert isinstance(load_text(yaml.safe_dump(VALID).encode()), Space)

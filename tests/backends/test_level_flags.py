"""Launch flags sized from the load levels, per backend: absent without levels (argv unchanged), the highest level
with them, and a user value that does not cover it refused before launch."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.backends import get_backend
from autotune.backends.base import flag_value
from autotune.config import TrialConfig
from autotune.space import BenchmarkSpec, DrafterSpec, Prompt, SearchSpec, ServerSpec, Space


def _space(backend: str, levels=(1,), extra=()) -> Space:
    model = "/m/target.gguf" if backend == "llamacpp" else "/m/target"
    return Space(
        name="t",
        server=ServerSpec(backend=backend, model_path=model, launcher=("server",), extra_args=tuple(extra)),
        drafters=(DrafterSpec(name="d", path="/m/d.gguf" if backend == "llamacpp" else "/m/d", algorithm="EAGLE3"),),
        search=SearchSpec(),
        benchmark=BenchmarkSpec(prompts=(Prompt("a", "hello there"),), max_tokens=100, concurrency=tuple(levels)),
    )


@pytest.mark.parametrize(
    ("backend", "flags"),
    [("sglang", ["--max-running-requests", "--cuda-graph-max-bs-decode"]), ("vllm", ["--max-num-seqs"])],
)
def test_flags_cover_the_highest_level(backend, flags):
    be = get_backend(backend)
    base = TrialConfig.baseline(True)
    plain = be.argv(base, _space(backend), port=1)
    assert not any(f in plain for f in flags)  # [1]: the argv of before
    loaded = be.argv(base, _space(backend, (1, 8, 64)), port=1)
    for f in flags:
        assert flag_value(loaded, f) == "64"
    # a user value that covers the level is kept, not doubled
    given = be.argv(base, _space(backend, (1, 8), extra=(flags[0], "16")), port=1)
    assert given.count(flags[0]) == 1 and flag_value(given, flags[0]) == "16"
    assert be.level_flag_problems((flags[0], "4"), 8) == [
        f"{flags[0]} 4 does not cover the highest load level 8 (benchmark.concurrency)"
    ]
    assert be.level_flag_problems((f"{flags[0]}=8",), 8) == []


@pytest.mark.parametrize(
    ("version", "flag", "other"),
    [
        ("0.5.23", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
        ("0.5.14", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
        ("0.5.13", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
        ("0.4.9.post2", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ],
)
def test_sglang_graph_cap_is_spelled_for_the_version(version, flag, other):
    """SGLang 0.5.14 added --cuda-graph-max-bs-decode (the old flag an alias until 0.5.19; from 0.5.20 the old
    one is an ambiguous prefix and refused)."""
    be = get_backend("sglang")
    space = _space("sglang", (1, 8))
    space = dataclasses.replace(space, server=dataclasses.replace(space.server, version=version))
    argv = be.argv(TrialConfig.baseline(True), space, port=1)
    assert flag_value(argv, flag) == "8" and other not in argv
    # a cap given under either spelling is kept and not doubled
    for given in ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"):
        s = dataclasses.replace(space, server=dataclasses.replace(space.server, extra_args=(given, "16")))
        argv = be.argv(TrialConfig.baseline(True), s, port=1)
        assert argv.count(given) == 1 and flag_value(argv, given) == "16"
        assert "--cuda-graph-max-bs-decode" not in argv or "--cuda-graph-max-bs" not in argv
    assert be.level_flag_problems(("--cuda-graph-max-bs", "4"), 8) == [
        "--cuda-graph-max-bs 4 does not cover the highest load level 8 (benchmark.concurrency)"
    ]
    # launch_server --help decides when probed
    be.max_bs_flag = "--cuda-graph-max-bs"
    assert flag_value(be.argv(TrialConfig.baseline(True), space, port=1), "--cuda-graph-max-bs") == "8"


def test_llamacpp_slots_and_context_per_slot():
    be = get_backend("llamacpp")
    one = _space("llamacpp")
    four = _space("llamacpp", (1, 4))
    assert be.slots(one) == 1 and be.slots(four) == 4
    assert be.context_size(four) == 4 * be.context_size(one)
    argv = be.argv(TrialConfig.baseline(True), four, port=1)
    assert flag_value(argv, "-np") == "4" and flag_value(argv, "-c") == str(4 * be.context_size(one))

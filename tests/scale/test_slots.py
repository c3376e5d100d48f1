"""GPU slots (pure: specs -> slots -> each slot's space) and the CLI's refusals before anything starts."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.backends.llamacpp import LlamaCppBackend
from autotune.backends.sglang import SGLangBackend
from autotune.backends.vllm import VLLMBackend
from autotune.errors import UserError
from autotune.slots import PORT_STRIDE, Slot, check_fits, gpus_needed, make_slots, parse_gpus, slot_space
from autotune.space import load_space
from tests.cli.helpers import REPO, autotune, space_file


@pytest.mark.parametrize(
    "spec, gpus",
    [("0-3", (0, 1, 2, 3)), ("4", (4,)), ("0,2", (0, 2)), ("0-1,6", (0, 1, 6)), (" 5 - 7 ", (5, 6, 7))],
)
def test_parse_gpus(spec, gpus):
    assert parse_gpus(spec) == gpus


@pytest.mark.parametrize("spec, says", [("a", "expected GPU indices"), ("3-1", "low <= high"), ("1,1", "named twice")])
def test_parse_gpus_rejects(spec, says):
    with pytest.raises(UserError, match=says):
        parse_gpus(spec)


def test_slots_must_not_share_a_gpu():
    assert [s.gpus for s in make_slots(["0-3", "4-7"])] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    with pytest.raises(UserError, match=r"--gpus 3-4: GPU 3 is already in slot 0 \(--gpus 0-3\)"):
        make_slots(["0-3", "3-4"])


def _with_args(space, *args):
    return dataclasses.replace(space, server=dataclasses.replace(space.server, extra_args=tuple(args)))


def test_gpus_needed_from_the_parallel_size_flags():
    space = load_space(REPO / "spaces" / "eagle3.yaml")  # --tp-size 8
    assert gpus_needed(space, SGLangBackend.parallel_size_flags) == (8, "--tp-size 8")
    assert gpus_needed(_with_args(space, "--tp=2", "--pp-size", "2"), SGLangBackend.parallel_size_flags)[0] == 4
    assert gpus_needed(_with_args(space, "--tensor-parallel-size", "4"), VLLMBackend.parallel_size_flags)[0] == 4
    assert gpus_needed(_with_args(space, "-tp", "2", "-pp", "3"), VLLMBackend.parallel_size_flags)[0] == 6
    assert gpus_needed(space, LlamaCppBackend.parallel_size_flags) == (1, "no parallel-size flag")


def test_a_slot_too_small_for_the_tensor_parallel_size_is_an_error():
    space = load_space(REPO / "spaces" / "eagle3.yaml")
    flags = SGLangBackend.parallel_size_flags
    check_fits(make_slots(["0-7", "8-15"]), space, flags, "eagle3.yaml")
    with pytest.raises(UserError, match=r"--gpus 8-11: slot 1 has 4 GPU\(s\) but one server of eagle3.yaml needs 8"):
        check_fits(make_slots(["0-7", "8-11"]), space, flags, "eagle3.yaml")


def test_each_slot_has_its_gpus_and_its_ports():
    space = load_space(REPO / "spaces" / "llama-8b-eagle3.yaml")
    a, b = (slot_space(space, s) for s in make_slots(["0", "1"]))
    assert a.server.env["CUDA_VISIBLE_DEVICES"] == "0" and b.server.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert (a.server.port, b.server.port) == (space.server.port, space.server.port + PORT_STRIDE)
    assert SGLangBackend().env(None, b)["CUDA_VISIBLE_DEVICES"] == "1"  # what the server process gets
    assert Slot(2, (4, 5), "4-5").name == "slot-2"


def test_two_slots_on_sqlite_are_refused_before_anything_is_written(tmp_path):
    space = space_file(tmp_path, name="slots-sqlite")
    studies = tmp_path / "studies"
    r = autotune(
        "study", str(space), "--simulate", "--in-process", "--gpus", "0-7", "--gpus", "8-15",
        "--studies-dir", str(studies),
    )  # fmt: skip
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "--gpus with 2 slots needs a server database" in line and "postgresql" in line and "SQLite" in line
    assert "Traceback" not in r.stderr and not studies.exists()


def test_a_slot_smaller_than_the_servers_is_refused_before_anything_is_written(tmp_path):
    space = space_file(tmp_path, name="slots-tp")
    studies = tmp_path / "studies"
    r = autotune("study", str(space), "--simulate", "--in-process", "--gpus", "0-3", "--studies-dir", str(studies))
    assert r.returncode == 2
    assert "needs 8 (server.extra_args: --tp-size 8)" in r.stderr and not studies.exists()


def test_a_worker_on_sqlite_is_refused(tmp_path):
    space = space_file(tmp_path, name="worker-sqlite")
    r = autotune("worker", str(space), "--simulate", "--in-process", "--studies-dir", str(tmp_path / "s"))
    assert r.returncode == 2 and "autotune worker needs a server database" in r.stderr

"""The method choice end to end: ``spaces/methods.yaml`` on the simulator's three truths names the right method
(scripts/bench_methods.py runs 20 seeds per truth; here 2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_methods", ROOT / "scripts" / "bench_methods.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("truth", ["code-edit", "chat", "mtp"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_right_method_wins(tmp_path, truth, seed):
    bench = _bench()
    out = bench.run_one(truth, seed, tmp_path)
    assert out.get("error") is None, out
    assert out["winner"] == bench.TRUTHS[truth]["expect"], out["text"]
    assert out["text"].split(" wins on this prompt set: ")[1]  # the winner's interval follows
    if truth != "mtp":
        assert "MTP: MTP not available for this target" in out["text"]

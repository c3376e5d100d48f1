"""The GPU harness's request-log study (scripts/gpu: ``STUDY_TRAFFIC``): the log it writes on the machine and the
space it reads it through load as autotune reads them, and the flattering log's subset is what it says."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from autotune.space import load_space
from tests.script_loader import load_script

GPU = Path(__file__).resolve().parents[2] / "scripts" / "gpu"


def _script(name: str) -> ModuleType:
    return load_script(f"gpu/{name}.py", f"gpu_{name}")


@pytest.mark.parametrize("flatter", [False, True])
def test_the_harness_log_is_a_chat_request_log_study_with_a_holdout(tmp_path, flatter):
    log, space_yaml = _script("traffic_log"), _script("gpu_space")
    models = tmp_path / "models"
    models.mkdir()
    for name in ("target.gguf", "draft-good.gguf", "draft-bad.gguf"):
        (models / name).write_bytes(b"GGUF")
    argv = [str(tmp_path / "log.jsonl")] + (["--flatter", "16"] if flatter else [])
    assert log.main(argv) == 0
    text = space_yaml.space_yaml(
        name="t", server="/bin/true", models=str(models), requests_file=str(tmp_path / "log.jsonl")
    )
    (tmp_path / "space.yaml").write_text(text)
    b = load_space(str(tmp_path / "space.yaml")).benchmark
    assert b.api == "chat" and len(b.prompts) == 16 and len(b.holdout) == 16
    assert {p.max_tokens for p in b.prompts + b.holdout} <= {48, 64, 96}
    temps = [b.temperature_for(p) for p in b.prompts]
    if not flatter:
        assert 0 < sum(t > 0 for t in temps) < 16  # some sample: the temperature-0 check runs on the winner
        return
    assert temps == [0.0] * 16 and all("python" in p.text for p in b.prompts)
    assert all(b.temperature_for(p) == 1.0 and "poem" in p.text for p in b.holdout)

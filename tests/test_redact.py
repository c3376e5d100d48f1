"""Secret-looking environment variables are never stored or printed."""

from __future__ import annotations

import pytest

from autotune.redact import is_secret_name, redact_env


@pytest.mark.parametrize(
    "name, secret",
    [("HF_TOKEN", True), ("openai_api_key", True), ("DB_PASSWD", True), ("AWS_SECRET", True), ("PATH", False)],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_redact_env_copies():
    env = {"HF_TOKEN": "hf_x", "CUDA_VISIBLE_DEVICES": "0"}
    assert redact_env(env) == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}
    assert env["HF_TOKEN"] == "hf_x"

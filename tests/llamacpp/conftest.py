from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil

from autotune.space import BenchmarkSpec, DrafterSpec, IntRange, Prompt, SearchSpec, ServerSpec, Space

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))  # the tiny GGUF writer (scripts/llamacpp_models.py) for this folder's tests

from llamacpp_models import ModelSpec, models_present, write_models  # noqa: E402


def models_dir() -> Path:
    """The tiny models of the live tests: ``$AUTOTUNE_LLAMACPP_MODELS``, else ``studies/llamacpp-models`` when it
    holds the default models, else written once into the autotune cache folder (~20 s)."""
    env = os.environ.get("AUTOTUNE_LLAMACPP_MODELS")
    if env:
        return Path(env)
    studies = REPO / "studies" / "llamacpp-models"
    if models_present(studies, ModelSpec()):
        return studies
    from autotune.backends.llamacpp_methods import cache_dir

    target = cache_dir() / "llamacpp-test-models"
    write_models(target, ModelSpec())
    return target


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def make_space(
    *,
    knobs=None,
    drafters=(("good", "/m/draft-good.gguf", None), ("bad", "/m/draft-bad.gguf", None)),
    cuda_graph=(True,),
    launcher=("/opt/llama/llama-server",),
    extra_args=(),
    env=None,
    model_path="/m/target.gguf",
    max_tokens=64,
    prompts=("hello there", "a longer prompt about mountains"),
    port=30080,
    **server,
) -> Space:
    return Space(
        name="llamacpp-test",
        server=ServerSpec(
            backend="llamacpp",
            model_path=model_path,
            launcher=tuple(launcher),
            extra_args=tuple(extra_args),
            env=dict(env or {}),
            port=port,
            **server,
        ),
        drafters=tuple(DrafterSpec(name=n, path=p, algorithm=a) for n, p, a in drafters),
        search=SearchSpec(
            cuda_graph=tuple(cuda_graph),
            knobs=dict(knobs if knobs is not None else {"draft_n_max": IntRange(1, 16)}),
        ),
        benchmark=BenchmarkSpec(
            prompts=tuple(Prompt(id=f"p{i}", text=t) for i, t in enumerate(prompts)),
            max_tokens=max_tokens,
            warmup_requests=1,
            retries=0,
        ),
    )

#!/usr/bin/env bash
# Install vLLM's own `vllm serve` argument parser and engine-config builder on CPU, for
# tests/servers/test_vllm_parser.py.
#
# Usage: scripts/vllm_setup.sh
#
# - A Python given by $AUTOTUNE_VLLM_PYTHON that imports vllm $VLLM_VERSION's parser is used as is.
# - Otherwise a venv is made once at ${AUTOTUNE_CACHE:-$HOME/.cache/autotune}/vllm-$VLLM_VERSION
#   (outside the repository) and reused while it imports fine.
# - Not a working vLLM server: vllm is installed without its dependencies (they pull CUDA kernels, FlashInfer and
#   a CUDA torch, several GB), plus only what importing `vllm serve`'s parser (vllm.entrypoints.cli.serve)
#   and running `EngineArgs.create_engine_config` on vLLM's CPU platform needs (found by trying, for 0.33.0;
#   versions pinned as vllm 0.33.0's metadata pins them), with the CPU torch wheel this machine holds
#   (torch==$TORCH_VERSION; vllm 0.33.0 asks for torch 2.14.0, whose PyPI wheel is the multi-GB CUDA build: nothing
#   on the parse and config path differs between the two). tests/servers/vllm_parse.py says what runs.
# The last line printed is the path of the venv's python.
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
TORCH_VERSION="${VLLM_TORCH_VERSION:-2.13.0}"
CACHE_ROOT="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}"
VENV="$CACHE_ROOT/vllm-$VLLM_VERSION"
BASE_PY="${PYTHON:-$(command -v python3)}"

# What the parse and engine-config path imports beyond vllm itself (pins: vllm 0.33.0's Requires-Dist).
DEPS=(
    "transformers>=5.16.1,<5.21.0" "tokenizers>=0.23.2" "huggingface_hub>=1.31.0" "safetensors>=0.6.2"
    "pydantic>=2.12.0" "fastapi>=0.133.0,<0.137.0" "aiohttp>=3.14.4" "openai>=2.25.0" "oss-harmony>=0.0.11"
    "orjson>=3.11.6" "pillow>=13.0.0" "prometheus_client>=0.18.0" "requests>=2.33.0" "pyzmq>=25.0.0"
    "llguidance>=1.7.0,<1.8.0"
    regex cachetools psutil sentencepiece numpy tqdm blake3 py-cpuinfo pyyaml msgspec cloudpickle cbor2 pybase64
    uvloop partial-json-parser einops uvicorn watchfiles "apache-tvm-ffi==0.1.11"
)

log() { printf '[vllm_setup] %s\n' "$*" >&2; }

imports_ok() {
    VLLM_TARGET_DEVICE=cpu "$1" -c 'import vllm.entrypoints.cli.serve, vllm.engine.arg_utils, vllm.config.speculative, xgrammar' \
        >/dev/null 2>&1 || return 1
    "$1" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm") != sys.argv[1])' "$VLLM_VERSION"
}

if [[ -n "${AUTOTUNE_VLLM_PYTHON:-}" ]]; then
    if imports_ok "$AUTOTUNE_VLLM_PYTHON"; then
        log "using $AUTOTUNE_VLLM_PYTHON"
        printf '%s\n' "$AUTOTUNE_VLLM_PYTHON"
        exit 0
    fi
    log "AUTOTUNE_VLLM_PYTHON=$AUTOTUNE_VLLM_PYTHON cannot import vllm $VLLM_VERSION's argument parser"
    exit 1
fi

if [[ -x "$VENV/bin/python" ]] && imports_ok "$VENV/bin/python"; then
    log "using cached $VENV"
    printf '%s\n' "$VENV/bin/python"
    exit 0
fi

start=$SECONDS
log "installing vllm==$VLLM_VERSION (parser and engine config only, CPU) into $VENV"
rm -rf -- "$VENV"
mkdir -p "$CACHE_ROOT"
"$BASE_PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
constraints="$(mktemp "${TMPDIR:-/tmp}/vllm-constraints.XXXXXX")"
# shellcheck disable=SC2064
trap "rm -f -- '$constraints'" EXIT
# every later install keeps this torch and this vllm (a dependency asking for another would fetch a CUDA build)
printf 'torch==%s\nvllm==%s\n' "$TORCH_VERSION" "$VLLM_VERSION" >"$constraints"
"${PIP[@]}" -c "$constraints" "torch==$TORCH_VERSION" >&2
"${PIP[@]}" --no-deps "vllm==$VLLM_VERSION" >&2
"${PIP[@]}" -c "$constraints" "${DEPS[@]}" >&2
# xgrammar is imported on the engine-config path (structured outputs); its triton dependency (1 GB, GPU kernels) is
# never imported there, so it is installed without it (its other dependencies are in DEPS)
"${PIP[@]}" --no-deps "xgrammar==0.2.8" typing-extensions >&2
if ! imports_ok "$VENV/bin/python"; then
    log "the venv at $VENV still cannot import vllm's argument parser:"
    VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c 'import vllm.entrypoints.cli.serve, vllm.engine.arg_utils' >&2 || true
    exit 1
fi
log "installed in $((SECONDS - start)) s"
printf '%s\n' "$VENV/bin/python"

#!/usr/bin/env bash
# Install SGLang's own argument parser and adaptive-config loader on CPU, for tests/servers/test_sglang_parser.py.
#
# Usage: scripts/sglang_setup.sh
#
# - A Python given by $AUTOTUNE_SGLANG_PYTHON that imports sglang is used as is.
# - Otherwise a venv is made once at ${AUTOTUNE_CACHE:-$HOME/.cache/autotune}/sglang-$SGLANG_VERSION
#   (outside the repository) and reused while it imports fine.
# - Not a working SGLang server: sglang is installed without its dependencies (they pull CUDA kernels and a
#   CUDA torch, several GB), plus only what importing `sglang.srt.server_args` and running `ServerArgs.resolve_once`
#   on `--device cpu` needs (found by trying, for 0.5.23), with the CPU torch wheel this machine holds
#   (torch==$TORCH_VERSION; a plain `torch` would fetch a multi-GB CUDA build). torchvision is left out on purpose:
#   PyPI's wheel is built for CUDA torch and fails to import next to a CPU torch; tests/servers/sglang_parse.py says
#   how it copes.
# The last line printed is the path of the venv's python.
set -euo pipefail

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="${SGLANG_TORCH_VERSION:-2.13.0}"
CACHE_ROOT="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}"
VENV="$CACHE_ROOT/sglang-$SGLANG_VERSION"
BASE_PY="${PYTHON:-$(command -v python3)}"

# What the imports need beyond sglang itself; versions pinned where sglang 0.5.23's metadata pins them.
DEPS=(
    "transformers==5.19.0" "tokenizers==0.23.2" "compressed-tensors==0.18.0" "sentencepiece==0.2.1"
    "apache-tvm-ffi==0.1.11" triton numpy orjson psutil pybase64 requests packaging pillow starlette msgspec
    pydantic pyzmq tqdm IPython aiohttp dill gguf
)

log() { printf '[sglang_setup] %s\n' "$*" >&2; }

imports_ok() {
    "$1" -c 'import sglang.srt.server_args, sglang.srt.speculative.adaptive_spec_params, transformers, tvm_ffi, gguf' \
        >/dev/null 2>&1 || return 1
    "$1" -c 'import importlib.metadata as m, sys; sys.exit(m.version("sglang") != sys.argv[1])' "$SGLANG_VERSION"
}

if [[ -n "${AUTOTUNE_SGLANG_PYTHON:-}" ]]; then
    if imports_ok "$AUTOTUNE_SGLANG_PYTHON"; then
        log "using $AUTOTUNE_SGLANG_PYTHON"
        printf '%s\n' "$AUTOTUNE_SGLANG_PYTHON"
        exit 0
    fi
    log "AUTOTUNE_SGLANG_PYTHON=$AUTOTUNE_SGLANG_PYTHON cannot import sglang $SGLANG_VERSION's server_args"
    exit 1
fi

if [[ -x "$VENV/bin/python" ]] && imports_ok "$VENV/bin/python"; then
    log "using cached $VENV"
    printf '%s\n' "$VENV/bin/python"
    exit 0
fi

start=$SECONDS
log "installing sglang==$SGLANG_VERSION (parser only, CPU) into $VENV"
rm -rf -- "$VENV"
mkdir -p "$CACHE_ROOT"
"$BASE_PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
constraints="$(mktemp "${TMPDIR:-/tmp}/sglang-constraints.XXXXXX")"
# shellcheck disable=SC2064
trap "rm -f -- '$constraints'" EXIT
# every later install keeps this torch (a dependency asking for another would fetch the CUDA build)
printf 'torch==%s\n' "$TORCH_VERSION" >"$constraints"
"${PIP[@]}" -c "$constraints" "torch==$TORCH_VERSION" >&2
"${PIP[@]}" --no-deps "sglang==$SGLANG_VERSION" >&2
"${PIP[@]}" -c "$constraints" "${DEPS[@]}" >&2
if ! imports_ok "$VENV/bin/python"; then
    log "the venv at $VENV still cannot import sglang's server_args:"
    "$VENV/bin/python" -c 'import sglang.srt.arg_groups.pipeline' >&2 || true
    exit 1
fi
log "installed in $((SECONDS - start)) s"
printf '%s\n' "$VENV/bin/python"

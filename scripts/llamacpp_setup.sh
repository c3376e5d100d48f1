#!/usr/bin/env bash
# Build llama.cpp's llama-server (from the llama-cpp-python sdist) and write tiny GGUF test models.
#
# Usage: scripts/llamacpp_setup.sh [MODELS_DIR]        (default: studies/llamacpp-models)
#
# - A llama-server given by $AUTOTUNE_LLAMA_SERVER, or found on PATH, is used as is.
# - Otherwise the binary is built once into
#   ${AUTOTUNE_CACHE:-$HOME/.cache/autotune}/llama-server-$LLAMA_CPP_PYTHON_VERSION/llama-server
#   (outside the repository; never commit it) and reused on later runs.
# - The tiny target/draft models are (re)written only when missing or written with other parameters.
# - Uses the Python of the current environment ($PYTHON, else `python`, else `python3`); it needs `gguf` and numpy.
# The last line printed is the path of the llama-server binary.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
MODELS_DIR="${1:-studies/llamacpp-models}"
CACHE_ROOT="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}"
CACHE_DIR="$CACHE_ROOT/llama-server-$LLAMA_CPP_PYTHON_VERSION"
CACHED_BIN="$CACHE_DIR/llama-server"

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif command -v python >/dev/null 2>&1; then
    PY="$(command -v python)"
else
    PY="$(command -v python3)"
fi

log() { printf '[llamacpp_setup] %s\n' "$*" >&2; }

find_server() {
    if [[ -n "${AUTOTUNE_LLAMA_SERVER:-}" ]]; then
        if [[ -x "$AUTOTUNE_LLAMA_SERVER" ]]; then
            printf '%s\n' "$AUTOTUNE_LLAMA_SERVER"
            return 0
        fi
        log "AUTOTUNE_LLAMA_SERVER=$AUTOTUNE_LLAMA_SERVER is not an executable file"
        return 1
    fi
    if command -v llama-server >/dev/null 2>&1; then
        command -v llama-server
        return 0
    fi
    if [[ -x "$CACHED_BIN" ]]; then
        printf '%s\n' "$CACHED_BIN"
        return 0
    fi
    return 1
}

build_server() {
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-build.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf -- '$work'" EXIT
    log "building llama-server from llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION in $work (several minutes)"
    local start=$SECONDS
    "$PY" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work/sdist"
    tar xzf "$work/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
    local src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_UI=OFF >&2
    cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
    mkdir -p "$CACHE_DIR"
    # copy then rename so an interrupted copy never leaves a half-written binary at the cached path
    cp "$work/build/bin/llama-server" "$CACHED_BIN.tmp.$$"
    chmod +x "$CACHED_BIN.tmp.$$"
    mv -f "$CACHED_BIN.tmp.$$" "$CACHED_BIN"
    log "built $CACHED_BIN in $((SECONDS - start)) s"
    rm -rf -- "$work"
    trap - EXIT
}

if SERVER="$(find_server)"; then
    log "using llama-server: $SERVER"
else
    if [[ -n "${AUTOTUNE_LLAMA_SERVER:-}" ]]; then
        exit 1
    fi
    build_server
    SERVER="$CACHED_BIN"
fi

if [[ "${AUTOTUNE_SKIP_MODELS:-0}" != "1" ]]; then
    if ! "$PY" -c 'import gguf, numpy' >/dev/null 2>&1; then
        log "$PY cannot import gguf and numpy: run '$PY -m pip install gguf numpy' (or pip install -e '.[llamacpp]'), or set PYTHON"
        exit 1
    fi
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m autotune.llamacpp_models "$MODELS_DIR" >&2
fi

printf '%s\n' "$SERVER"

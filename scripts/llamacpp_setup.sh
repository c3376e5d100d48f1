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
# - Uses the Python of the current environment ($PYTHON, else `python`, else `python3`); it needs `gguf` and numpy
#   (pip install -e '.[llamacpp]') for the models, and pip, tar, cmake, make (or ninja) and a C and C++ compiler
#   for a build. Everything needed is checked first: one message naming all that is missing, before a build starts.
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
    PY="$(command -v python3 || true)"
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

# What this run needs, checked before anything is built or written (a build takes half an hour on 2 cores):
# prints one line per missing piece with how to get it; returns 1 when anything is missing.
check_requirements() {
    local need_build=$1 missing=()
    if [[ -z "$PY" ]] || ! "$PY" -c '' >/dev/null 2>&1; then
        missing+=("a Python interpreter: set PYTHON, or put python or python3 on PATH")
    else
        if [[ "${AUTOTUNE_SKIP_MODELS:-0}" != "1" ]]; then
            local mods
            mods="$("$PY" - <<'PYEOF' 2>/dev/null || echo "gguf numpy"
import importlib
missing = []
for name in ("gguf", "numpy"):
    try:
        importlib.import_module(name)
    except Exception:
        missing.append(name)
print(" ".join(missing))
PYEOF
)"
            if [[ -n "$mods" ]]; then
                missing+=("the Python module(s) $mods in $PY (to write the tiny models): pip install -e '.[llamacpp]' (or $PY -m pip install gguf numpy), or set PYTHON to a Python that has them")
            fi
        fi
        if [[ "$need_build" == 1 ]] && ! "$PY" -m pip --version >/dev/null 2>&1; then
            missing+=("pip in $PY (to download the llama-cpp-python sdist): $PY -m ensurepip")
        fi
    fi
    if [[ "$need_build" == 1 ]]; then
        local tool
        for tool in tar cmake; do
            command -v "$tool" >/dev/null 2>&1 || missing+=("$tool (to build llama-server): e.g. apt-get install $tool")
        done
        if ! command -v make >/dev/null 2>&1 && ! command -v ninja >/dev/null 2>&1; then
            missing+=("make or ninja (to build llama-server): e.g. apt-get install make")
        fi
        if ! command -v "${CC:-cc}" >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; then
            missing+=("a C compiler (to build llama-server): e.g. apt-get install gcc, or set CC")
        fi
        if ! command -v "${CXX:-c++}" >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
            missing+=("a C++ compiler (to build llama-server): e.g. apt-get install g++, or set CXX")
        fi
    fi
    if ((${#missing[@]})); then
        log "missing (nothing was built or written):"
        local m
        for m in "${missing[@]}"; do
            log "  - $m"
        done
        if [[ "$need_build" == 1 ]]; then
            log "(or skip the build: name a llama-server binary in AUTOTUNE_LLAMA_SERVER or put one on PATH)"
        fi
        return 1
    fi
}

if SERVER="$(find_server)"; then
    check_requirements 0 || exit 1
    log "using llama-server: $SERVER"
else
    if [[ -n "${AUTOTUNE_LLAMA_SERVER:-}" ]]; then
        exit 1
    fi
    check_requirements 1 || exit 1
    build_server
    SERVER="$CACHED_BIN"
fi

if [[ "${AUTOTUNE_SKIP_MODELS:-0}" != "1" ]]; then
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$REPO_ROOT/scripts/llamacpp_models.py" "$MODELS_DIR" >&2
fi

printf '%s\n' "$SERVER"

#!/usr/bin/env bash
# Pack what scripts/gpu/run.sh needs on a CUDA machine with no network and no package index.
#
# Usage (here, where pip reaches PyPI; from anywhere in the repository):
#   scripts/gpu/pack.sh            # writes .gpu/llama.cpp-src.tar.xz, .gpu/wheels/*.whl, .gpu/pack.json
#   scripts/gpu/pack.sh --verify   # ... then configures and builds llama-server (CPU) from the packed tarball
#
# .gpu/ (git-ignored) then holds
#   llama.cpp-src.tar.xz  the llama.cpp that the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist vendors, stripped
#                         of what a llama-server build does not read: models/, docs/, tests/, examples/, the web UI's
#                         sources (tools/ui keeps only its CMake file and the two templates; the build runs with
#                         -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF, so it neither runs npm nor downloads a
#                         prebuilt bundle and embeds an empty UI), the ggml backends other than CPU and CUDA, .git*,
#                         media, CI files, Python converters;
#   wheels/               Python 3.12 x86-64 wheels of the packages autotune needs that the GPU machine lacks
#                         (optuna and its needs, gguf), the versions installed in this environment;
#   pack.json             what was packed: versions, sizes, sha256s.
# Nothing else is written outside .gpu/ (downloads go to a temporary folder that is removed).
#
# Environment:
#   PYTHON        the Python whose installed versions are packed (default: .venv/bin/python, else python3)
#   LLAMA_SRC     an extracted vendor/llama.cpp to pack instead of downloading the sdist
#   WHEELS        space-separated NAME==VERSION list replacing the default set
#   PACK_PLOTLY=1 also pack plotly (the HTML report's plots; ~10 MB; autotune works without it)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GPU_DIR="$REPO_ROOT/.gpu"
VERIFY=0
for arg in "$@"; do
    case "$arg" in
        --verify) VERIFY=1 ;;
        -h | --help) sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "pack.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
    PY="$REPO_ROOT/.venv/bin/python"
else
    PY="$(command -v python3)"
fi

log() { printf '[pack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

WORKTMP="$(mktemp -d "${TMPDIR:-/tmp}/gpu-pack.XXXXXX")"
# shellcheck disable=SC2064
trap "rm -rf -- '$WORKTMP'" EXIT
mkdir -p "$GPU_DIR"

# ------------------------------------------------------------------------------------------ llama.cpp source
SRC="${LLAMA_SRC:-}"
if [[ -z "$SRC" ]]; then
    log "downloading the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$WORKTMP/sdist"
    tar xzf "$WORKTMP/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$WORKTMP"
    SRC="$WORKTMP/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
fi
[[ -f "$SRC/CMakeLists.txt" && -d "$SRC/ggml/src/ggml-cuda" ]] || { log "no llama.cpp source at $SRC"; exit 1; }
log "stripping $SRC"

STAGE="$WORKTMP/stage/llama.cpp"
mkdir -p "$STAGE"
# Top level: only what CMake reads for llama-server (app/ is tiny and added by default; licenses/ is globbed by it).
keep_top=(CMakeLists.txt LICENSE cmake common ggml include src vendor tools app licenses)
# (older releases, e.g. 0.3.23, have no app/, licenses/ or tools/ui/: what a release lacks is skipped)
for entry in "${keep_top[@]}"; do
    [[ -e "$SRC/$entry" ]] && cp -a "$SRC/$entry" "$STAGE/"
done
mkdir -p "$STAGE/scripts"
# the CMake scripts the build runs: ui-assets.cmake (tools/ui emits an empty UI), xxd.cmake (older releases embed
# tools/server/public/ with it)
for f in ui-assets.cmake xxd.cmake; do
    [[ -f "$SRC/scripts/$f" ]] && cp -a "$SRC/scripts/$f" "$STAGE/scripts/"
done

# ggml: the CPU and CUDA backends only (the others are add_subdirectory'd only when their GGML_<X> is ON)
for d in "$STAGE"/ggml/src/ggml-*/; do
    case "$(basename "$d")" in
        ggml-cpu | ggml-cuda) ;;
        *) rm -rf -- "$d" ;;
    esac
done
# the web UI: keep the CMake file and the templates it fills; drop the Svelte sources, tests, lock files
[[ -d "$STAGE/tools/ui" ]] && find "$STAGE/tools/ui" -mindepth 1 -maxdepth 1 \
    ! -name CMakeLists.txt ! -name ui.cpp.in ! -name ui.h.in ! -name sources.cmake -exec rm -rf -- {} +
rm -rf -- "$STAGE/tools/ui/dist"   # a prebuilt bundle would be embedded; there is none, make sure
# server and mtmd test data, benches, docs
if [[ ! -d "$STAGE/tools/ui" && -d "$STAGE/tools/server/public" ]]; then
    # older releases (e.g. 0.3.23) embed the built web UI from tools/server/public/ (CMake lists each file): keep
    # the names, one space each (CMake's xxd.cmake refuses an empty file; the server then serves a blank page:
    # autotune uses only the API)
    find "$STAGE/tools/server/public" -type f -exec sh -c 'for f; do printf " " >"$f"; done' sh {} +
    rm -rf -- "$STAGE/tools/server/public_"*
else
    rm -rf -- "$STAGE/tools/server/public"*
fi
rm -rf -- "$STAGE/tools/server/tests" "$STAGE/tools/server/bench" \
    "$STAGE/tools/mtmd/tests" "$STAGE/tools/mtmd/test-"*
find "$STAGE" \( -name '*.md' -o -name '*.mp3' -o -name '*.mp4' -o -name '*.png' -o -name '*.jpg' \
    -o -name '*.gif' -o -name '*.wav' -o -name '*.gguf' -o -name '*.py' -o -name '.git*' -o -name '.clang-*' \) \
    -exec rm -rf -- {} +
printf 'llama.cpp as vendored by llama-cpp-python==%s, stripped by autotune scripts/gpu/pack.sh\n' \
    "$LLAMA_CPP_PYTHON_VERSION" >"$STAGE/AUTOTUNE-PACKED.txt"

TARBALL="$GPU_DIR/llama.cpp-src.tar.xz"
log "writing $TARBALL"
# fixed owner and mtime: the same source gives the same tarball
XZ_OPT="-9 -T0" tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2020-01-01 00:00Z' \
    -cJf "$TARBALL.tmp" -C "$WORKTMP/stage" llama.cpp
mv -f "$TARBALL.tmp" "$TARBALL"
log "$(du -h "$TARBALL" | cut -f1) $TARBALL ($(du -sh "$STAGE" | cut -f1) unpacked)"

# ------------------------------------------------------------------------------------------------- wheels
# Missing on the GPU machine (it has numpy, scipy, httpx, psutil, pyyaml, rich, joblib, packaging, tqdm, requests,
# markupsafe, typing-extensions, narwhals): optuna -> alembic, colorlog, sqlalchemy (-> typing-extensions);
# alembic -> mako (-> markupsafe), typing-extensions>=4.12; gguf -> numpy, pyyaml, requests, tqdm.
# SQLAlchemy 2.1 needs greenlet only for asyncio (not installed); typing-extensions and MarkupSafe are packed too so
# the versions are the ones tested here (the machine's could be older than alembic's >=4.12).
installed_version() {
    "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null
}
if [[ -n "${WHEELS:-}" ]]; then
    read -r -a specs <<<"$WHEELS"
else
    # plotly (the HTML report's plots; narwhals is on the machine) and optuna-dashboard (-> bottle: the dashboard
    # notes) are autotune dependencies too: without them the H200 study of 2026-12-01 ended with an import error
    names=(optuna alembic SQLAlchemy Mako colorlog gguf typing_extensions MarkupSafe plotly optuna-dashboard bottle)
    specs=()
    for n in "${names[@]}"; do
        v="$(installed_version "$n")" || { log "$n is not installed in $PY: install it or set WHEELS"; exit 1; }
        specs+=("$n==$v")
    done
fi
WHEEL_DIR="$GPU_DIR/wheels"
rm -rf -- "$WHEEL_DIR.tmp"
mkdir -p "$WHEEL_DIR.tmp"
log "downloading cp312 manylinux x86_64 wheels: ${specs[*]}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$WHEEL_DIR.tmp" "${specs[@]}"
count="$(find "$WHEEL_DIR.tmp" -name '*.whl' | wc -l)"
if [[ "$count" != "${#specs[@]}" ]]; then
    log "expected ${#specs[@]} wheels but got $count:"; ls "$WHEEL_DIR.tmp" >&2; exit 1
fi
rm -rf -- "$WHEEL_DIR"
mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
ls -l "$WHEEL_DIR" >&2

# ------------------------------------------------------------------------------------------------ manifest
"$PY" - "$GPU_DIR" "$LLAMA_CPP_PYTHON_VERSION" "${specs[@]}" <<'EOF'
import hashlib, json, os, sys, time
gpu, version, *specs = sys.argv[1:]
def digest(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
files = {}
for root, _, names in os.walk(gpu):
    for n in names:
        p = os.path.join(root, n)
        rel = os.path.relpath(p, gpu)
        if rel == "llama.cpp-src.tar.xz" or rel.startswith("wheels" + os.sep):
            files[rel] = {"bytes": os.path.getsize(p), "sha256": digest(p)}
total = sum(f["bytes"] for f in files.values())
manifest = {"packed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "llama_cpp_python": version,
            "wheels": specs, "files": files, "total_bytes": total}
with open(os.path.join(gpu, "pack.json"), "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
print(f"[pack] {len(files)} files, {total / 2**20:.1f} MiB in {gpu} (carry .gpu/llama.cpp-src.tar.xz and .gpu/wheels)",
      file=sys.stderr)
EOF

# ------------------------------------------------------------------------------------------------- verify
if [[ "$VERIFY" == "1" ]]; then
    # the cmake flags of run.sh's build stage, CPU only, in a temporary folder: proves that the stripped tree
    # configures and builds llama-server (several minutes on 2 cores); the outcome is recorded in pack.json
    VDIR="$WORKTMP/verify"
    mkdir -p "$VDIR"
    tar xJf "$TARBALL" -C "$VDIR"
    log "verifying: configure + build llama-server (CPU) from the packed tarball in $VDIR"
    start=$SECONDS
    GIT_CEILING_DIRECTORIES="$VDIR" cmake -S "$VDIR/llama.cpp" -B "$VDIR/build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF >"$VDIR/configure.log" 2>&1 \
        || { tail -30 "$VDIR/configure.log" >&2; exit 1; }
    cmake --build "$VDIR/build" --target llama-server -j"$(nproc)" >"$VDIR/build.log" 2>&1 \
        || { tail -40 "$VDIR/build.log" >&2; exit 1; }
    version="$("$VDIR/build/bin/llama-server" --version 2>&1 | paste -sd' ')"
    seconds=$((SECONDS - start))
    "$PY" - "$GPU_DIR/pack.json" "$seconds" "$version" <<'EOF'
import json, sys
path, seconds, version = sys.argv[1:]
doc = json.load(open(path))
doc["verified"] = {"cpu_build_seconds": int(seconds), "llama_server_version": version}
json.dump(doc, open(path, "w"), indent=1, sort_keys=True)
EOF
    log "verified: llama-server built from the packed tarball in $seconds s ($version)"
fi

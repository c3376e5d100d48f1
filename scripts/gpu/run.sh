#!/usr/bin/env bash
# The GPU harness: build llama.cpp's llama-server with CUDA, write GPU-size GGUF models, run a manual sweep and a
# default autotune study, on a CUDA machine with NO network and NO package index. Everything it reads comes from
# the repository and .gpu/ (scripts/gpu/pack.sh fills it where pip works); it never downloads anything.
#
#   scripts/gpu/run.sh STAGE [STAGE ...]        (from any folder; it works in the repository root)
#
# Stages (in the order given; `build` and `models` given together run side by side):
#   setup    install .gpu/wheels into $GPU_SITE (default /tmp/site) with pip --no-index --target; check that
#            `python3 -m autotune --help` works from the tree (the other stages run setup when it is missing)
#   build    untar .gpu/llama.cpp-src.tar.xz and build llama-server with CUDA for the GPU's compute capability
#            (nvidia-smi) into .gpu/build/ (kept between commands on one machine: skipped when built; a build
#            cut short by BUILD_WALL_S resumes where it stopped)
#   models   write the target/draft-good/draft-bad GGUF models into .gpu/models (scripts/llamacpp_models.py;
#            skipped when present with the same parameters)
#   sweep    scripts/gpu/sweep.py on .gpu/space.yaml: baseline and drafters over draft_n_max x CUDA graphs,
#            fresh server per start, partial results after every start, resumable
#   study    `autotune study .gpu/space.yaml --json`, then `autotune report --json` and `autotune export --format
#            command`; cut at STUDY_WALL_S with SIGTERM (the study stops its server and is resumed by the next
#            `run.sh study`)
#   reverify `autotune export --format yaml` of the finished study, then `autotune reverify` of it (REVERIFY_REPEATS
#            rounds); cut at REVERIFY_WALL_S with SIGINT (its rounds are journaled: the next `run.sh reverify`
#            resumes them); writes reverify.json and reverify.log
#   all      setup, build + models, sweep, study (too long for one 10-minute command: use it where time is free)
#
# Output: $OUT (default studies/gpu-out) gets run.log (this run's output), machine.txt, harness.json (every stage's
# timing and facts so far, kept in .gpu/state/), and per stage: build.log; sweep.json, sweep.md,
# recorded-streams.json; space.yaml, study.json, report.json, export.txt, study.log. At most 8 files: when a run
# makes more (`all`), the rest are packed into results.tar.gz. scripts/gpu/writeup.py reads these folders. The
# device returns at most 8 files per call in all: two run.sh in one call (each its own OUT under the call's $OUT)
# must stay under that together, or the later files do not come back (levels22 lost a reverify.json so).
#
# Settings (environment; defaults are for one H200):
#   LLAMA_SERVER    use this llama-server instead of building one (the build stage then does nothing)
#   PYTHON          the Python (default python3)        GPU_SITE   wheel install folder (default /tmp/site)
#   GPU_SKIP_SETUP=1  use PYTHON's own packages (a dev venv with autotune's dependencies); no wheels installed
#   GPU_WORK        where build/, models/, state/, studies/ go (default .gpu)
#   CUDA_ARCH       e.g. 90 (default: nvidia-smi's compute_cap without the dot)
#   GPU_BUILD_CUDA  1 (default) or 0 (a CPU build: tests the stage without a GPU)
#   BUILD_JOBS      parallel compile jobs (default nproc)      BUILD_WALL_S  build time limit (default 540)
#   EXTRA_CMAKE_ARGS  more cmake arguments, space-separated, after ours (e.g. -DGGML_CUDA_NO_VMM=ON)
#   CUBLAS_ROOT     a folder with include/cublas_v2.h and lib/libcublas.so* (default: the CUDA toolkit's, else the
#                   nvidia-cublas wheel of python3's site-packages, e.g. PyTorch's)
#   MODEL_WIDTH MODEL_LAYERS MODEL_DRAFT_LAYERS MODEL_HEADS MODEL_KV_HEADS MODEL_FFN MODEL_EPS MODEL_BAD_NOISE
#   MODEL_LOGIT_SCALE MODEL_DTYPE    (defaults 4096 32 2 32 8 14336 0.03 0.8 6 f16: a Mistral-7B shape, 14 GB F16;
#                   on a CPU copy of that depth (width 512) the good draft's acceptance length was 1.84 / 3.61 / 4.93 /
#                   6.00 at draft_n_max 1 / 4 / 8 / 16, the bad draft's 1.19-1.25; writing the models takes ~42 GB of
#                   RAM, 3x the target's F16 size)
#   MAX_TOKENS (256)  SERVER_EXTRA_ARGS (none)  STARTUP_TIMEOUT_S (300)  PORT (30080)
#   SWEEP_REPEATS (2)  SWEEP_GRAPHS (on,off)  SWEEP_GOOD_N (1,2,3,4,5,6,7,8,10,12,16)  SWEEP_BAD_N (2,4,8; empty: none)
#   SWEEP_BUDGET_S (450: the default plan took 431 s on an H200)
#   SWEEP_FRESH (0; 1 ignores an earlier sweep's results)
#   STUDY_TRIALS (16)  STUDY_GRAPHS (off,on)  STUDY_WALL_S (480)  STUDY_NAME (llamacpp-gpu)
#   STUDY_CONCURRENCY (none; e.g. 1,4,16: the study measures these load levels, llama-server gets -np slots)
#   STUDY_METHODS   (none) a method study instead of the default one: llama.cpp --spec-type methods, comma-separated,
#                   a combination joined with + (e.g. draft-simple,ngram-simple,ngram-mod,draft-simple+ngram-mod):
#                   the study stage writes .gpu/space-methods.yaml (search.methods over the same models, the good
#                   drafter, prompts that ask to rewrite a function) and runs it as study STUDY_NAME-methods
#   STUDY_TRAFFIC   (none) a request-log study instead of the default one: clean or flatter. The study stage writes a
#                   chat request log of TRAFFIC_LOG_N (120) requests (scripts/gpu/traffic_log.py: code/chat/summary,
#                   max_tokens 48-96, temperature 0/0.7/1.0; flatter: the picked subset asks for code at temperature
#                   0, the rest for a poem at 1.0) and .gpu/space-traffic-KIND.yaml (benchmark.requests_file,
#                   requests STUDY_REQUESTS (16), holdout STUDY_HOLDOUT (16), the chat endpoint), runs it as study
#                   STUDY_NAME-traffic-KIND, and writes traffic.json (the study attrs traffic_holdout,
#                   traffic_acceptance, greedy_lossless), the log and the study's database beside report.json
#   REVERIFY_REPEATS (3)  REVERIFY_WALL_S (480)
#   CALL_BUDGET_S   seconds this whole run.sh may take (e.g. 570 under a 600 s command limit): the build, sweep and
#                   study limits above shrink to what is left when their stage starts
#   GPU_DRY_RUN=1   tiny CPU models and a small plan, for trying the whole harness on a machine without a GPU
#                   (with LLAMA_SERVER=a CPU llama-server; every setting above still wins when given)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"

PACK="${GPU_PACK:-$REPO_ROOT/.gpu}"
WORK="${GPU_WORK:-$REPO_ROOT/.gpu}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
STATE="$WORK/state"
OUT="${OUT:-$REPO_ROOT/studies/gpu-out}"
mkdir -p "$OUT" "$STATE"
OUT="$(cd "$OUT" && pwd)"
SITE="${GPU_SITE:-/tmp/site}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$SITE:$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

if [[ "${GPU_DRY_RUN:-0}" == "1" ]]; then
    : "${GPU_BUILD_CUDA:=0}" "${MODEL_WIDTH:=256}" "${MODEL_LAYERS:=4}" "${MODEL_DRAFT_LAYERS:=1}" "${MODEL_HEADS:=4}"
    : "${MODEL_KV_HEADS:=2}" "${MODEL_FFN:=512}" "${MODEL_EPS:=0.03}" "${MODEL_DTYPE:=f32}" "${MAX_TOKENS:=32}"
    : "${SERVER_EXTRA_ARGS:=-t 1}" "${STARTUP_TIMEOUT_S:=60}" "${SWEEP_REPEATS:=2}" "${SWEEP_GRAPHS:=on}"
    : "${SWEEP_GOOD_N:=2,8}" "${SWEEP_BAD_N:=4}" "${SWEEP_BUDGET_S:=240}" "${STUDY_TRIALS:=4}"
    : "${STUDY_GRAPHS:=on}" "${STUDY_WALL_S:=400}" "${STUDY_NAME:=llamacpp-gpu-dry}"
fi

GPU_BUILD_CUDA="${GPU_BUILD_CUDA:-1}"
BUILD_DIR="$WORK/build"
BUILT_BIN="$BUILD_DIR/cmake/bin/llama-server"
SERVER="${LLAMA_SERVER:-$BUILT_BIN}"
MODELS="$WORK/models"
SPACE="$WORK/space.yaml"
STUDIES="$WORK/studies"
STUDY_NAME="${STUDY_NAME:-llamacpp-gpu}"

MODEL_WIDTH="${MODEL_WIDTH:-4096}"
MODEL_LAYERS="${MODEL_LAYERS:-32}"
MODEL_DRAFT_LAYERS="${MODEL_DRAFT_LAYERS:-2}"
MODEL_HEADS="${MODEL_HEADS:-32}"
MODEL_KV_HEADS="${MODEL_KV_HEADS:-8}"
MODEL_FFN="${MODEL_FFN:-14336}"
MODEL_EPS="${MODEL_EPS:-0.03}"
MODEL_BAD_NOISE="${MODEL_BAD_NOISE:-0.8}"
MODEL_LOGIT_SCALE="${MODEL_LOGIT_SCALE:-6}"
MODEL_DTYPE="${MODEL_DTYPE:-f16}"
MAX_TOKENS="${MAX_TOKENS:-256}"
SERVER_EXTRA_ARGS="${SERVER_EXTRA_ARGS:-}"
STARTUP_TIMEOUT_S="${STARTUP_TIMEOUT_S:-300}"
PORT="${PORT:-30080}"
SWEEP_REPEATS="${SWEEP_REPEATS:-2}"
SWEEP_GRAPHS="${SWEEP_GRAPHS:-on,off}"
SWEEP_GOOD_N="${SWEEP_GOOD_N:-1,2,3,4,5,6,7,8,10,12,16}"
SWEEP_BAD_N="${SWEEP_BAD_N-2,4,8}"  # empty: no bad drafter
SWEEP_BUDGET_S="${SWEEP_BUDGET_S:-450}"
STUDY_TRIALS="${STUDY_TRIALS:-16}"
STUDY_GRAPHS="${STUDY_GRAPHS:-off,on}"
STUDY_WALL_S="${STUDY_WALL_S:-480}"
BUILD_WALL_S="${BUILD_WALL_S:-540}"
BUILD_JOBS="${BUILD_JOBS:-$(nproc)}"

# this run's whole output also goes to $OUT/run.log
exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!

RUN_T0=$SECONDS
log() { printf '[gpu %s +%ds] %s\n' "$(date +%H:%M:%S)" "$((SECONDS - RUN_T0))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
# CALL_BUDGET_S: the seconds this whole run.sh may take; a stage's own limit shrinks to what is left, less MARGIN
within_call() {  # within_call LIMIT MARGIN -> min(LIMIT, CALL_BUDGET_S - elapsed - MARGIN), at least 1
    local limit="$1" margin="$2"
    if [[ -n "${CALL_BUDGET_S:-}" ]]; then
        local left=$((CALL_BUDGET_S - (SECONDS - RUN_T0) - margin))
        ((left < limit)) && limit=$left
    fi
    ((limit < 1)) && limit=1
    printf '%s\n' "$limit"
}

# record one stage's facts into $STATE/harness.json: record STAGE STATUS SECONDS [KEY=VALUE ...] (VALUE may be JSON)
record() {
    "$PY" - "$STATE/harness.json" "$@" <<'EOF'
import fcntl, json, os, sys, time
path, stage, status, seconds, *kv = sys.argv[1:]
lock = open(path + ".lock", "a+")
fcntl.flock(lock, fcntl.LOCK_EX)  # build and models record side by side
try:
    doc = json.load(open(path))
except (OSError, ValueError):
    doc = {"stages": {}, "history": []}
entry = {"status": status, "seconds": float(seconds), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
for item in kv:
    k, _, v = item.partition("=")
    try:
        entry[k] = json.loads(v)
    except ValueError:
        entry[k] = v
doc["stages"][stage] = {**doc["stages"].get(stage, {}), **entry}
doc["history"].append({"stage": stage, **entry})
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
os.replace(tmp, path)
EOF
}

machine_info() {
    {
        echo "# machine facts, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        if command -v nvidia-smi >/dev/null 2>&1; then
            echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -4 | paste -sd';')"
            echo "cuda (driver): $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1 | cut -d' ' -f3)"
        else
            echo "gpu: none (no nvidia-smi)"
        fi
        if command -v nvcc >/dev/null 2>&1; then
            echo "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' | head -1)"
        else
            echo "nvcc: none"
        fi
        echo "cmake: $(cmake --version 2>/dev/null | head -1)"
        echo "ninja: $(ninja --version 2>/dev/null || echo none)"
        echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
        echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //') x $(nproc)"
        echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) (MemTotal; may grow on use)"
        echo "disk: $(df -h "$WORK" | awk 'NR==2 {print $4 " free of " $2}')"
        echo "kernel: $(uname -sr)"
        if command -v nvidia-smi >/dev/null 2>&1; then
            echo
            nvidia-smi 2>&1 | head -20
        fi
    } >"$STATE/machine.txt" 2>&1 || true
}

collect() {
    local rc=$?
    cp -f "$STATE/machine.txt" "$OUT/machine.txt" 2>/dev/null || true
    cp -f "$STATE/harness.json" "$OUT/harness.json" 2>/dev/null || true
    log "exit $rc after $((SECONDS - RUN_T0)) s; results in $OUT"
    # the device returns at most 8 files: pack the rest
    local n
    n="$(find "$OUT" -type f | wc -l)"
    if ((n > 8)); then
        (cd "$OUT" && find . -type f ! -name run.log ! -name harness.json ! -name machine.txt ! -name results.tar.gz \
            -print0 | tar --null -czf results.tar.gz.tmp -T - --remove-files && mv results.tar.gz.tmp results.tar.gz) || true
        log "$n files in $OUT: packed all but run.log, harness.json, machine.txt into results.tar.gz"
    fi
    exec >&- 2>&-
    wait "$TEE_PID" 2>/dev/null || true
    exit "$rc"
}
trap collect EXIT

# -------------------------------------------------------------------------------------------------- stages

stage_setup() {
    local t=$SECONDS
    local wheels=("$PACK"/wheels/*.whl)
    [[ -e "${wheels[0]}" ]] || die "no wheels in $PACK/wheels: run scripts/gpu/pack.sh where pip works, and carry .gpu/wheels"
    log "setup: installing ${#wheels[@]} wheels into $SITE"
    if "$PY" -m pip --version >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "${wheels[@]}" 2>&1 | grep -v -e "^WARNING: Target directory" -e "already exists. Specify --upgrade" || true
    else  # no pip: a wheel is a zip of its files as installed (these have no scripts or data to place)
        log "setup: $PY has no pip; unpacking the wheels with zipfile"
        "$PY" -c 'import sys, zipfile
for w in sys.argv[2:]:
    zipfile.ZipFile(w).extractall(sys.argv[1])' "$SITE" "${wheels[@]}"
    fi
    local versions
    versions="$("$PY" -c '
import importlib.metadata as m, json
names = ["optuna", "sqlalchemy", "alembic", "mako", "colorlog", "gguf", "numpy", "scipy", "httpx", "psutil", "pyyaml", "rich"]
out = {}
for n in names:
    try:
        out[n] = m.version(n)
    except m.PackageNotFoundError:
        out[n] = None
import optuna, sqlalchemy, gguf, autotune.cli, autotune.study, autotune.report, autotune.export, autotune.html  # noqa
print(json.dumps(out))')" || die "the packed wheels do not import (see above)"
    "$PY" -m autotune --help >/dev/null || die "python3 -m autotune --help failed"
    touch "$SITE/.autotune-gpu-setup"
    log "setup: ok in $((SECONDS - t)) s: $versions"
    record setup ok "$((SECONDS - t))" "versions=$versions" "site=$SITE"
}

ensure_setup() {
    [[ "${GPU_SKIP_SETUP:-0}" == "1" ]] && return 0  # the Python already has every package (a dev venv)
    if [[ ! -f "$SITE/.autotune-gpu-setup" ]]; then
        stage_setup
    fi
}

# the real nvcc (not a wrapper script): its folder's parent is the toolkit root CMake needs
find_nvcc() {
    local c
    for c in "${CUDACXX:-}" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}" /usr/local/cuda/bin/nvcc \
        /usr/local/cuda-*/bin/nvcc "$(command -v nvcc 2>/dev/null || true)"; do
        [[ -n "$c" && -x "$c" ]] || continue
        c="$(readlink -f "$c")"
        if [[ "$(head -c 4 "$c" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
            printf '%s\n' "$c"
            return 0
        fi
    done
    # a wrapper script: `exec /path/to/nvcc "$@"`
    c="$(command -v nvcc 2>/dev/null || true)"
    if [[ -n "$c" ]]; then
        c="$(grep -o '/[^ "]*/bin/nvcc' "$c" | head -1 || true)"
        [[ -n "$c" && -x "$c" ]] && { readlink -f "$c"; return 0; }
    fi
    return 1
}

# cuBLAS: the toolkit's, else CUBLAS_ROOT, else an nvidia-cublas wheel (nvidia/cu13 or nvidia/cublas) in python3's
# site-packages. Prints "include_dir lib_dir" of a folder with the headers and the unversioned libraries.
find_cublas() {
    local root="$1" cands=() c
    if [[ -n "${CUBLAS_ROOT:-}" ]]; then
        cands+=("$CUBLAS_ROOT")
    fi
    for c in "$root" "$root/targets/x86_64-linux"; do
        if [[ -f "$c/include/cublas_v2.h" ]] && compgen -G "$c/lib*/libcublas.so*" >/dev/null; then
            [[ -z "${CUBLAS_ROOT:-}" ]] && { echo "toolkit"; return 0; }
        fi
    done
    local found
    found="$("$PY" -c '
import site, sys
seen = set()
for d in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
    for sub in ("nvidia/cu13", "nvidia/cu12", "nvidia/cublas"):
        p = f"{d}/{sub}"
        if p not in seen:
            seen.add(p)
            print(p)' 2>/dev/null || true)"
    while IFS= read -r c; do [[ -n "$c" ]] && cands+=("$c"); done <<<"$found"
    for c in "${cands[@]}"; do
        if [[ -f "$c/include/cublas_v2.h" ]] && compgen -G "$c/lib/libcublas.so*" >/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

stage_build() {
    local t=$SECONDS
    if [[ -n "${LLAMA_SERVER:-}" ]]; then
        [[ -x "$LLAMA_SERVER" ]] || die "LLAMA_SERVER=$LLAMA_SERVER is not an executable"
        log "build: LLAMA_SERVER=$LLAMA_SERVER given; nothing to build"
        record build given 0 "binary=$LLAMA_SERVER"
        return 0
    fi
    local tarball="$PACK/llama.cpp-src.tar.xz"
    [[ -f "$tarball" ]] || die "no $tarball: run scripts/gpu/pack.sh where pip works, and carry .gpu/llama.cpp-src.tar.xz"
    local sha stamp
    sha="$(sha256sum "$tarball" | cut -c1-16)"
    stamp="$BUILD_DIR/.built-$sha-cuda$GPU_BUILD_CUDA"
    if [[ -x "$BUILT_BIN" && -f "$stamp" ]]; then
        log "build: $BUILT_BIN already built from this tarball; skipping"
        return 0
    fi
    mkdir -p "$BUILD_DIR"
    local src="$BUILD_DIR/src/llama.cpp"
    if [[ ! -f "$BUILD_DIR/src/.sha-$sha" ]]; then
        rm -rf -- "$BUILD_DIR/src"
        mkdir -p "$BUILD_DIR/src"
        if command -v xz >/dev/null 2>&1; then
            tar xJf "$tarball" -C "$BUILD_DIR/src"
        else  # tar -J needs the xz program; Python's lzma does the same
            "$PY" -c 'import sys, tarfile
kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$tarball" "$BUILD_DIR/src"
        fi
        touch "$BUILD_DIR/src/.sha-$sha"
    fi
    local flags=(
        -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
        -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
    )
    local arch="" nvcc="" cublas="" driver="" ldpath=""
    if [[ "$GPU_BUILD_CUDA" == "1" ]]; then
        arch="${CUDA_ARCH:-}"
        if [[ -z "$arch" ]]; then
            arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')" ||
                true
        fi
        [[ "$arch" =~ ^[0-9]+[a-z]?$ ]] || die "cannot read the GPU's compute capability (nvidia-smi); set CUDA_ARCH, e.g. 90"
        nvcc="$(find_nvcc)" || die "no nvcc found (set CUDACXX or CUDA_HOME)"
        local root
        root="$(dirname "$(dirname "$nvcc")")"
        flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" "-DCMAKE_CUDA_COMPILER=$nvcc"
            "-DCUDAToolkit_ROOT=$root" -DGGML_CUDA_GRAPHS=ON -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA_QUANTS=f16-f16)
        cublas="$(find_cublas "$root")" || die "no cuBLAS: neither $root nor an nvidia-cublas wheel in $PY's site-packages has include/cublas_v2.h and lib/libcublas.so*; set CUBLAS_ROOT"
        local shim="$BUILD_DIR/cuda-shim"
        if [[ "$cublas" != "toolkit" ]]; then
            # the wheel has only versioned libraries (libcublas.so.13) and its include/ holds other CUDA headers
            # too: link the cuBLAS headers and libraries into a folder of their own
            rm -rf -- "$shim"
            mkdir -p "$shim/include" "$shim/lib"
            local f
            for f in "$cublas"/include/cublas*.h; do ln -sf "$f" "$shim/include/"; done
            for f in "$cublas"/lib/libcublas.so* "$cublas"/lib/libcublasLt.so*; do
                [[ -e "$f" ]] || continue
                ln -sf "$f" "$shim/lib/"
                local base="${f##*/}"
                ln -sf "$f" "$shim/lib/${base%%.so*}.so"
            done
            flags+=("-DCUDA_cublas_LIBRARY=$shim/lib/libcublas.so" "-DCUDA_cublasLt_LIBRARY=$shim/lib/libcublasLt.so"
                "-DCMAKE_CUDA_FLAGS=-I$shim/include" "-DCMAKE_CXX_FLAGS=-I$shim/include"
                "-DCMAKE_C_FLAGS=-I$shim/include")
            ldpath="$(readlink -f "$cublas/lib")"
        fi
        # the driver library (libcuda.so) for CUDA's virtual memory pool: the toolkit's stub, else the driver's own
        driver="$(find "$root/lib64/stubs" "$root/targets/x86_64-linux/lib/stubs" -name 'libcuda.so' 2>/dev/null | head -1 || true)"
        if [[ -z "$driver" ]]; then
            local d dirs=()
            IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
            driver="$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libcuda\.so\(\.1\)\?$'
                for d in "${dirs[@]}" /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
                    [[ -n "$d" ]] && ls "$d"/libcuda.so.1 "$d"/libcuda.so 2>/dev/null
                done) | head -1 || true)"
            if [[ -n "$driver" ]]; then
                mkdir -p "$shim/lib"
                ln -sf "$driver" "$shim/lib/libcuda.so"
                flags+=("-DCUDA_cuda_driver_LIBRARY=$shim/lib/libcuda.so")
            else
                log "build: no libcuda.so to link: building with GGML_CUDA_NO_VMM=ON (legacy memory pool)"
                flags+=(-DGGML_CUDA_NO_VMM=ON)
            fi
        fi
        log "build: CUDA arch $arch, nvcc $nvcc ($("$nvcc" --version | grep -o 'V[0-9][0-9.]*' | head -1)), cuBLAS: $cublas, driver lib: ${driver:-none}"
    fi
    if [[ -n "${EXTRA_CMAKE_ARGS:-}" ]]; then
        local extra=()
        read -r -a extra <<<"$EXTRA_CMAKE_ARGS"
        flags+=("${extra[@]}")  # last: a -D given here wins
    fi
    printf '%s\n' "$ldpath" >"$STATE/ld_library_path"
    log "build: configuring ($GPU_BUILD_CUDA = CUDA) in $BUILD_DIR/cmake"
    local tc=$SECONDS
    # GIT_CEILING_DIRECTORIES: the source has no .git; without a ceiling git would report the autotune repo's commit
    if ! GIT_CEILING_DIRECTORIES="$BUILD_DIR" cmake -S "$src" -B "$BUILD_DIR/cmake" "${flags[@]}" \
        >"$STATE/build-configure.log" 2>&1; then
        tail -40 "$STATE/build-configure.log"
        cp -f "$STATE/build-configure.log" "$OUT/build.log"
        record build configure-failed "$((SECONDS - t))"
        die "cmake configure failed (log: $OUT/build.log)"
    fi
    local configure_s=$((SECONDS - tc))
    local wall
    wall="$(within_call "$BUILD_WALL_S" 30)"
    log "build: configured in $configure_s s; compiling llama-server with $BUILD_JOBS jobs (limit $wall s)"
    local tb=$SECONDS rc=0
    timeout --signal=TERM --kill-after=20 "$wall" \
        cmake --build "$BUILD_DIR/cmake" --target llama-server -j"$BUILD_JOBS" >"$STATE/build-compile.log" 2>&1 || rc=$?
    local compile_s=$((SECONDS - tb))
    { cat "$STATE/build-configure.log"; echo "# ---- compile (exit $rc, $compile_s s)"; cat "$STATE/build-compile.log"; } >"$OUT/build.log"
    local flags_json
    flags_json="$("$PY" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${flags[@]}")"
    if ((rc == 124 || rc == 137)); then
        record build timeout "$((SECONDS - t))" "configure_s=$configure_s" "compile_s=$compile_s" "cmake_flags=$flags_json"
        log "build: not finished within $wall s; run the build stage again to resume"
        return 3
    elif ((rc != 0)); then
        grep -E "error|Error|FAILED" "$STATE/build-compile.log" | head -30 || true
        tail -20 "$STATE/build-compile.log"
        record build failed "$((SECONDS - t))" "compile_s=$compile_s" "cmake_flags=$flags_json"
        die "build failed (log: $OUT/build.log)"
    fi
    touch "$stamp"
    local version
    version="$(LD_LIBRARY_PATH="$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BUILT_BIN" --version 2>&1 | tail -5 | paste -sd'|')" || true
    log "build: llama-server built in $((SECONDS - t)) s (configure $configure_s s, compile $compile_s s): $version"
    record build ok "$((SECONDS - t))" "configure_s=$configure_s" "compile_s=$compile_s" "jobs=$BUILD_JOBS" \
        "cuda=$GPU_BUILD_CUDA" "cuda_arch=$arch" "nvcc=$nvcc" "cublas=$cublas" "binary=$BUILT_BIN" \
        "cmake_flags=$flags_json" "version=$version"
}

model_args() {
    printf '%s\n' "$MODELS" --width "$MODEL_WIDTH" --layers "$MODEL_LAYERS" --draft-layers "$MODEL_DRAFT_LAYERS" \
        --heads "$MODEL_HEADS" --kv-heads "$MODEL_KV_HEADS" --ffn "$MODEL_FFN" --eps "$MODEL_EPS" \
        --bad-noise "$MODEL_BAD_NOISE" --logit-scale "$MODEL_LOGIT_SCALE" --dtype "$MODEL_DTYPE"
}

stage_models() {
    local t=$SECONDS
    ensure_setup
    local args=()
    mapfile -t args < <(model_args)
    log "models: $PY $REPO_ROOT/scripts/llamacpp_models.py ${args[*]}"
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$REPO_ROOT/scripts/llamacpp_models.py" "${args[@]}" || { record models failed "$((SECONDS - t))"; die "writing the models failed"; }
    local sizes
    sizes="$("$PY" -c '
import json, os, sys
d = sys.argv[1]
print(json.dumps({n: os.path.getsize(os.path.join(d, n)) for n in ("target.gguf", "draft-good.gguf", "draft-bad.gguf")}))' "$MODELS")"
    log "models: ready in $((SECONDS - t)) s: $sizes"
    record models ok "$((SECONDS - t))" "dir=$MODELS" "bytes=$sizes" "spec=$(cat "$MODELS/models.json")" \
        "command=$PY $REPO_ROOT/scripts/llamacpp_models.py ${args[*]}"
}

server_env() {
    local ldpath=""
    [[ -f "$STATE/ld_library_path" ]] && ldpath="$(cat "$STATE/ld_library_path")"
    if [[ -n "$ldpath" ]]; then
        export LD_LIBRARY_PATH="$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
}

write_space() {  # [METHODS [MORE gpu_space.py ARGS]]: a search.methods space (the study stage with STUDY_METHODS)
    [[ -x "$SERVER" ]] || die "no llama-server at $SERVER: run the build stage first (or set LLAMA_SERVER)"
    [[ -f "$MODELS/target.gguf" && -f "$MODELS/models.json" ]] || die "no models in $MODELS: run the models stage first"
    "$PY" scripts/gpu/gpu_space.py "$SPACE" --name "$STUDY_NAME" --server "$SERVER" --models "$MODELS" \
        --max-tokens "$MAX_TOKENS" --n-trials "$STUDY_TRIALS" "--cuda-graph=$STUDY_GRAPHS" \
        --startup-timeout-s "$STARTUP_TIMEOUT_S" --port "$PORT" "--extra-args=$SERVER_EXTRA_ARGS" \
        "--comment=models: $(tr -d '\n' <"$MODELS/models.json")" "--concurrency=${STUDY_CONCURRENCY:-}" \
        "--methods=${1:-}" "${@:2}"
}

stage_sweep() {
    local t=$SECONDS
    ensure_setup
    server_env
    write_space
    local budget
    budget="$(within_call "$SWEEP_BUDGET_S" 25)"
    local args=("$SPACE" --out "$OUT" --state "$STATE/sweep.json" --log-dir "$STATE/sweep-logs"
        --repeats "$SWEEP_REPEATS" --graphs "$SWEEP_GRAPHS" --good-n "$SWEEP_GOOD_N" --bad-n "$SWEEP_BAD_N"
        --budget-s "$budget")
    [[ "${SWEEP_FRESH:-0}" == "1" ]] && args+=(--fresh)
    log "sweep: $PY scripts/gpu/sweep.py ${args[*]}"
    local rc=0
    "$PY" scripts/gpu/sweep.py "${args[@]}" || rc=$?
    local status=ok
    ((rc == 3)) && status=partial
    ((rc == 130)) && status=interrupted
    ((rc != 0 && rc != 3 && rc != 130)) && status=failed
    record sweep "$status" "$((SECONDS - t))" "command=$PY scripts/gpu/sweep.py ${args[*]}"
    log "sweep: $status in $((SECONDS - t)) s"
    ((rc == 0 || rc == 3)) || die "sweep exited with $rc"
}

stage_study() {
    local t=$SECONDS
    ensure_setup
    server_env
    local traffic=()
    if [[ -n "${STUDY_METHODS:-}" ]]; then
        SPACE="$WORK/space-methods.yaml"
        STUDY_NAME="$STUDY_NAME-methods"
    elif [[ -n "${STUDY_TRAFFIC:-}" ]]; then
        [[ "$STUDY_TRAFFIC" == clean || "$STUDY_TRAFFIC" == flatter ]] || die "STUDY_TRAFFIC=$STUDY_TRAFFIC: expected clean or flatter"
        local log="$WORK/traffic-$STUDY_TRAFFIC.jsonl" flat=()
        [[ "$STUDY_TRAFFIC" == flatter ]] && flat=(--flatter "${STUDY_REQUESTS:-16}")
        "$PY" scripts/gpu/traffic_log.py "$log" --n "${TRAFFIC_LOG_N:-120}" "${flat[@]}" || die "writing the request log failed"
        SPACE="$WORK/space-traffic-$STUDY_TRAFFIC.yaml"
        STUDY_NAME="$STUDY_NAME-traffic-$STUDY_TRAFFIC"
        traffic=(--requests-file "$log" --requests "${STUDY_REQUESTS:-16}" --holdout "${STUDY_HOLDOUT:-16}")
        cp -f "$log" "$OUT/"
    fi
    write_space "${STUDY_METHODS:-}" "${traffic[@]}"
    cp -f "$SPACE" "$OUT/space.yaml"
    local common=("$SPACE" --studies-dir "$STUDIES")
    local cmd=("$PY" -m autotune study "${common[@]}" --json)
    local wall
    wall="$(within_call "$STUDY_WALL_S" 75)"  # room for stopping its server, report and export
    log "study: ${cmd[*]} (cut at $wall s)"
    local rc=0
    timeout --signal=TERM --kill-after=45 "$wall" "${cmd[@]}" >"$OUT/study.json" 2>"$OUT/study.log" || rc=$?
    tail -n 40 "$OUT/study.log"
    local study_s=$((SECONDS - t))
    local status=ok
    if ((rc == 124 || rc == 130)); then
        status=interrupted
        log "study: cut at $wall s (exit $rc): the server was stopped; run the study stage again to resume"
    elif ((rc != 0)); then
        status=failed
        log "study: exit $rc"
    fi
    # the newest server logs' tails, for a failed start
    local logs
    logs="$(ls -t "$STUDIES/$STUDY_NAME/logs"/*.log 2>/dev/null | head -2 || true)"
    if [[ -n "$logs" ]]; then
        {
            echo
            for f in $logs; do echo "# ---- tail of $f"; tail -25 "$f"; done
        } >>"$OUT/study.log"
    fi
    "$PY" -m autotune report "${common[@]}" --json >"$OUT/report.json" 2>>"$OUT/study.log" ||
        log "study: report failed (see study.log)"
    "$PY" -m autotune export "${common[@]}" --format command >"$OUT/export.txt" 2>>"$OUT/study.log" ||
        log "study: export failed (see study.log)"
    if [[ -n "${STUDY_TRAFFIC:-}" ]]; then
        "$PY" scripts/gpu/traffic_attrs.py "$SPACE" "$STUDIES" >"$OUT/traffic.json" 2>>"$OUT/study.log" ||
            log "study: reading the traffic attrs failed (see study.log)"
        cp -f "$STUDIES/$STUDY_NAME.db" "$OUT/" 2>/dev/null || true
    fi
    local verdict
    verdict="$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("verdict"))' "$OUT/report.json" 2>/dev/null || echo "?")"
    record study "$status" "$((SECONDS - t))" "study_s=$study_s" "exit=$rc" "verdict=$verdict" \
        "command=${cmd[*]}" "report_command=$PY -m autotune report ${common[*]} --json" \
        "export_command=$PY -m autotune export ${common[*]} --format command"
    log "study: $status in $((SECONDS - t)) s; verdict: $verdict; export: $(head -c 600 "$OUT/export.txt" 2>/dev/null)"
    ((rc == 0 || rc == 124 || rc == 130)) || die "study exited with $rc"
}

stage_reverify() {
    local t=$SECONDS
    ensure_setup
    server_env
    [[ -f "$SPACE" ]] || die "no $SPACE: run the study stage first"
    local exported="$WORK/exported-$STUDY_NAME.yaml" space="$WORK/space-$STUDY_NAME.yaml"
    # written once: a resumed reverify must measure the same export (its journal is named by it), with the space
    # its study ran with (the next study stage rewrites $SPACE)
    if [[ ! -f "$exported" ]]; then
        "$PY" -m autotune export "$SPACE" --studies-dir "$STUDIES" --format yaml -o "$exported" 2>>"$OUT/reverify.log" ||
            die "reverify: export failed (see reverify.log)"
        cp -f "$SPACE" "$space"
    fi
    local cmd=("$PY" -m autotune reverify "$exported" --space "$space" --repeats "${REVERIFY_REPEATS:-3}"
        --studies-dir "$STUDIES" --json)
    local wall
    wall="$(within_call "${REVERIFY_WALL_S:-480}" 45)"
    log "reverify: ${cmd[*]} (cut at $wall s)"
    local rc=0
    timeout --signal=INT --kill-after=45 "$wall" "${cmd[@]}" >"$OUT/reverify.json" 2>>"$OUT/reverify.log" || rc=$?
    tail -n 20 "$OUT/reverify.log"
    local status=ok
    ((rc == 124 || rc == 130)) && status=interrupted
    ((rc != 0 && rc != 124 && rc != 130)) && status="exit-$rc"
    record reverify "$status" "$((SECONDS - t))" "exit=$rc" "command=${cmd[*]}"
    log "reverify: $status in $((SECONDS - t)) s"
}

# ------------------------------------------------------------------------------------------------- dispatch

(($# > 0)) || { awk 'NR > 1 && /^set -euo/ {exit} NR > 1' "${BASH_SOURCE[0]}"; exit 2; }
stages=()
for s in "$@"; do
    case "$s" in
        all) stages+=(setup build models sweep study) ;;
        setup | build | models | sweep | study | reverify) stages+=("$s") ;;
        -h | --help) awk 'NR > 1 && /^set -euo/ {exit} NR > 1' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "run.sh: unknown stage $s (setup build models sweep study reverify all)" >&2; exit 2 ;;
    esac
done
machine_info
log "stages: ${stages[*]}; OUT=$OUT; work in $WORK; $(grep '^gpu:' "$STATE/machine.txt" || true)"
# a server left by a sweep that was killed outright (its own session outlives the command): stop it by its record
if [[ -f "$STATE/sweep.pids.json" && (-f "$SITE/.autotune-gpu-setup" || "${GPU_SKIP_SETUP:-0}" == "1") ]]; then
    "$PY" -c 'import sys; from autotune.process import reap_leftovers; s = reap_leftovers(sys.argv[1]); s and print("stopped leftover servers", s)' \
        "$STATE/sweep.pids.json" || true
fi

has() { local x; for x in "${stages[@]}"; do [[ "$x" == "$1" ]] && return 0; done; return 1; }
parallel_done=0
for s in "${stages[@]}"; do
    case "$s" in
        build | models)
            if has build && has models; then
                ((parallel_done)) && continue
                parallel_done=1
                ensure_setup
                log "build and models side by side"
                rc_b=0 rc_m=0
                stage_build &
                pid_b=$!
                stage_models &
                pid_m=$!
                wait "$pid_b" || rc_b=$?
                wait "$pid_m" || rc_m=$?
                log "build exit $rc_b, models exit $rc_m"
                ((rc_b == 0 && rc_m == 0)) || exit $((rc_b ? rc_b : rc_m))
            else
                "stage_$s"
            fi
            ;;
        *) "stage_$s" ;;
    esac
done
log "all stages done: ${stages[*]}"

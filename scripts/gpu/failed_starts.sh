#!/usr/bin/env bash
# What a failed start bills on real hardware: the harness's study with a drafter the server cannot load, its
# `failed_starts` set against the wall clock of the same launch timed from outside autotune.
#
#   scripts/gpu/failed_starts.sh      (after `scripts/gpu/run.sh setup build models`, on the same machine)
#
# 1. draft-bad.gguf is cut to its first FAIL_KEEP_MB MiB (default 64): its header still reads, its tensor data
#    lies outside the file, so llama-server loads the target and then fails on the draft (exit status != 0).
# 2. FAIL_DIRECT (default 3) launches of that server, each timed here from spawn to exit (`date +%s.%N`), the
#    argv the harness space gives a `bad` trial (target, draft, -ngl/-ngld 99, the port).
# 3. `run.sh study` with the same space: every start of the `bad` drafter fails; the report's gpu_time and each
#    trial's `failed_starts` say what autotune billed for them.
# Writes $OUT/failed-starts.json and failed-direct.log (the direct timings, the billed failed starts per trial, the report's gpu_time).
# Settings: FAIL_KEEP_MB, FAIL_DIRECT, and every run.sh setting (STUDY_TRIALS, STUDY_WALL_S, CALL_BUDGET_S, ...).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"
WORK="${GPU_WORK:-$REPO_ROOT/.gpu}"
OUT="${OUT:-$REPO_ROOT/studies/gpu-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH="${GPU_SITE:-/tmp/site}:$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
SERVER="${LLAMA_SERVER:-$WORK/build/cmake/bin/llama-server}"
MODELS="$WORK/models"
KEEP_MB="${FAIL_KEEP_MB:-64}"
N="${FAIL_DIRECT:-3}"
PORT_DIRECT="${FAIL_PORT:-30190}"
T0=$SECONDS

[[ -x "$SERVER" ]] || { echo "failed_starts: no llama-server at $SERVER (run: run.sh build)" >&2; exit 2; }
[[ -f "$MODELS/draft-bad.gguf" && -f "$MODELS/target.gguf" ]] ||
    { echo "failed_starts: no models in $MODELS (run: run.sh models)" >&2; exit 2; }

size=$(stat -c %s "$MODELS/draft-bad.gguf")
if ((size > KEEP_MB * 1048576)); then
    truncate -s "${KEEP_MB}M" "$MODELS/draft-bad.gguf"
fi
echo "[failed_starts] draft-bad.gguf: $size -> $(stat -c %s "$MODELS/draft-bad.gguf") bytes"

direct="$WORK/failed-direct.txt"
: >"$direct"
for i in $(seq 1 "$N"); do
    t1=$(date +%s.%N)
    rc=0
    timeout 300 "$SERVER" -m "$MODELS/target.gguf" -md "$MODELS/draft-bad.gguf" -ngl 99 -ngld 99 \
        --host 127.0.0.1 --port "$PORT_DIRECT" >"$WORK/failed-direct-$i.log" 2>&1 || rc=$?
    t2=$(date +%s.%N)
    echo "$i $t1 $t2 $rc" >>"$direct"
    echo "[failed_starts] direct launch $i: $("$PY" -c "print(round($t2-$t1, 2))") s, exit $rc; last line: $(tail -n 1 "$WORK/failed-direct-$i.log")"
done

tail -n 30 "$WORK/failed-direct-1.log" >"$OUT/failed-direct.log" || true
cp -f "$direct" "$OUT/failed-direct.txt"

CALL_BUDGET_S="${CALL_BUDGET_S:+$((CALL_BUDGET_S - (SECONDS - T0)))}" bash scripts/gpu/run.sh study || true

"$PY" - "$direct" "$WORK/studies" "${STUDY_NAME:-llamacpp-gpu}" "$OUT/report.json" "$OUT/failed-starts.json" <<'EOF'
import json, statistics, sys
from pathlib import Path
direct_path, studies, name, report_path, out = sys.argv[1:]
direct = []
for line in Path(direct_path).read_text().split("\n"):
    if line.strip():
        i, t1, t2, rc = line.split()
        direct.append({"launch": int(i), "seconds": round(float(t2) - float(t1), 3), "exit": int(rc)})
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
db = next(Path(studies).glob(f"{name}*.db"), None) or next(Path(studies).rglob("*.db"))
trials = []
for study in optuna.get_all_study_summaries(f"sqlite:///{db}"):
    for t in optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{db}").get_trials(deepcopy=False):
        fs = t.user_attrs.get("failed_starts")
        if fs:
            trials.append({"trial": t.number, "params": t.params, "state": t.state.name, "failed_starts": fs})
try:
    gpu_time = json.load(open(report_path)).get("gpu_time")
except (OSError, ValueError):
    gpu_time = None
billed = [s.get("seconds") for t in trials for s in t["failed_starts"] if isinstance(s, dict)]
doc = {
    "direct": direct,
    "direct_median_s": statistics.median(d["seconds"] for d in direct) if direct else None,
    "trials_with_failed_starts": trials,
    "billed_failed_start_s": billed,
    "billed_median_s": statistics.median(billed) if billed else None,
    "report_gpu_time": gpu_time,
}
json.dump(doc, open(out, "w"), indent=1)
print(f"[failed_starts] direct: median {doc['direct_median_s']} s of {len(direct)}; billed: {len(billed)} failed "
      f"start(s), median {doc['billed_median_s']} s; report failed_s={gpu_time and gpu_time.get('failed_s')}, "
      f"failed_starts={gpu_time and gpu_time.get('failed_starts')}")
EOF

#!/usr/bin/env bash
# One device-tool call for the CUDA backend, everything under one deadline (BUDGET seconds, default
# 560). Builds lmtail_cuda_check first (cmake, no Python) and runs every weight type's checks and
# compute-sanitizer memcheck / racecheck / synccheck on it while the Python module (pip,
# LMTAIL_CUDA=ON) and, with WITH_GGML=1, ggml (sources in .anchor/ggml or LMTAIL_GGML_SRC) build in
# the background; then the CUDA Python tests; then, with nothing building, the timings: the
# per-type table with cuBLAS (bench/bench_cuda.py --types), the full lmtail_cuda_check (tail and
# selection device times), the Python Head routes' host wall (bench/bench_cuda_head.py), with
# SWEEP=1 the f32 kernel's geometry sweep (bench/cuda/mv_sweep.sh), and with WITH_GGML=1 ggml vs
# lmtail on the same bytes for every type's matvec (ggml_types) and for the Q5_K tail
# (ggml_anchor). Each step has a timeout (cut to what is left of the deadline) and its own log under
# $LOGS (default /tmp/lmtail-logs); a failing step does not stop the others. $OUT gets summary.txt
# (every step's exit status and seconds), highlights.txt, bench_types.txt, sweep.txt, ggml_types.txt
# (while $OUT stays within 8 files) and all.txt (every log).
# SKIP="name ..." leaves those steps out (e.g. SKIP=bench_types).
# Usage (repo root): bash bench/cuda/run_on_device.sh
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SKB=${SKB:-/tmp/skb}
LOGS=${LOGS:-/tmp/lmtail-logs}
mkdir -p "$LOGS"
END=$(( $(date +%s) + ${BUDGET:-560} ))
step() {  # step NAME TIMEOUT CMD...
    local name=$1 t=$2
    shift 2
    case " ${SKIP:-} " in *" $name "*) echo "$name skipped (SKIP)" | tee -a "$OUT/summary.txt"; return 0 ;; esac
    local left=$(( END - $(date +%s) - 5 ))
    [ "$t" -gt "$left" ] && t=$left
    echo "$name started $(date -u +%T)" >> "$LOGS/timeline.txt"
    if [ "$t" -le 5 ]; then echo "$name skipped (deadline)" | tee -a "$OUT/summary.txt"; return 1; fi
    local t0=$(date +%s)
    timeout "$t" "$@" > "$LOGS/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
    return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv > "$OUT/summary.txt" 2>&1
# 1. Builds: ggml (WITH_GGML=1) and the Python module in the background, lmtail_cuda_check alone in
#    front (cmake, no Python); the checks and sanitizers run on it while the others build, and every
#    timing runs last, when nothing builds.
if [ "${WITH_GGML:-0}" = 1 ]; then
    # ggml_anchor, then ggml_types (lmtail_core and one more executable on the same ggml build).
    (step anchor_build 420 python3 bench/bench_cuda.py --build-dir /tmp/anc --build-only
     step anchor_types_build 200 python3 bench/bench_cuda.py --build-dir /tmp/anc --build-only --ggml-types) &
    anc=$!
fi
(step pip 360 env CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-16} python3 -m pip install -q --no-build-isolation --no-deps \
    -Ccmake.define.LMTAIL_CUDA=ON -Ccmake.define.LMTAIL_EMU=OFF -Cbuild-dir="$SKB" .) &
pipjob=$!
CB=${CB:-/tmp/cb}
step check_build 240 sh -c "cmake -S . -B $CB -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMTAIL_CUDA=ON -DLMTAIL_PYTHON=OFF \
    -DLMTAIL_EMU=OFF && cmake --build $CB --target lmtail_cuda_check -j ${JOBS:-16}"
C="$CB/lmtail_cuda_check"
# 2. Correctness on the device: compute-sanitizer's three tools side by side, every type's checks,
#    then the Python tests.
for tool in memcheck racecheck synccheck; do
    step "sanitize_$tool" 300 compute-sanitizer --tool $tool --error-exitcode 9 "$C" 1024 768 1 types &
done
step types_check 120 "$C" 4097 1536 3 types
wait $pipjob
step pytest 300 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_tensors.py tests/test_capabilities.py \
    tests/test_ops_matrix.py -k "cuda or capabilit or table"
wait  # the sanitizers and ggml's build
# 3. Timings (nothing builds now): the per-type table with cuBLAS, the full check with the tail's
#    device times, ggml vs lmtail per type, the Python routes' host wall, the f32 kernel's geometry
#    sweep, the Q5_K tail against ggml's.
step bench_types 150 python3 bench/bench_cuda.py --types --reps 21 --check-bin "$C"
step cuda_check 120 "$C" 202048 6656 11
[ "${WITH_GGML:-0}" = 1 ] && step ggml_types 200 python3 bench/bench_cuda.py --build-dir /tmp/anc --reps ${GGML_REPS:-21} --ggml-types
step head 120 python3 bench/bench_cuda_head.py
[ "${SWEEP:-0}" = 1 ] && step sweep 240 env SKB="$CB" bash bench/cuda/mv_sweep.sh ${SWEEP_PAIRS:-}
[ "${WITH_GGML:-0}" = 1 ] && step bench_ggml 300 python3 bench/bench_cuda.py --build-dir /tmp/anc --reps ${GGML_REPS:-21}
grep -E "FAIL|MISMATCH|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|ALL CHECKS| NO" "$LOGS"/*.txt > "$OUT/highlights.txt" 2>/dev/null
# At most 8 files come back from $OUT: copy a log only while one place is left for all.txt.
for f in bench_types sweep ggml_types; do
    [ -f "$LOGS/$f.txt" ] && [ "$(ls -1 "$OUT" | wc -l)" -lt 7 ] && cp "$LOGS/$f.txt" "$OUT/"
done
for f in "$LOGS"/*.txt; do echo "#### $f"; cat "$f"; done > "$OUT/all.txt"
echo done

#!/usr/bin/env bash
# One device-tool call for the CUDA backend, everything under one deadline (BUDGET seconds, default
# 560): build lmtail (pip, LMTAIL_CUDA=ON; lmtail_cuda_check comes with it), every weight type's
# checks (lmtail_cuda_check ... types), the per-type bench table (bench/bench_cuda.py --types), the
# CUDA tests, the full lmtail_cuda_check, compute-sanitizer memcheck/racecheck/synccheck, and with
# SWEEP=1 the launch-geometry sweep (bench/cuda/mv_sweep.sh); with WITH_GGML=1 (ggml sources in
# .anchor/ggml or LMTAIL_GGML_SRC) also the same-run ggml anchor for Q5_K. Each step has a timeout
# (cut to what is left of the deadline) and its own log under $OUT; a failing step does not stop
# the others. The logs go to $LOGS (default /tmp/lmtail-logs); $OUT gets summary.txt (every step's
# exit status and seconds), highlights.txt, bench_types.txt, sweep.txt and all.txt (every log).
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
if [ "${WITH_GGML:-0}" = 1 ]; then
    (step anchor_build 420 python3 bench/bench_cuda.py --build-dir /tmp/anc --build-only) &
    anc=$!
fi
step pip 300 env CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-16} python3 -m pip install -q --no-build-isolation --no-deps \
    -Ccmake.define.LMTAIL_CUDA=ON -Ccmake.define.LMTAIL_EMU=OFF -Cbuild-dir="$SKB" .
[ -x "$SKB/lmtail_cuda_check" ] || step check_build 200 cmake --build "$SKB" --target lmtail_cuda_check
step types_check 120 "$SKB/lmtail_cuda_check" 4097 1536 3 types
step bench_types 150 python3 bench/bench_cuda.py --types --reps 21 --check-bin "$SKB/lmtail_cuda_check"
[ "${SWEEP:-0}" = 1 ] && step sweep 240 env SKB="$SKB" bash bench/cuda/mv_sweep.sh ${SWEEP_PAIRS:-}
step pytest 300 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_tensors.py tests/test_capabilities.py \
    tests/test_ops_matrix.py -k "cuda or capabilit or table"
step cuda_check 120 "$SKB/lmtail_cuda_check" 202048 6656 11
for tool in memcheck racecheck synccheck; do
    step "sanitize_$tool" 240 compute-sanitizer --tool $tool --error-exitcode 9 "$SKB/lmtail_cuda_check" 1024 768 1 types
done
if [ "${WITH_GGML:-0}" = 1 ]; then
    wait $anc
    step bench_ggml 300 python3 bench/bench_cuda.py --build-dir /tmp/anc --reps 51
fi
grep -E "FAIL|MISMATCH|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|ALL CHECKS| NO" "$LOGS"/*.txt > "$OUT/highlights.txt" 2>/dev/null
for f in bench_types sweep; do [ -f "$LOGS/$f.txt" ] && cp "$LOGS/$f.txt" "$OUT/"; done
for f in "$LOGS"/*.txt; do echo "#### $f"; cat "$f"; done > "$OUT/all.txt"
echo done

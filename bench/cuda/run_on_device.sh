#!/usr/bin/env bash
# One device-tool call for the CUDA backend: build lmtail (pip, LMTAIL_CUDA=ON; lmtail_cuda_check
# comes with it), run the CUDA tests, lmtail_cuda_check (every kernel and every weight type vs the
# CPU backend), compute-sanitizer memcheck/racecheck/synccheck, and the per-type bench table
# (bench/bench_cuda.py --types). With WITH_GGML=1 (ggml sources in .anchor/ggml or LMTAIL_GGML_SRC)
# also the same-run ggml anchor for Q5_K. Every step has a timeout and its own log under $OUT;
# a failing step does not stop the others. Usage (repo root): bash bench/cuda/run_on_device.sh
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SKB=${SKB:-/tmp/skb}
step() {  # step NAME TIMEOUT CMD...: run, log to $OUT/NAME.txt, record rc in $OUT/summary.txt
    local name=$1 t=$2
    shift 2
    local t0=$(date +%s)
    timeout "$t" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
    return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
if [ "${WITH_GGML:-0}" = 1 ]; then
    (step anchor_build 420 python3 bench/bench_cuda.py --build-dir /tmp/anc --build-only) &
    anc=$!
fi
step pip 420 env CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-16} python3 -m pip install -q --no-build-isolation --no-deps \
    -Ccmake.define.LMTAIL_CUDA=ON -Ccmake.define.LMTAIL_EMU=OFF -Cbuild-dir="$SKB" .
[ -x "$SKB/lmtail_cuda_check" ] || step check_build 300 cmake --build "$SKB" --target lmtail_cuda_check
step types_check 240 "$SKB/lmtail_cuda_check" 4097 1536 3 types
step pytest 420 python3 -m pytest -q -p no:cacheprovider -x tests/test_cuda.py tests/test_capabilities.py \
    tests/test_ops_matrix.py -k "cuda or capabilit or table"
step cuda_check 240 "$SKB/lmtail_cuda_check" 202048 6656 11
for tool in memcheck racecheck synccheck; do
    step "sanitize_$tool" 240 compute-sanitizer --tool $tool --error-exitcode 9 "$SKB/lmtail_cuda_check" 4097 1536 2 types
done
step bench_types 300 python3 bench/bench_cuda.py --types --reps 21 --check-bin "$SKB/lmtail_cuda_check"
if [ "${WITH_GGML:-0}" = 1 ]; then
    wait $anc
    step bench_ggml 300 python3 bench/bench_cuda.py --build-dir /tmp/anc --reps 51
fi
grep -hE "FAIL|MISMATCH|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|ALL CHECKS" "$OUT"/*.txt > "$OUT/highlights.txt" 2>/dev/null
echo done

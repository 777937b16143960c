#!/usr/bin/env bash
# One device-tool call for the CUDA backend: build ggml's CUDA backend + the anchor and lmtail (pip,
# LMTAIL_CUDA=ON) in parallel, run bench/bench_cuda.py (same-run anchor), the CUDA tests,
# lmtail_cuda_check (every kernel vs the CPU backend) and compute-sanitizer. Logs go to $OUT.
# Usage (repo root, ggml sources carried in .anchor/ggml): bash bench/cuda/run_on_device.sh [variants...]
# The optional variants (LMTAIL_CUDA_MMV values) are also checked by the tests and lmtail_cuda_check.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
(python3 -m pip install -q --no-build-isolation --no-deps -Ccmake.define.LMTAIL_CUDA=ON \
    -Ccmake.define.LMTAIL_EMU=OFF -Cbuild-dir=/tmp/skb . > "$OUT/pip.log" 2>&1; echo "pip_rc=$?" >> "$OUT/pip.log") &
pid=$!
python3 bench/bench_cuda.py --build-dir /tmp/anc --build-only > "$OUT/anchor_build.txt" 2>&1; echo "anchor_build_rc=$?"
wait $pid; tail -1 "$OUT/pip.log"
timeout 240 python3 bench/bench_cuda.py --build-dir /tmp/anc --reps 51 > "$OUT/bench_cuda.txt" 2>&1; echo "bench_rc=$?"
{
for v in default "$@"; do
  if [ "$v" = default ]; then unset LMTAIL_CUDA_MMV; else export LMTAIL_CUDA_MMV=$v; fi
  echo "== variant $v"
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -2
  timeout 60 /tmp/skb/lmtail_cuda_check 202048 6656 11 2>&1 | grep -E "rel L2|identical|MISMATCH|latch|CHECKS|FAIL"
  timeout 60 /tmp/skb/lmtail_cuda_check 4097 1536 3 2>&1 | grep -E "CHECKS|FAIL"
done
unset LMTAIL_CUDA_MMV
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool"
  timeout 90 compute-sanitizer --tool $tool /tmp/skb/lmtail_cuda_check 4097 1536 2 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|CHECKS"
done
} > "$OUT/checks.txt" 2>&1
echo done

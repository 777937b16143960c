#!/usr/bin/env bash
# Launch-geometry sweep of csrc/cuda/mul_mv.cu (warps per CTA : rows per warp : steps per chunk of
# the quantised types): builds lmtail_cuda_check once per triple (in parallel, against the
# lmtail_core of build dir $SKB), runs its every-type checks and prints its per-type table. The
# geometry changes no result (a (row, token)'s sums do not depend on it); the checks say so.
# Usage (repo root, on the GPU machine): bash bench/cuda/mv_sweep.sh [W:R:A ...]
set -u
set -u
SKB=${SKB:-/tmp/skb}
mkdir -p /tmp/sweep
triples=${*:-"4:4:1 4:4:2 4:4:4 2:8:2 4:8:2 8:4:2"}
core=$(find "$SKB" -name 'liblmtail_core*.a' | head -1)
for p in $triples; do
    IFS=: read -r w r a <<< "$p"
    ( nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true -DLMT_MV_WARPS=$w \
        -DLMT_MV_ROWS=$r -DLMT_MV_AHEAD=$a -Icsrc/include -Icsrc bench/cuda/cuda_check.cu csrc/cuda/mul_mv.cu \
        csrc/cuda/rms_norm.cu csrc/cuda/unary.cu csrc/cuda/argmax.cu csrc/cuda/topk.cu "$core" \
        -o "/tmp/mv_${w}_${r}_${a}.bin" -lpthread > "/tmp/sweep/build_${w}_${r}_${a}.txt" 2>&1 ) &
done
wait
for p in $triples; do
    IFS=: read -r w r a <<< "$p"
    b="/tmp/mv_${w}_${r}_${a}.bin"
    echo "== warps $w rows $r ahead $a"
    if [ ! -x "$b" ]; then tail -5 "/tmp/sweep/build_${w}_${r}_${a}.txt"; continue; fi
    timeout 60 "$b" 1024 1536 1 types | grep -E "every type|FAIL"
    timeout 120 "$b" 202048 6656 11 bench-only | grep -E "^\||copy bandwidth"
done

#!/usr/bin/env bash
# Launch-geometry sweep of csrc/cuda/mul_mv.cu (warps per CTA x rows per warp): builds
# lmtail_cuda_check once per pair (in parallel, against the lmtail_core of build dir $SKB) and prints
# each one's per-type table. Usage (repo root, on the GPU machine): bash bench/cuda/mv_sweep.sh [W:R ...]
set -u
SKB=${SKB:-/tmp/skb}
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/sweep
pairs=${*:-"4:4 4:2 8:2 8:4 4:8 2:4"}
core=$(find "$SKB" -name 'liblmtail_core*.a' | head -1)
for p in $pairs; do
    w=${p%%:*} r=${p##*:}
    ( nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true -DLMT_MV_WARPS=$w -DLMT_MV_ROWS=$r \
        -Icsrc/include -Icsrc bench/cuda/cuda_check.cu csrc/cuda/mul_mv.cu csrc/cuda/rms_norm.cu csrc/cuda/unary.cu \
        csrc/cuda/argmax.cu csrc/cuda/topk.cu "$core" -o "/tmp/mv_${w}_${r}.bin" -lpthread \
        > "/tmp/sweep/build_${w}_${r}.txt" 2>&1 ) &
done
wait
for p in $pairs; do
    w=${p%%:*} r=${p##*:}
    echo "== warps $w rows $r"
    [ -x "/tmp/mv_${w}_${r}.bin" ] && timeout 120 "/tmp/mv_${w}_${r}.bin" 202048 6656 11 bench-only | grep -E "^\||copy bandwidth"
done
tail -3 /tmp/sweep/build_*.txt

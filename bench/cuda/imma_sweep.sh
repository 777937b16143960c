#!/usr/bin/env bash
# Geometry sweep of the integer tensor-core matvec (csrc/cuda/mul_mv_imma.cuh), STAGES:WARPS:MT:KS
# per variant, each built as its own lmtail_cuda_check against the lmtail_core of $B (built by
# bench/cuda/imma_ab.sh); per variant: every-type checks (short) and the A/B table at T = 1 and 8.
# The geometry changes no result. Usage: B=/tmp/bimma bash bench/cuda/imma_sweep.sh 3:2:2:2 4:4:1:1 ...
set -u
B=${B:-/tmp/bimma}
OUT=${OUT:-/tmp/out}
core=$(find "$B" -name 'liblmtail_core*.a' | head -1)
for v in "$@"; do
    IFS=: read -r s w m k <<< "$v"
    ( nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true -DLMT_IMMA_SWEEP -DLMT_IMMA_STAGES=$s \
        -DLMT_IMMA_WARPS=$w -DLMT_IMMA_MT=$m -DLMT_IMMA_KS=$k -DLMT_IMMA_GU=${GU:-8} -Icsrc/include -Icsrc bench/cuda/cuda_check.cu \
        csrc/cuda/mul_mv.cu csrc/cuda/rms_norm.cu csrc/cuda/unary.cu csrc/cuda/argmax.cu csrc/cuda/topk.cu "$core" \
        -o "/tmp/imma_$s$w$m$k.bin" -lpthread > "$OUT/build_$s$w$m$k.txt" 2>&1 ) &
done
wait
for v in "$@"; do
    IFS=: read -r s w m k <<< "$v"
    b="/tmp/imma_$s$w$m$k.bin"
    echo "== stages $s warps $w mtiles $m ks $k"
    if [ ! -x "$b" ]; then tail -5 "$OUT/build_$s$w$m$k.txt"; continue; fi
    timeout 60 "$b" 1024 1536 1 types | grep -E "every type|FAIL"
    timeout 100 "$b" 202048 6656 ${REPS:-7} ab18 | grep -E "^\| Q|copy bandwidth"
done

#!/usr/bin/env bash
# Geometry sweep of the integer tensor-core matvec (csrc/cuda/mul_mv_imma.cuh). A variant is
# "S:W:MT:MB:KS/S:W:MT:MB:KS", the geometry for T <= 2 (one n-tile) and for more tokens (ring
# stages : warps per CTA : m16 tiles per warp : minimum CTAs per SM : 256-column steps per stage
# [: unroll of the 8 groups, default 8 [: Geo::XS, default 0]]), applied to every type; each variant is
# built as its own lmtail_cuda_check against the lmtail_core of $B (built by bench/cuda/imma_ab.sh).
# Per variant: every-type checks (short) and the A/B table at T = 1 and 8 (ab18) or, with
# MODE=ab, T = 1, 2, 4, 8, 16. The geometry changes no result.
# A variant "base=DIR" is an earlier mul_mv.cu (with its mul_mv_imma.cuh) in DIR, built the same
# way. PHASE=build or PHASE=run does only that half (default both).
# Usage: B=/tmp/bimma bash bench/cuda/imma_sweep.sh 3:4:1:1:1/3:4:2:1:1:8:1 4:4:1:1:1/4:4:2:1:2:8:1 ...
set -u
B=${B:-/tmp/bimma}
BIN=${BIN:-/tmp}  # where the variant binaries go (PHASE=build here, PHASE=run there: carry them)
core=$(find "$B" -name 'liblmtail_core*.a' | head -1)
tag() { echo "$1" | tr ':/' '_-'; }
build() {
    local v=$1 t=$(tag "$1") src=csrc/cuda/mul_mv.cu defs=
    if [ "${v#base=}" != "$v" ]; then
        src="${v#base=}/mul_mv.cu"
    else
        IFS=: read -r s1 w1 m1 b1 k1 u1 x1 <<< "${v%/*}"
        IFS=: read -r s8 w8 m8 b8 k8 u8 x8 <<< "${v#*/}"
        defs="-DLMT_IMMA_SWEEP -DLMT_G1_S=$s1 -DLMT_G1_W=$w1 -DLMT_G1_MT=$m1 -DLMT_G1_MB=$b1 -DLMT_G1_KS=$k1
              -DLMT_G1_GU=${u1:-8} -DLMT_G1_XS=${x1:-0} -DLMT_G8_S=$s8 -DLMT_G8_W=$w8 -DLMT_G8_MT=$m8 -DLMT_G8_MB=$b8 -DLMT_G8_KS=$k8
              -DLMT_G8_GU=${u8:-8} -DLMT_G8_XS=${x8:-0}"
    fi
    nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true $defs -Icsrc/include -Icsrc -Icsrc/cuda \
        bench/cuda/cuda_check.cu "$src" csrc/cuda/rms_norm.cu csrc/cuda/unary.cu csrc/cuda/argmax.cu csrc/cuda/topk.cu \
        "$core" -o "$BIN/imma_$t.bin" -lpthread > "${LOGS:-/tmp}/build_$t.txt" 2>&1
}
if [ "${PHASE:-all}" != run ]; then
    for v in "$@"; do build "$v" & done
    wait
fi
[ "${PHASE:-all}" = build ] && exit 0
for v in "$@"; do
    t=$(tag "$v")
    b="$BIN/imma_$t.bin"
    echo "== $v (T <= 2 / more: stages:warps:mtiles:min CTAs per SM:steps per stage[:unroll[:x staged]])"
    if [ ! -x "$b" ]; then tail -5 "${LOGS:-/tmp}/build_$t.txt"; continue; fi
    timeout 60 "$b" 1024 1536 1 types | grep -E "every type|FAIL"
    timeout 100 "$b" 202048 6656 ${REPS:-7} ${MODE:-ab18} | grep -E "^\| Q|copy bandwidth"
done

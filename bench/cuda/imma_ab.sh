#!/usr/bin/env bash
# One device call for the integer tensor-core matvec (csrc/cuda/mul_mv_imma.cuh): build
# lmtail_cuda_check (cmake, no Python), every-type checks, the A/B table (f32 kernel forced vs the
# product, interleaved), and optionally (SAN=1) compute-sanitizer on a small shape.
# With BASE=DIR (a directory holding an earlier mul_mv.cu and mul_mv_imma.cuh) the same A/B table
# of that version is built (nvcc, against this build's lmtail_core) and run alternately with this
# one, ROUNDS times each (this, base, this, base, ...; the f32 column is the common anchor). E.g.
# mkdir -p /tmp/base && for f in mul_mv.cu mul_mv_imma.cuh; do git show REV:csrc/cuda/$f > /tmp/base/$f; done
# (a directory inside the repo when the tree is sent to the device; remove it afterwards).
# Usage (repo root, on the GPU machine): BUDGET=480 bash bench/cuda/imma_ab.sh
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
END=$(( $(date +%s) + ${BUDGET:-480} ))
left() { echo $(( END - $(date +%s) - 5 )); }
B=${B:-/tmp/bimma}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/summary.txt" 2>&1
t0=$(date +%s)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMTAIL_CUDA=ON -DLMTAIL_PYTHON=OFF -DLMTAIL_EMU=OFF \
    > "$OUT/cmake.txt" 2>&1 || cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLMTAIL_CUDA=ON -DLMTAIL_PYTHON=OFF \
    -DLMTAIL_EMU=OFF > "$OUT/cmake.txt" 2>&1
timeout $(left) cmake --build "$B" --target lmtail_cuda_check -j 16 > "$OUT/build.txt" 2>&1
echo "build rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/summary.txt"
C="$B/lmtail_cuda_check"
[ -x "$C" ] || { tail -30 "$OUT/build.txt"; exit 1; }
t0=$(date +%s); timeout $(( $(left) < 150 ? $(left) : 150 )) "$C" 4097 1536 3 types > "$OUT/types.txt" 2>&1
echo "types rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/summary.txt"
if [ -n "${BASE:-}" ]; then
    core=$(find "$B" -name 'liblmtail_core*.a' | head -1)
    nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true -Icsrc/include -Icsrc -Icsrc/cuda \
        bench/cuda/cuda_check.cu "$BASE/mul_mv.cu" csrc/cuda/rms_norm.cu csrc/cuda/unary.cu csrc/cuda/argmax.cu \
        csrc/cuda/topk.cu "$core" -o /tmp/imma_base.bin -lpthread > "$OUT/build_base.txt" 2>&1
    echo "base build rc=$?" >> "$OUT/summary.txt"
fi
: > "$OUT/ab.txt"
for r in $(seq ${ROUNDS:-1}); do
    for bin in "$C" ${BASE:+/tmp/imma_base.bin}; do
        [ -x "$bin" ] || continue
        t0=$(date +%s); echo "## round $r: $bin" >> "$OUT/ab.txt"
        timeout $(( $(left) < 200 ? $(left) : 200 )) "$bin" 202048 6656 ${REPS:-11} ${MODE:-ab} >> "$OUT/ab.txt" 2>&1
        echo "ab $r $bin rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/summary.txt"
    done
done
if [ "${SAN:-0}" = 1 ]; then
    for tool in memcheck racecheck synccheck; do
        t0=$(date +%s)
        timeout $(( $(left) < 150 ? $(left) : 150 )) compute-sanitizer --tool $tool --error-exitcode 9 "$C" 1024 768 1 types > "$OUT/san_$tool.txt" 2>&1
        echo "sanitize_$tool rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/summary.txt"
    done
fi
cat "$OUT/summary.txt"; grep -E "FAIL|NO|every type|ALL" "$OUT/types.txt" | head -40; cat "$OUT/ab.txt"

#!/usr/bin/env bash
# device: build lmtail (pip, cuda), then lmtail_cuda_check variants of the experiment bench/cuda/mul_mv_int.cu (it needs the table hook described in its header)
set -u
export CMAKE_BUILD_PARALLEL_LEVEL=16
python3 -m pip install -q --no-build-isolation --no-deps -Ccmake.define.LMTAIL_CUDA=ON -Ccmake.define.LMTAIL_EMU=OFF -Cbuild-dir=/tmp/skb . > $OUT/pip.txt 2>&1 || { tail -30 $OUT/pip.txt; exit 1; }
core=$(find /tmp/skb -name 'liblmtail_core*.a' | head -1)
for v in $VARIANTS; do
  ( nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -prec-div=true -prec-sqrt=true $(echo $v | tr ',' ' ') -Icsrc/include -Icsrc -Icsrc/cuda bench/cuda/cuda_check.cu csrc/cuda/mul_mv.cu bench/cuda/mul_mv_int.cu csrc/cuda/rms_norm.cu csrc/cuda/unary.cu csrc/cuda/argmax.cu csrc/cuda/topk.cu "$core" -o "/tmp/v_$(echo $v | md5sum | cut -c1-8).bin" -lpthread > /tmp/b_$(echo $v | md5sum | cut -c1-8).txt 2>&1 ) &
done
wait
for v in $VARIANTS; do
  h=$(echo $v | md5sum | cut -c1-8); echo "== $v"
  [ -x /tmp/v_$h.bin ] || { tail -5 /tmp/b_$h.txt; continue; }
  timeout 60 /tmp/v_$h.bin 1024 1536 1 types | grep -E "every type|FAIL" | head -5
  timeout 100 /tmp/v_$h.bin 202048 6656 15 bench-only | grep -E "^\| Q|copy bandwidth"
done

#!/usr/bin/env bash
# Cross-build the Q4_K kernels for arm64 and run the NEON-vs-scalar byte parity check under
# qemu user mode (needs g++-aarch64-linux-gnu and qemu-user, as tools/check_neon_qemu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
o=$(mktemp -d)
for f in csrc/cpu/types/q4_k/q4_k.cpp csrc/cpu/types/q4_k/q4_k_quantize.cpp csrc/cpu/types/q4_k/q4_k_scalar.cpp \
         csrc/cpu/types/q4_k/q4_k_neon.cpp csrc/core/thread_pool.cpp csrc/core/cpu_features.cpp bench/q4_k_neon_parity.cpp; do
  aarch64-linux-gnu-g++ -std=c++17 -O2 -ffp-contract=off -Icsrc -Icsrc/include -DLMTAIL_HAVE_NEON=1 -c "$f" -o "$o/$(basename "$f" .cpp).o"
done
aarch64-linux-gnu-g++ "$o"/*.o -o "$o/parity" -lpthread
qemu-aarch64 -L /usr/aarch64-linux-gnu "$o/parity"

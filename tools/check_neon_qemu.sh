#!/usr/bin/env bash
# Cross-build the C++ core for arm64 and run the SIMD byte-parity check (NEON and NEON dotprod vs
# scalar, every type and precision) under qemu user-mode emulation. Needs Debian's
# g++-aarch64-linux-gnu and qemu-user (installed when run as root). Proves the NEON paths on an
# x86 machine; speed under qemu means nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++-aarch64-linux-gnu qemu-user >/dev/null
fi
b=build/arm64
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMTAIL_PYTHON=OFF \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_INSTALL_PREFIX=$PWD/$b/prefix >/dev/null
cmake --build $b >/dev/null
cmake --install $b >/dev/null
cmake -S tests/cpp -B $b/example -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
  -Dlmtail_DIR=$PWD/$b/prefix/lib/cmake/lmtail >/dev/null
cmake --build $b/example >/dev/null
# Twice: a Cortex-A53 (ARMv8.0, no dot product: Auto must be "neon" and "neon_dotprod" refused)
# and qemu's "max" CPU (the dot product: Auto must be "neon_dotprod", checked against scalar and neon).
qemu-aarch64 -cpu cortex-a53 -L /usr/aarch64-linux-gnu $b/example/isa_parity neon
qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu $b/example/isa_parity neon_dotprod

#!/usr/bin/env bash
# Cross-build the C++ core for arm64 and run the SIMD byte-parity check (NEON vs scalar) under
# qemu user-mode emulation. Needs Debian's g++-aarch64-linux-gnu and qemu-user (installed when
# run as root). Proves the NEON path on an x86 machine; speed under qemu means nothing.
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
qemu-aarch64 -L /usr/aarch64-linux-gnu $b/example/isa_parity

#!/usr/bin/env bash
# Compile every metal/*.metal with Apple's Metal compiler into one metallib: the check that the
# kernels the emulator runs on Linux are also valid MSL for the real compiler (macOS CI job
# "macos-metallib"; needs Xcode's Metal toolchain). Same flags as the Apple build (CMakeLists.txt, LMTAIL_METAL):
# no fast math (the kernels' non-finite tests and tie rules rely on IEEE semantics), Metal 3.0.
# Usage: bash tools/compile_metallib.sh [out_dir]   (default build/metallib)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/metallib}
mkdir -p "$out/air"
if ! xcrun -sdk macosx metal --version >/dev/null 2>&1; then
  echo "the Metal toolchain is missing; downloading it (Xcode 16+: a separate component)"
  xcodebuild -downloadComponent MetalToolchain
fi
xcrun -sdk macosx metal --version
airs=()
for msl in metal/*.metal; do
  stem=$(basename "$msl" .metal)
  echo "compiling $msl"
  xcrun -sdk macosx metal -fno-fast-math -std=metal3.0 -Wall -I csrc/include -c "$msl" -o "$out/air/$stem.air"
  airs+=("$out/air/$stem.air")
done
xcrun -sdk macosx metallib "${airs[@]}" -o "$out/lmtail.metallib"
ls -l "$out/lmtail.metallib"
echo "metallib: ${#airs[@]} sources compiled"

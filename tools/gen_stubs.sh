#!/usr/bin/env bash
# Regenerate the committed type stubs of the extension module (tests/test_packaging.py checks them).
# stubgen sees only the top-level module; the backend submodules, which exist per build (metal_emu
# on POSIX, metal on Apple, cuda with LMTAIL_CUDA), are declared as modules after it.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
stubgen -m lmtail._core -o "$tmp"
{ cat "$tmp/lmtail/_core.pyi"; cat tools/stub_submodules.pyi; } > python/lmtail/_core.pyi
echo "wrote python/lmtail/_core.pyi"

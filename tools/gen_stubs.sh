#!/usr/bin/env bash
# Regenerate the committed type stubs of the extension module (tests/test_packaging.py checks them).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
stubgen -m lmtail._core -o "$tmp"
cp "$tmp/lmtail/_core.pyi" python/lmtail/_core.pyi
echo "wrote python/lmtail/_core.pyi"

#!/usr/bin/env bash
# Build the extension with ASan + UBSan into a private prefix and run the kernel tests against it.
# Usage: tools/sanitize.sh [pytest args]   (default: the fast kernel/head/quantiser/GGUF tests)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
python -m pip install -q --no-build-isolation --no-deps --target "$prefix" \
  -Ccmake.define.LMTAIL_SANITIZE=ON -Ccmake.build-type=RelWithDebInfo -Cbuild-dir=build/sanitize .
asan=$(g++ -print-file-name=libasan.so)
ubsan=$(g++ -print-file-name=libubsan.so)
if [ $# -eq 0 ]; then
  set -- tests/test_matvec.py tests/test_reductions.py tests/test_norm_unary.py tests/test_head.py \
         tests/test_quantize.py tests/test_gguf.py -m "not slow" -q -p no:cacheprovider
fi
# Python and numpy leak by design at exit; everything else must be clean.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LD_PRELOAD="$asan $ubsan" PYTHONPATH="$prefix" python -m pytest "$@"
echo "sanitizer run: OK"

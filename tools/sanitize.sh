#!/usr/bin/env bash
# Build lmtail with AddressSanitizer + UndefinedBehaviorSanitizer in a private virtual
# environment and run the kernel tests against that build.
# Usage: tools/sanitize.sh [pytest args]   (default: kernels, head, quantiser, GGUF, metal-emu,
# sampler API, grammar matcher, speculative, top-k route and Metal host-code tests; the oracle-dependent ones
# skip in the private venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python -m venv "$venv"   # isolated: no editable or regular lmtail from elsewhere can shadow it
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy gguf pytest hypothesis pybind11 "scikit-build-core>=0.10" cmake ninja
"$venv/bin/python" -m pip install -q --no-build-isolation \
  -Ccmake.define.LMTAIL_SANITIZE=ON -Ccmake.build-type=RelWithDebInfo -Cbuild-dir=build/sanitize .
asan=$(g++ -print-file-name=libasan.so)
ubsan=$(g++ -print-file-name=libubsan.so)
if [ $# -eq 0 ]; then
  set -- tests/test_matvec.py tests/test_reductions.py tests/test_norm_unary.py tests/test_head.py \
         tests/test_quantize.py tests/test_gguf.py tests/test_metal_emu.py tests/test_metal_emu_hazards.py \
         tests/test_sampling_api.py tests/test_grammar_matcher.py tests/test_grammar_fuzz.py \
         tests/test_speculative.py tests/test_topk_route.py tests/test_metal_host.py \
         -m "not slow" -q -p no:cacheprovider
fi
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Prove the sanitized module is the one imported (a shadowing install would make this run moot).
LD_PRELOAD="$asan $ubsan" "$venv/bin/python" -c "
import lmtail._core as c, sys
assert c.__file__.startswith('$venv'), c.__file__
print('sanitized module:', c.__file__)"
# Python and numpy leak by design at exit; everything else must be clean.
LD_PRELOAD="$asan $ubsan" "$venv/bin/python" -m pytest "$@"
echo "sanitizer run: OK"

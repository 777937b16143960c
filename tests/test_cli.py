"""The ``lmtail`` command as a user runs it: ``python -m lmtail`` and the installed console script.

User errors give one line (the typed error and a hint) and exit status 2; ``--debug`` keeps the
traceback; ``demo --threads`` reaches the synthetic head; ``bench`` prints sane numbers.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lmtail
from _gguf_util import OTHER_TYPES, head_model

BIN = os.path.dirname(sys.executable)
SCRIPT = shutil.which("lmtail", path=BIN)
SMALL = ["--rows", "300", "--cols", "256", "--steps", "1", "--draft", "0"]
# A small, fast bandwidth probe for the tests that do not check its defaults.
QUICK_BW = ["--bw-mib", "64", "--bw-runs", "2"]


def _commands():
    cmds = [pytest.param([sys.executable, "-m", "lmtail"], "python -m lmtail", id="python-m")]
    mark = pytest.mark.skipif(SCRIPT is None, reason=f"no lmtail console script in {BIN} (not pip-installed?)")
    cmds.append(pytest.param([SCRIPT or "lmtail"], "lmtail", id="console-script", marks=mark))
    return cmds


COMMANDS = _commands()


def run(cmd, *args, timeout=300):
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(r, typed: str, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if not ln.startswith("lmtail: ")]  # progress lines aside
    assert len(lines) == 1, err
    assert f"{typed}:" in lines[0] and "hint:" in lines[0] and "--debug" in lines[0], lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- program name, --version, --help ----------------------------------------------------------------
@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_no_arguments_names_the_real_program(cmd, prog):
    r = run(cmd)
    assert r.returncode == 2
    assert f"usage: {prog} " in r.stderr, r.stderr
    if prog == "lmtail":
        assert "python -m lmtail" not in r.stderr + r.stdout
    assert "demo" in r.stderr and "bench" in r.stderr


@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_version(cmd, prog):
    r = run(cmd, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"lmtail {lmtail.__version__}"


@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_help_lists_the_commands(cmd, prog):
    r = run(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert f"usage: {prog}" in r.stdout and "demo" in r.stdout and "bench" in r.stdout
    r = run(cmd, "bench", "--help")
    assert r.returncode == 0 and f"usage: {prog} bench" in r.stdout and "--plot" in r.stdout


# ---- user errors: one line, exit 2; --debug: the traceback ----------------------------------------------
@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_cols_not_a_multiple_of_256_is_one_line(cmd, prog):
    line = one_line_error(run(cmd, "demo", "--cols", "1000"), "ParameterError", "--cols", "256", "1000")
    assert line.startswith(f"{prog} demo: error:")
    assert "w:" not in line  # the quantiser's internal argument name does not leak


@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_gguf_errors_are_one_line(cmd, prog, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    one_line_error(run(cmd, "demo", "--gguf", str(junk)), "GGUFError", "bad magic", "--gguf takes")
    q3, _ = head_model(tmp_path / "q3.gguf", head_type=OTHER_TYPES["Q3_K"][0])  # a ggml type lmtail does not run
    one_line_error(run(cmd, "demo", "--gguf", str(q3)), "UnsupportedError", "Q3_K", "Q5_K")
    one_line_error(run(cmd, "demo", "--gguf", str(tmp_path / "missing.gguf")), "GGUFError", "missing.gguf")
    # --debug, before or after the command: the full traceback
    for args in (["--debug", "demo", "--gguf", str(q3)], ["demo", "--gguf", str(q3), "--debug"]):
        r = run(cmd, *args)
        assert r.returncode != 0 and "Traceback" in r.stderr and "UnsupportedError" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_bad_option_values_are_one_line(cmd, prog):
    for args, needle in ((["demo", "--topk", "0"], "--topk"), (["demo", "--tokens", "0"], "--tokens"),
                         (["demo", "--threads", "0"], "--threads"), (["bench", "--cols", "100"], "--cols"),
                         (["bench", "--repeat", "0"], "--repeat"), (["demo", "--rows", "30", "--cols", "256", "--topk", "5"], "--draft 0")):
        one_line_error(run(cmd, *args), "ParameterError", needle)
    one_line_error(run(cmd, "bench", "--backend", "nope"), "BackendError", "nope", "backends here:")
    # argparse's own errors (not an integer, unknown command): one line too
    for args in (["demo", "--rows", "abc"], ["frobnicate"]):
        r = run(cmd, *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(prog), r.stderr


def test_gguf_with_synthetic_shape_options_is_refused(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", rows=64, cols=256)
    for sub in ("demo", "bench"):
        one_line_error(run([sys.executable, "-m", "lmtail"], sub, "--gguf", str(path), "--rows", "10"),
                       "ParameterError", "--rows/--cols")


# ---- demo --threads reaches the synthetic head ---------------------------------------------------------
def test_demo_threads_reach_the_synthetic_head(monkeypatch, capsys):
    from lmtail.__main__ import main
    from lmtail.head import Head

    seen = []
    init = Head.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("threads"))
        init(self, *args, **kwargs)

    monkeypatch.setattr(Head, "__init__", spy)
    assert main(["demo", *SMALL, "--threads", "1"], prog="lmtail") == 0
    assert seen == [1]
    assert "threads=1 " in capsys.readouterr().out


def test_demo_threads_zero_is_refused_not_ignored():
    # Before the fix the synthetic head never saw --threads, so 0 ran (with all threads).
    r = run([sys.executable, "-m", "lmtail"], "demo", *SMALL, "--threads", "0")
    one_line_error(r, "ParameterError", "--threads")


@pytest.mark.parametrize("cmd,prog", COMMANDS)
def test_demo_small_runs(cmd, prog):
    r = run(cmd, "demo", *SMALL, "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "per-stage median ms" in r.stdout and "threads=1 " in r.stdout


# ---- bench ---------------------------------------------------------------------------------------------
def _stage_map(result):
    return {s["stage"]: s for s in result["stages"]}


def check_bench_doc(doc, rows, cols, repeat, tokens=1):
    from lmtail import _core
    from lmtail.bench import STAGES

    assert doc["schema"] == "lmtail-bench/1"
    m = doc["machine"]
    assert isinstance(m["cpu"], str) and m["cpu"]
    assert m["isa"] == _core.isa_name() and m["lmtail"] == lmtail.__version__
    all_threads = int(_core.default_threads())
    assert m["default_threads"] == all_threads
    assert m["loadavg"] is None or (len(m["loadavg"]) == 3 and all(x >= 0 for x in m["loadavg"]))
    bw = doc["bandwidth"]
    assert bw is not None and bw["buffer_bytes"] > 0 and bw["runs"] >= 1
    assert {r["threads"] for r in bw["results"]} == {1, all_threads}
    for r in bw["results"]:
        assert math.isfinite(r["gbps"]) and 0.05 < r["gbps"] < 10_000, r
        assert r["best_s"] == min(r["samples_s"]) and len(r["samples_s"]) == bw["runs"]
        assert math.isclose(r["gbps"], bw["buffer_bytes"] / r["best_s"] / 1e9, rel_tol=1e-9)
    h = doc["head"]
    assert (h["rows"], h["cols"], h["weight_type"], h["tokens"], h["repeat"]) == (rows, cols, "Q5_K", tokens, repeat)
    assert h["weight_bytes"] == rows * cols // 256 * 176
    names = [r["backend"] for r in doc["results"]]
    assert names and set(names) <= set(lmtail.backends()) and "cpu" in names
    for s in doc["skipped"]:
        assert s["backend"] in lmtail.backends() and s["backend"] not in names and s["reason"]
    assert set(names) | {s["backend"] for s in doc["skipped"]} == set(lmtail.backends())
    bw_at = {r["threads"]: r["gbps"] for r in bw["results"]}
    for res in doc["results"]:
        st = _stage_map(res)
        assert [s["stage"] for s in res["stages"]] == list(STAGES)
        assert res["threads"] == h["threads"] and res["bw_gbps"] == bw_at[res["threads"]]
        for s in res["stages"]:
            assert math.isfinite(s["ms"]) and s["ms"] >= 0, s
            if "samples_ms" in s:
                n = 2 * repeat if s["stage"] in ("norm", "head", "cap") else repeat
                assert len(s["samples_ms"]) == n and min(s["samples_ms"]) == s["min_ms"], s
            if s["gbps"] is not None:
                assert math.isclose(s["gbps"], h["weight_bytes"] / (s["ms"] / 1e3) / 1e9, rel_tol=1e-9)
                assert math.isclose(s["pct_bw"], 100 * s["gbps"] / res["bw_gbps"], rel_tol=1e-9)
        assert st["head"]["ms"] > 0 and st["head"]["gbps"] is not None
        assert st["norm"]["gbps"] is None and st["select_topk"]["gbps"] is None
        for sel in ("greedy", "topk"):
            parts = st["norm"]["ms"] + st["head"]["ms"] + st["cap"]["ms"] + st[f"select_{sel}"]["ms"]
            assert math.isclose(st[f"total_{sel}"]["ms"], parts, rel_tol=1e-9)
            assert st[f"wall_{sel}"]["ms"] > 0


def test_bench_json_small():
    # The brief's command, default probe included.
    r = run([SCRIPT or sys.executable, *([] if SCRIPT else ["-m", "lmtail"])],
            "bench", "--rows", "4096", "--cols", "512", "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout is the JSON document alone
    check_bench_doc(doc, 4096, 512, 2)
    assert doc["head"]["source"] == "synthetic" and doc["head"]["cache_resident"] in (True, False)
    assert "measuring read bandwidth" in r.stderr  # the progress line goes to stderr


def test_bench_table_and_options():
    r = run([sys.executable, "-m", "lmtail"], "bench", "--rows", "1024", "--cols", "256", "--repeat", "1",
            "--tokens", "2", "--threads", "1", "--topk", "5", "--precision", "f32", *QUICK_BW)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for needle in ("| backend ", "| stage ", "| threads |", "head matvec", "select top-k", "total greedy",
                   lmtail._core.isa_name()):
        assert needle in out, needle
    assert "| cpu       | f32       |       1 |  2 |" in out


def test_bench_every_backend_when_named(tmp_path):
    names = lmtail.backends()
    args = ["bench", "--rows", "512", "--cols", "256", "--repeat", "1", "--json", *QUICK_BW]
    for b in names:
        args += ["--backend", b]
    r = run([sys.executable, "-m", "lmtail"], *args)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["backend"] for x in doc["results"]] == names and doc["skipped"] == []


def test_bench_gguf(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", rows=1000, cols=512)
    r = run([sys.executable, "-m", "lmtail"], "bench", "--gguf", str(path), "--repeat", "2", "--json", *QUICK_BW)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    check_bench_doc(doc, 1000, 512, 2)
    assert doc["head"]["source"] == str(path)


def test_bench_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the [plot] extra) is not installed")
    png = tmp_path / "bench.png"
    r = run([sys.executable, "-m", "lmtail"], "bench", "--rows", "1024", "--cols", "256", "--repeat", "1",
            "--plot", str(png), *QUICK_BW)
    assert r.returncode == 0, r.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_bench_plot_without_matplotlib_is_one_line_and_early(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # import matplotlib -> ImportError
            "from lmtail.__main__ import main\n"
            f"sys.exit(main(['bench', '--rows', '256', '--cols', '256', '--plot', {str(tmp_path / 'x.png')!r}], "
            "prog='lmtail'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = one_line_error(r, "MissingExtraError", "matplotlib", "lmtail[plot]")
    assert "measuring read bandwidth" not in r.stderr, "refused only after the slow part"
    assert line.startswith("lmtail bench: error:")


def test_bench_unwritable_plot_path_is_one_line(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the [plot] extra) is not installed")
    r = run([sys.executable, "-m", "lmtail"], "bench", "--rows", "256", "--cols", "256", "--repeat", "1",
            "--plot", str(tmp_path / "no" / "such" / "dir" / "x.png"), *QUICK_BW)
    one_line_error(r, "FileNotFoundError", "x.png")


def test_synthetic_weights_match_the_demo_head():
    # The demo and bench share one builder: same seed, same bytes; tiled copies differ (no twins).
    from lmtail.bench import synthetic_weights

    w1, g1, _, _ = synthetic_weights(9000, 256, 3, log=lambda m: None)
    w2, g2, _, _ = synthetic_weights(9000, 256, 3, log=lambda m: None)
    assert np.array_equal(w1, w2) and np.array_equal(g1, g2)
    assert w1.shape == (9000, 176) and w1.flags.c_contiguous
    assert not np.array_equal(w1[:4096], w1[4096:8192])
    assert np.array_equal(w1[:4096, 2:], w1[4096:8192, 2:])  # only the first block scale is nudged

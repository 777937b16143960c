"""lmtail.Head: the whole tail, retained distribution semantics, fail-closed behaviour, threads."""

import threading

import numpy as np
import pytest

import lmtail
from lmtail import ops
from _util import bits, q5k_matrix

COLS = 512


def make_head(rows=1000, **kw):
    q = q5k_matrix(rows, COLS, seed=rows)
    g = np.random.default_rng(0).uniform(0.5, 1.5, COLS).astype(np.float32)
    kw.setdefault("logit_scale", 0.196116)
    kw.setdefault("softcap", 20.0)
    return lmtail.Head(q, g, **kw), q, g


def hidden(T, seed=0):
    return (np.random.default_rng(seed).standard_normal((T, COLS)) * 4).astype(np.float32)


def manual(q, g, h, s=0.196116, cap=20.0, precision=None):
    return ops.softcap(ops.matvec_q5_k(q, ops.rms_norm(h, g), precision=precision), s, cap, four_pass=True)


def test_properties_and_zero_copy():
    head, q, _ = make_head(eog_ids=[3, 1])
    assert (head.rows, head.cols, head.backend) == (1000, COLS, "cpu")
    assert head.eog_ids == (1, 3)
    assert np.shares_memory(head.weight, q)


@pytest.mark.parametrize("precision", [None, "f32", "i16", "i24"])
@pytest.mark.parametrize("T", [1, 3, 8])
def test_logits_equal_the_op_pipeline(T, precision):
    head, q, g = make_head(precision=precision)
    assert head.precision == (precision or lmtail.ops.default_precision("cpu"))
    h = hidden(T, seed=T)
    out = head.logits(h)
    assert out.shape == (T, 1000)
    assert np.array_equal(bits(out), bits(manual(q, g, h, precision=precision)))
    assert np.array_equal(head.logits(h[0]), out[:1])


def test_precision_validation():
    q = q5k_matrix(4, COLS)
    with pytest.raises(lmtail.ParameterError):
        lmtail.Head(q, precision="bf16")
    if "metal-emu" in lmtail.backends():
        with pytest.raises(lmtail.UnsupportedError, match="i16.*Q5_K.*metal-emu.*: cpu"):
            lmtail.Head(q, backend="metal-emu", precision="i16")
        assert lmtail.Head(q, backend="metal-emu").precision == "f32"


@pytest.mark.parametrize("precision", ["f32", "i16"])
def test_nonfinite_normed_activation_fails_closed(precision):
    # A finite hidden state whose normalised value overflows (huge gamma): the matvec sees +/-inf.
    # f32 propagates it by IEEE arithmetic; i16 turns the block's scale into NaN. Either way the
    # pre-cap check raises, and the published rows stay as they were.
    q = q5k_matrix(50, COLS, seed=2)
    head = lmtail.Head(q, np.full(COLS, 3e38, np.float32), precision=precision)
    ok = lmtail.Head(q, np.ones(COLS, np.float32), precision=precision)
    good = head.logits(np.zeros((1, COLS), np.float32) + np.float32(1e-30))  # tiny: normed finite
    snapshot = good.copy()
    assert np.isfinite(ok.logits(hidden(1))).all()
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.logits(hidden(1))
    assert np.array_equal(bits(good), bits(snapshot))


def test_logits_returns_fresh_arrays_or_fills_out():
    # Nothing a call returns is shared with a later call (issue 18 item 2): a fresh array by
    # default, or the caller's out= buffer, written only when every check passed.
    head, q, g = make_head()
    h1, h2 = hidden(2, 1), hidden(2, 2)
    a = head.logits(h1)
    keep = a.copy()
    b = head.logits(h2)
    assert not np.shares_memory(a, b) and np.array_equal(bits(a), bits(keep))
    out = np.full((2, 1000), 7.0, np.float32)
    assert head.logits(h2, out=out) is out and np.array_equal(bits(out), bits(b))
    one = np.empty(1000, np.float32)
    assert head.logits(h1[0], out=one) is one and np.array_equal(bits(one), bits(a[0]))
    bad = h1.copy()
    bad[1, 3] = np.nan
    out[:] = 7.0
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.logits(bad, out=out)
    assert np.all(out == 7.0)  # untouched on failure
    for wrong in (np.empty((3, 1000), np.float32), np.empty((2, 1000), np.float64), np.empty((1000, 2), np.float32).T,
                  np.empty((2, 1000), np.float32)[:, ::-1]):
        with pytest.raises((lmtail.ShapeError, lmtail.DTypeError)):
            head.logits(h1, out=wrong)
    ro = np.empty((2, 1000), np.float32)
    ro.flags.writeable = False
    with pytest.raises(lmtail.ShapeError):
        head.logits(h1, out=ro)


def test_growing_T_reallocates_but_keeps_contract():
    head, q, g = make_head(max_tokens=2)
    h = hidden(5, 3)
    assert np.array_equal(bits(head.logits(h)), bits(manual(q, g, h)))


@pytest.mark.parametrize("precision", ["f32", "i16"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_hidden_fails_closed_and_keeps_published_rows(bad, precision):
    head, q, g = make_head(precision=precision)
    good = head.logits(hidden(2, 4))
    snapshot = good.copy()
    h = hidden(2, 5)
    h[1, 7] = bad
    for call in (head.logits, head.greedy, lambda x: head.topk(x, 5)):
        with pytest.raises(lmtail.NonFiniteLogitsError):
            call(h)
    assert np.array_equal(bits(good), bits(snapshot))


@pytest.mark.parametrize("precision", ["f32", "i16"])
def test_nonfinite_weights_fail_closed_before_the_cap_hides_them(precision):
    # An fp16 +inf block scale makes a pre-cap logit non-finite; tanh would map +inf to 1.0.
    q = q5k_matrix(10, COLS, seed=9).copy()
    q[4, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    head = lmtail.Head(q, None, logit_scale=1.0, softcap=20.0, precision=precision)
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.logits(hidden(1))
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.greedy(hidden(1))


def test_greedy_and_topk_agree_with_logits():
    head, q, g = make_head(eog_ids=[])
    h = hidden(4, 6)
    logits = head.logits(h).copy()
    greedy = head.greedy(h)
    assert greedy.dtype == np.uint32 and greedy.tolist() == [int(np.argmax(r)) for r in logits]
    excl = [int(greedy[0]), int(greedy[1])]
    assert head.greedy(h, exclude=excl).tolist() == ops.greedy_argmax(logits, exclude=excl).tolist()
    ids, vals = head.topk(h, 40)
    rid, rval = ops.topk(logits, 40)
    assert np.array_equal(ids, rid) and np.array_equal(bits(vals), bits(rval))
    assert np.array_equal(head.logits(h), logits)  # greedy/top-k did not disturb the distribution


def test_greedy_sees_cap_induced_ties():
    # rows 1 and 2 give pre-cap logits ~1300 and ~2600; both cap to exactly 20.0f.
    w = np.zeros((3, 256), np.float32)
    w[0] = 0.001
    w[1] = 5.0
    w[2] = 10.0
    head = lmtail.Head(lmtail.quantize_q5_k(w), None, logit_scale=1.0, softcap=20.0)
    h = np.ones(256, np.float32)
    capped = head.logits(h)[0]
    assert capped[1] == capped[2] == np.float32(20.0)
    assert int(head.greedy(h)[0]) == 1


def test_exclusion_errors():
    head, _, _ = make_head(rows=3)
    with pytest.raises(lmtail.ParameterError):
        head.greedy(hidden(1), exclude=[0, 1, 2])
    with pytest.raises(lmtail.ParameterError):
        head.greedy(hidden(1), exclude=[3])


def test_constructor_validation():
    q = q5k_matrix(4, 256)
    with pytest.raises(lmtail.ShapeError):
        lmtail.Head(q, np.ones(255, np.float32))
    with pytest.raises(lmtail.DTypeError):
        lmtail.Head(q.astype(np.int16))
    with pytest.raises(lmtail.ParameterError):
        lmtail.Head(q, softcap=float("nan"))
    with pytest.raises(lmtail.ParameterError):
        lmtail.Head(q, eog_ids=[4])
    with pytest.raises(lmtail.BackendError):
        lmtail.Head(q, backend="tpu")
    head = lmtail.Head(q)
    with pytest.raises(lmtail.ShapeError):
        head.logits(np.ones(512, np.float32))
    with pytest.raises(lmtail.DTypeError):
        head.logits(np.ones(256, np.float64))
    with pytest.raises(lmtail.ParameterError):
        head.topk(np.ones(256, np.float32), 5)


def test_concurrent_callers_serialise_without_corruption():
    head, q, g = make_head(rows=2000)
    inputs = [hidden(2, s) for s in range(6)]
    expected = [manual(q, g, h) for h in inputs]
    errors = []

    def worker(i):
        try:
            for _ in range(5):
                h = inputs[i]
                got = head.greedy(h)
                want = [int(np.argmax(r)) for r in expected[i]]
                if got.tolist() != want:
                    errors.append((i, got, want))
                ids, _ = head.topk(h, 8)
                if ids[0, 0] != want[0]:
                    errors.append((i, "topk"))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_from_gguf_end_to_end(tmp_path):
    from _gguf_util import head_model

    path, arrays = head_model(tmp_path / "m.gguf", "gemma2", rows=40, cols=512, head="tied",
                              kv={"gemma2.final_logit_softcapping": __import__("_gguf_util").f32(25.0)})
    head = lmtail.Head.from_gguf(path)
    assert (head.rows, head.cols, head.softcap, head.eps) == (40, 512, 25.0, np.float32(1e-5))
    assert head.eog_ids == (2,)  # </s> from the planted vocabulary
    h = hidden(2, 8)
    want = ops.softcap(ops.matvec_q5_k(arrays["embd"], ops.rms_norm(h, arrays["norm"], eps=head.eps)), 1.0, 25.0)
    assert np.array_equal(bits(head.logits(h)), bits(want))
    assert head.greedy(h, exclude=head.eog_ids).tolist() == ops.greedy_argmax(want, exclude=[2]).tolist()


def test_demo_with_gguf(tmp_path):
    import subprocess
    import sys

    from _gguf_util import head_model

    path, _ = head_model(tmp_path / "m.gguf", "llama", rows=300, cols=512)
    r = subprocess.run([sys.executable, "-m", "lmtail", "demo", "--gguf", str(path), "--steps", "2", "--topk", "5"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "loaded" in r.stdout and "per-stage median ms" in r.stdout


def test_from_gguf_command_r_layer_norm_and_logit_scale(tmp_path):
    from _gguf_util import f32, head_model

    path, arrays = head_model(tmp_path / "cr.gguf", "command-r", rows=40, cols=512, eps=None, head="tied",
                              kv={"command-r.logit_scale": f32(0.0625),
                                  "command-r.attention.layer_norm_epsilon": f32(1e-5)})
    head = lmtail.Head.from_gguf(path)
    assert head.norm_kind == "layer" and head.logit_scale == np.float32(0.0625) and head.softcap == 0.0
    h = hidden(3, 9) + 2.0
    want = ops.scale(ops.matvec_q5_k(arrays["embd"], ops.layer_norm(h, arrays["norm"], eps=head.eps)), 0.0625)
    assert np.array_equal(bits(head.logits(h)), bits(want))


# ---- issue 18: fail closed under adversarial input and concurrency ----


@pytest.mark.parametrize("norm_kind", ["rms", "layer"])
@pytest.mark.parametrize("value", [1e21, 3e38, -2e19])
def test_hidden_whose_norm_overflows_fails_closed(norm_kind, value):
    # One finite but huge hidden value: the float squares (or the variance) overflow, ggml's
    # scale becomes 1/sqrt(inf) = 0 and every logit 0, so greedy silently returned token 0.
    head, q, g = make_head(norm_kind=norm_kind)
    h = hidden(2, 11)
    h[1, 100] = value
    for call in (head.logits, head.greedy, lambda x: head.topk(x, 3)):
        with pytest.raises(lmtail.NonFiniteLogitsError, match="overflowed"):
            call(h)
    with pytest.raises(lmtail.NonFiniteLogitsError, match="row 1"):
        (ops.rms_norm if norm_kind == "rms" else ops.layer_norm)(h, g)


def test_large_hidden_without_overflow_keeps_its_bytes():
    # 1e19 squared is finite (1e38): no overflow, the tail runs and equals the op pipeline.
    head, q, g = make_head()
    h = hidden(1, 12)
    h[0, 5] = 1e19
    assert np.array_equal(bits(head.logits(h)), bits(manual(q, g, h)))
    assert int(head.greedy(h)[0]) == int(np.argmax(manual(q, g, h)[0]))


@pytest.mark.skipif("metal-emu" not in lmtail.backends(), reason="metal-emu not built")
def test_norm_overflow_fails_closed_on_metal_emu():
    head, q, g = make_head(rows=64, backend="metal-emu")
    h = hidden(1, 13)
    h[0, 9] = 1e21
    with pytest.raises(lmtail.NonFiniteLogitsError, match="overflowed"):
        head.greedy(h)
    with pytest.raises(lmtail.NonFiniteLogitsError, match="overflowed"):
        ops.rms_norm(h, g, backend="metal-emu")
    assert head.greedy(hidden(1, 13)).shape == (1,)  # a normal hidden state still runs


def _in_thread(fn):
    """fn() run in a new thread; its result, or its exception re-raised here."""
    box = []

    def run():
        try:
            box.append((True, fn()))
        except Exception as e:
            box.append((False, e))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    ok, v = box[0]
    if not ok:
        raise v
    return v


def test_results_are_not_refilled_by_another_threads_call():
    # Deterministic form of the race: what thread A got must not change when thread B calls.
    head, q, g = make_head()
    h1, h2 = hidden(3, 21), hidden(3, 22)
    want1, want2 = manual(q, g, h1), manual(q, g, h2)
    a = head.logits(h1)
    _in_thread(lambda: head.logits(h2))
    assert np.array_equal(bits(a), bits(want1))
    # row(t) is the calling thread's own last compute, whatever other threads computed since.
    head.topk(h1, 5)
    other = _in_thread(lambda: (head.topk(h2, 5), head.row(1).copy())[1])
    assert np.array_equal(bits(other), bits(want2[1]))
    assert np.array_equal(bits(head.row(1)), bits(want1[1]))
    assert not head.row(0).flags.writeable
    # a thread that never computed has no rows
    with pytest.raises(lmtail.ParameterError):
        _in_thread(lambda: head.row(0))


def test_shared_head_four_threads_logits_and_rows():
    head, q, g = make_head(rows=3000)
    inputs = [hidden(2, 30 + i) for i in range(4)]
    want = [manual(q, g, h) for h in inputs]
    errors = []

    def worker(i):
        try:
            for rep in range(25):
                got = head.logits(inputs[i])
                ids, _ = head.topk(inputs[i], 3)
                r = head.row(1)
                if not (np.array_equal(bits(got), bits(want[i])) and np.array_equal(bits(r), bits(want[i][1]))):
                    errors.append((i, rep))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert head.bytes_read_back == 4 * 25 * (2 * 4 * 3000 + 8 * 2 * 3 + 4 * 3000)


def test_growth_failure_raises_typed_and_leaves_the_head_usable(monkeypatch):
    # Growing from 2 to 5 rows allocates the result (5, rows), then the staging rows (5, rows)
    # and the normed rows (5, cols). A MemoryError at any of them is a typed ResourceError and
    # the Head keeps working at every size (it used to keep half-grown buffers: ValueError).
    real_empty = np.empty
    h5 = hidden(5, 40)
    for fail_shape, nth in (((5, 1000), 1), ((5, 1000), 2), ((5, COLS), 1)):
        head, q, g = make_head(max_tokens=2)
        seen = []

        def failing_empty(shape, *a, fail_shape=fail_shape, nth=nth, **k):
            if tuple(np.atleast_1d(shape)) == fail_shape:
                seen.append(1)
                if len(seen) == nth:
                    raise MemoryError("simulated")
            return real_empty(shape, *a, **k)

        monkeypatch.setattr(np, "empty", failing_empty)
        with pytest.raises(lmtail.ResourceError) as ei:
            head.logits(h5)
        monkeypatch.setattr(np, "empty", real_empty)
        assert isinstance(ei.value, MemoryError)
        for T in (3, 1, 2, 5):  # every size works again, including the one that failed
            h = hidden(T, 41 + T)
            assert np.array_equal(bits(head.logits(h)), bits(manual(q, g, h)))
            assert head.greedy(h).tolist() == [int(np.argmax(r)) for r in manual(q, g, h)]


def test_boundary_arguments_raise_typed_errors(tmp_path):
    q = q5k_matrix(4, 256)
    with pytest.raises(lmtail.ParameterError, match="threads"):
        lmtail.Head(q, threads=2**40)
    with pytest.raises(lmtail.ParameterError, match="threads"):
        lmtail.Head(q, threads=1025)
    with pytest.raises(lmtail.ParameterError, match="threads"):
        ops.argmax(np.ones(4, np.float32), threads=2**40)
    head = lmtail.Head(q)
    with pytest.raises(lmtail.ParameterError, match="exclude"):
        head.greedy(np.ones(256, np.float32), exclude=5)
    with pytest.raises(lmtail.ParameterError, match="exclude"):
        ops.greedy_argmax(np.ones(4, np.float32), exclude=np.int64(1))
    with pytest.raises(lmtail.ParameterError, match="path"):
        lmtail.Head.from_gguf(None)
    with pytest.raises((lmtail.ResourceError, lmtail.ParameterError)):
        lmtail.Head(q5k_matrix(1000, 256), max_tokens=10**9)
    with pytest.raises(lmtail.ParameterError, match="max_tokens"):
        lmtail.Head(q, max_tokens=2**31)
    with pytest.raises(lmtail.ParameterError, match="logit_scale"):
        lmtail.Head(q, logit_scale=0.0)
    with pytest.raises(lmtail.ParameterError, match="softcap"):
        lmtail.Head(q, softcap=-1.0)
    # softcap == 0 still disables the cap; ops.softcap keeps "cap <= 0: scale only".
    x = np.ones(256, np.float32)
    nocap = lmtail.Head(q, logit_scale=3.0, softcap=0.0).logits(x)
    assert np.array_equal(bits(nocap), bits(ops.scale(ops.matvec_q5_k(q, x), 3.0)[None]))
    assert np.array_equal(bits(ops.softcap(x, 2.0, -1.0)), bits(ops.scale(x, 2.0)))

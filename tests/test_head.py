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
        with pytest.raises(lmtail.BackendError):
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


def test_retained_view_refilled_in_place_and_read_only():
    head, q, g = make_head()
    a = head.logits(hidden(2, 1))
    keep = a.copy()
    b = head.logits(hidden(2, 2))
    assert np.shares_memory(a, b)
    assert np.array_equal(a, b) and not np.array_equal(a, keep)
    with pytest.raises(ValueError):
        a[0, 0] = 1.0


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

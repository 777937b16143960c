"""I24 with activation outliers (csrc/cpu/i24_outliers.hpp), for the types whose default is I24 with
a per-block activation scale (Q4_0 per 32-block, Q4_K and Q5_K per 256-block).

A block whose elements are mostly far below its max gives up its largest elements (at most 2 per
32-block, 4 per 256-block, 32 per row); the row runs I24 with them zeroed and each is added back
per weight row as one f32 fma with the type's canonical weight, in increasing column. A row that
needs more runs the f32 kernel. Checked here bit for bit against a reconstruction in Python (the
routing rule, I24 of the zeroed row, exact fmas), across ISAs, thread counts and batches, and for
accuracy against float64 with massive activations."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from lmtail import _core

TYPES = {  # name: (ggml id, activation block, weight block, block bytes)
    "Q4_0": (2, 32, 32, 18),
    "Q4_K": (12, 256, 256, 144),
    "Q5_K": (13, 256, 256, 176),
}


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def quantize(tid, w):
    w = np.ascontiguousarray(w, np.float32)
    name = next(k for k, v in TYPES.items() if v[0] == tid)
    _, _, wb, bb = TYPES[name]
    out = np.zeros((w.shape[0], w.shape[1] // wb * bb), np.uint8)
    _core.quantize(tid, w, out, 0)
    return out


def dequantize(tid, q, cols):
    out = np.empty((q.shape[0], cols), np.float32)
    _core.dequantize(tid, np.ascontiguousarray(q), out, 0)
    return out


def matvec(tid, q, cols, x, threads=1, isa="auto", precision="default"):
    x2 = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    out = np.empty((x2.shape[0], q.shape[0]), np.float32)
    _core.matvec(q, tid, cols, x2, out, threads, isa, precision)
    return out


def taken_out(xrow, block):
    """The routing rule: the columns taken out of a row (increasing), or None for the f32 kernel."""
    per_block = 4 if block >= 256 else 2
    out = []
    for b0 in range(0, xrow.size, block):
        xb = xrow[b0 : b0 + block]
        if not np.all(np.isfinite(xb)):
            continue
        v = np.abs(xb).astype(np.float32)
        taken = []
        while True:
            amax = v.max()
            if amax == 0:
                break
            nz = np.count_nonzero(v)
            small = np.count_nonzero((v != 0) & (v * np.float32(8) < amax))
            if 2 * small <= nz:
                break
            if len(taken) == per_block or len(out) + len(taken) == 32:
                return None
            at = int(np.argmax(v))
            taken.append(b0 + at)
            v[at] = 0
        out += sorted(taken)
    return out


def f16(b, o):
    return np.float32(np.frombuffer(bytes(b[o : o + 2]), np.float16)[0])


def kscale_min(s, j):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def round_f32(fr):
    """Fraction -> nearest float32, ties to even."""
    f = np.float32(float(fr))
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - fr), int(np.array(c, np.float32).view(np.uint32)) & 1))


def canonical_weight(name, qrow, c):
    """The weight the type's f32 kernel multiplies, as an exact Fraction of a float32."""
    _, _, wb, bb = TYPES[name]
    b = qrow[(c // wb) * bb : (c // wb + 1) * bb]
    i = c % wb
    if name == "Q4_0":
        q = (b[2 + i] & 0xF) if i < 16 else (b[2 + i - 16] >> 4)
        return Fraction(float(np.float32(int(q) - 8) * f16(b, 0)))  # exact
    j, group, l, upper = i // 32, i >> 6, i & 31, (i >> 5) & 1
    sc, m = kscale_min(b[4:16], j)
    qs = b[16:] if name == "Q4_K" else b[48:]
    q = (qs[32 * group + l] >> 4) if upper else (qs[32 * group + l] & 0xF)
    if name == "Q5_K":
        q |= ((b[16 + l] >> (2 * group + upper)) & 1) << 4
    d1 = f16(b, 0) * np.float32(sc)
    m1 = f16(b, 2) * np.float32(m)
    return Fraction(float(round_f32(Fraction(int(q)) * Fraction(float(d1)) - Fraction(float(m1)))))


def expected_row(name, q, cols, xrow, cols_out):
    tid = TYPES[name][0]
    xz = xrow.copy()
    xz[cols_out] = 0
    assert taken_out(xz, TYPES[name][1]) == []  # the rest passes the rule as it is
    base = matvec(tid, q, cols, xz)[0]
    out = np.empty_like(base)
    for r in range(q.shape[0]):
        acc = Fraction(float(base[r]))
        for c in cols_out:
            acc = Fraction(float(round_f32(canonical_weight(name, q[r], c) * Fraction(float(xrow[c])) + acc)))
        out[r] = np.float32(float(acc))
    return out


def batch(name, cols, seed=3):
    """Rows: ordinary, one spike, three spikes of different size in different blocks, a spike on a
    column in every block (as many per row as blocks, within the row cap only for 256-blocks), too
    many spikes in one block (f32), and a sign-mixed pair in one block."""
    rng = np.random.default_rng(seed)
    blk = TYPES[name][1]
    x = rng.standard_normal((6, cols))
    x[1, 7] *= 300.0
    x[2, [3, cols // 2 + 1, cols - 2]] *= [1e3, -50.0, 2e4]
    x[3, 5::blk] *= 100.0
    x[4, 0 : min(blk, 64) : 4] *= 1e3  # more than the block's share
    x[5, [blk // 2, blk // 2 + 1]] *= [-700.0, 650.0]
    return x.astype(np.float32)


@pytest.mark.parametrize("name", list(TYPES))
def test_outliers_added_back_bit_for_bit(name):
    tid, ablk, _, _ = TYPES[name]
    cols = 640 if ablk == 32 else 1024
    rng = np.random.default_rng(11)
    q = quantize(tid, rng.standard_normal((37, cols)) * 0.02)
    x = batch(name, cols)
    got = matvec(tid, q, cols, x)
    f32 = matvec(tid, q, cols, x, precision="f32")
    routes = [taken_out(x[t], ablk) for t in range(x.shape[0])]
    assert routes[0] == [] or name == "Q4_0"  # (Gaussian 32-blocks may give up one by chance)
    assert routes[1] and 7 in routes[1]
    assert routes[4] is None
    for t, cols_out in enumerate(routes):
        if cols_out is None:
            assert np.array_equal(bits(got[t]), bits(f32[t])), t
        else:
            want = expected_row(name, q, cols, x[t], cols_out)
            assert np.array_equal(bits(got[t]), bits(want)), (t, cols_out)
            if cols_out:
                assert not np.array_equal(bits(got[t]), bits(f32[t]))


@pytest.mark.parametrize("name", list(TYPES))
def test_outlier_rows_same_bytes_any_isa_thread_count_and_batch(name):
    tid, ablk, _, _ = TYPES[name]
    cols = 640 if ablk == 32 else 1024
    rng = np.random.default_rng(12)
    q = quantize(tid, rng.standard_normal((150, cols)) * 0.02)  # several row tasks
    x = batch(name, cols, seed=4)
    ref = matvec(tid, q, cols, x, isa="scalar")
    for isa in ("avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"):
        if not _core.isa_available(isa):
            continue
        for threads in (1, 2):
            got = matvec(tid, q, cols, x, threads=threads, isa=isa)
            assert np.array_equal(bits(got), bits(ref)), (isa, threads)
    for t in range(x.shape[0]):
        assert np.array_equal(bits(matvec(tid, q, cols, x[t])[0]), bits(ref[t])), t
    sub = [5, 1, 4]
    assert np.array_equal(bits(matvec(tid, q, cols, x[sub], threads=2)), bits(ref[sub]))


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("ratio", [30.0, 300.0, 3000.0])
def test_massive_activations_normwise(name, ratio):
    # Hidden states with a few outlier channels (what real models feed the head) and weights
    # that are large in ordinary columns, where the outlier's block-mates lose bits under I24.
    tid, ablk, _, _ = TYPES[name]
    cols = 1536
    rng = np.random.default_rng(13)
    w = rng.standard_normal((96, cols)) * 0.02
    w[:, 1::97] *= 300.0
    x = rng.standard_normal((4, cols))
    x[:, [40, 555, 1200]] *= ratio  # never a spiky weight column
    q = quantize(tid, w)
    x = x.astype(np.float32)
    assert all(taken_out(x[t], ablk) for t in range(4))  # every row takes the outlier path
    want = x.astype(np.float64) @ dequantize(tid, q, cols).astype(np.float64).T
    got = matvec(tid, q, cols, x).astype(np.float64)
    err = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    assert err.max() <= 1e-6, err


@pytest.mark.parametrize("name", list(TYPES))
def test_outlier_rows_with_nonfinite_scales(name):
    # Rows whose scale is inf / NaN take the scalar add-back in a SIMD group (f16 NaN payloads
    # may differ between hardware and software conversion); every other logit keeps its bytes.
    tid, ablk, wblk, bb = TYPES[name]
    cols = 640 if ablk == 32 else 1024
    rng = np.random.default_rng(14)
    q = quantize(tid, rng.standard_normal((48, cols)) * 0.02)
    for r, h in ((3, 0x7E00), (20, 0x7C00), (33, 0xFC00)):  # NaN, +inf, -inf d in the outlier's block
        q[r, (7 // wblk) * bb : (7 // wblk) * bb + 2] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
    x = batch(name, cols, seed=6)[:3]
    ref = matvec(tid, q, cols, x, isa="scalar")
    for isa in ("avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"):
        if not _core.isa_available(isa):
            continue
        got = matvec(tid, q, cols, x, threads=2, isa=isa)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), isa
        fin = ~np.isnan(ref)
        assert np.array_equal(bits(got[fin]), bits(ref[fin])), isa
        assert not np.isfinite(got[:, [3, 20, 33]][1]).any()  # row 1's outlier (column 7) meets them

"""argmax, greedy_argmax and top-k: ties, NaN/Inf, exclusion, rows, chunk boundaries."""

import numpy as np
import pytest

import lmtail
from lmtail import ops
from _util import bits


def ref_argmax(x):
    """Lowest index of the maximum among non-NaN values; 0 when all are NaN."""
    ok = ~np.isnan(x)
    if not ok.any():
        return 0
    m = x[ok].max()
    return int(np.flatnonzero(ok & (x == m))[0])


def ref_topk(x, k):
    idx = np.arange(x.size)
    nan = np.isnan(x)
    # canonical: numbers by value desc, index asc; NaN last by index
    order = np.lexsort((idx, np.where(nan, 0, -np.nan_to_num(x, nan=0, posinf=np.inf, neginf=-np.inf)), nan))
    return order[:k].astype(np.uint32), x[order[:k]]


@pytest.mark.parametrize("n", [1, 7, 99, 1024, 4097, 65536 + 3, 202048])
def test_argmax_random_and_ties(n):
    rng = np.random.default_rng(n)
    x = rng.integers(-3, 4, n).astype(np.float32)  # heavy ties
    assert ops.argmax(x) == ref_argmax(x)
    y = rng.standard_normal(n).astype(np.float32)
    assert ops.argmax(y) == int(np.argmax(y))


def test_argmax_tie_across_chunk_boundary():
    x = np.zeros(202048, np.float32)
    x[200000] = 5.0
    x[65535] = 5.0
    x[65536] = 5.0
    assert ops.argmax(x) == 65535
    assert ops.greedy_argmax(x) == 65535
    for threads in (1, 2, 3):
        assert ops.argmax(x, threads=threads) == 65535


def test_argmax_nan_never_wins():
    assert ops.argmax(np.array([np.nan, 1.0, np.nan, 2.0], np.float32)) == 3
    assert ops.argmax(np.array([np.nan, -np.inf], np.float32)) == 1
    assert ops.argmax(np.array([np.nan, np.nan], np.float32)) == 0
    assert ops.argmax(np.array([-np.inf, -np.inf, -np.inf], np.float32)) == 0
    assert ops.argmax(np.array([1.0, np.inf, np.inf], np.float32)) == 1


def test_argmax_rows():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (9, 1000)).astype(np.float32)
    out = ops.argmax(x)
    assert out.dtype == np.uint32 and out.shape == (9,)
    assert [int(v) for v in out] == [ref_argmax(r) for r in x]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 17, 65536, 202047])
def test_greedy_fails_closed(bad, where):
    x = np.random.default_rng(1).standard_normal(202048).astype(np.float32)
    x[where] = bad
    with pytest.raises(lmtail.NonFiniteLogitsError):
        ops.greedy_argmax(x)
    # an excluded id is still checked: exclusion masks the choice, not the finite check
    with pytest.raises(lmtail.NonFiniteLogitsError):
        ops.greedy_argmax(x, exclude=[where])


def test_greedy_exclusion_masks_only_inside_reduction():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(50000).astype(np.float32)
    top = int(np.argmax(x))
    before = x.copy()
    second = int(np.argsort(-x, kind="stable")[1])
    assert ops.greedy_argmax(x) == top
    assert ops.greedy_argmax(x, exclude=[top]) == second
    assert ops.greedy_argmax(x, exclude=np.array([top, 5, 5], np.int64)) == second  # duplicates fine
    assert np.array_equal(bits(x), bits(before))  # logits untouched


def test_greedy_exclude_errors():
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(lmtail.ParameterError):
        ops.greedy_argmax(x, exclude=[0, 1, 2, 3])
    with pytest.raises(lmtail.ParameterError):
        ops.greedy_argmax(x, exclude=[4])
    with pytest.raises(lmtail.ParameterError):
        ops.greedy_argmax(x, exclude=[-1])
    with pytest.raises(lmtail.ParameterError):
        ops.greedy_argmax(x, exclude=[0.5])


def test_greedy_rows_and_ties():
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], np.float32)
    assert ops.greedy_argmax(x).tolist() == [1, 0, 0]
    assert ops.greedy_argmax(x, exclude=[0]).tolist() == [1, 1, 1]
    x[1, 2] = np.nan
    with pytest.raises(lmtail.NonFiniteLogitsError):
        ops.greedy_argmax(x)


def test_softcap_can_tie_distinct_logits_and_greedy_sees_the_tie():
    # 1000 and 2000 both cap to exactly 20.0f: greedy must pick the lower index of the capped row.
    x = np.array([0.5, 1000.0, 2000.0], np.float32)
    capped = ops.softcap(x, 1.0, 20.0)
    assert capped[1] == capped[2] == np.float32(20.0)
    assert ops.greedy_argmax(capped) == 1


@pytest.mark.parametrize("n,k", [(1, 1), (7, 3), (99, 99), (4097, 40), (202048, 40), (202048, 1000)])
def test_topk_matches_reference(n, k):
    rng = np.random.default_rng(n + k)
    x = rng.integers(-20, 20, n).astype(np.float32)  # many ties at the k-th boundary
    ids, vals = ops.topk(x, k)
    rid, rval = ref_topk(x, k)
    assert np.array_equal(ids, rid) and np.array_equal(bits(vals), bits(rval))


def test_topk_nan_inf_and_rows():
    x = np.array([[np.nan, 1, -np.inf, np.inf, 1, np.nan]], np.float32)
    ids, vals = ops.topk(x, 6)
    assert ids.tolist() == [[3, 1, 4, 2, 0, 5]]
    rng = np.random.default_rng(3)
    x = rng.integers(0, 10, (5, 300)).astype(np.float32)
    ids, vals = ops.topk(x, 17)
    assert ids.shape == (5, 17)
    for r in range(5):
        rid, rval = ref_topk(x[r], 17)
        assert np.array_equal(ids[r], rid)


def test_topk_errors():
    x = np.ones(10, np.float32)
    for k in (0, 11, -1, 2.5, True):
        with pytest.raises(lmtail.ParameterError):
            ops.topk(x, k)


def test_input_validation():
    with pytest.raises(lmtail.DTypeError):
        ops.argmax(np.ones(4, np.float64))
    with pytest.raises(lmtail.DTypeError):
        ops.argmax([1.0, 2.0])
    with pytest.raises(lmtail.ShapeError):
        ops.argmax(np.ones((2, 2, 2), np.float32))
    with pytest.raises(lmtail.ShapeError):
        ops.argmax(np.ones(0, np.float32))
    with pytest.raises(lmtail.BackendError):
        ops.argmax(np.ones(4, np.float32), backend="metal-nope")

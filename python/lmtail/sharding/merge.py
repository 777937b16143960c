"""The exact merge of per-shard candidates: pure functions over (ids, values) arrays.

Every shard of a vocabulary-split head hands back its best candidates with *global* ids; the
host keeps the k best of their union. The order is lmtail's selection order, the one ``Head``'s
argmax and top-k use on every backend: value descending, ``-0 == +0``, and among equal values
the lowest id first. It is a strict total order on (value, id) pairs with distinct ids, coded
here as one int64 key per pair (larger key = better), so "the k best of the union" is a sort
with no tie left to break. Values are handed through unchanged (a ``-0.0`` stays ``-0.0``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import NonFiniteLogitsError, ParameterError, ShapeError

_ID_LIMIT = 2**31  # head rows are < 2^31 (weight_array); ids then fit the key's low 32 bits


def selection_keys(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int64 keys ordering (value, id) pairs as lmtail's selection does: a larger key is a larger
    value, or an equal value (``-0 == +0``) with a lower id. Values must be finite float32 and
    ids in [0, 2^31): then distinct ids give distinct keys."""
    v = np.asarray(values, dtype=np.float32) + np.float32(0.0)  # -0 + 0 = +0: one key for both zeros
    b = v.view(np.int32).astype(np.int64)
    # float bits -> an integer with the float's order: negative floats count down from -1
    mono = np.where(b >= 0, b, b ^ 0x7FFFFFFF)
    return (mono << 32) | (0xFFFFFFFF - np.asarray(ids, dtype=np.int64))


def _parts(ids, values, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-shard (T, m_s) candidate arrays (or one (T, M) / (S, T, m) array) along
    the candidate axis: (T, M) int64 ids, (T, M) float32 values. Checked: shapes, integer ids in
    [0, 2^31) and unique per row, finite values."""
    if isinstance(ids, np.ndarray) and ids.ndim == 3:
        ids = list(ids)
    if isinstance(values, np.ndarray) and values.ndim == 3:
        values = list(values)
    if not isinstance(ids, (list, tuple)):
        ids = [ids]
    if not isinstance(values, (list, tuple)):
        values = [values]
    if len(ids) != len(values) or not ids:
        raise ShapeError(f"{what}: expected as many id arrays as value arrays (>= 1); found {len(ids)} and {len(values)}")
    I, V = [], []
    for s, (i, v) in enumerate(zip(ids, values)):
        i, v = np.asarray(i), np.asarray(v)
        if i.ndim == 1:
            i, v = i[:, None], v.reshape(-1, 1) if v.ndim == 1 else v
        if i.ndim != 2 or v.shape != i.shape:
            raise ShapeError(f"{what}: shard {s}: expected (T, m) ids and values of one shape; found {i.shape} and {v.shape}")
        if i.dtype.kind not in "iu":
            raise ParameterError(f"{what}: shard {s}: expected integer ids; found {i.dtype}")
        if v.dtype != np.float32:
            raise ParameterError(f"{what}: shard {s}: expected float32 values; found {v.dtype}")
        I.append(i.astype(np.int64, copy=False))
        V.append(v)
    T = I[0].shape[0]
    if any(i.shape[0] != T for i in I):
        raise ShapeError(f"{what}: every shard must give the same number of rows; found {[i.shape[0] for i in I]}")
    ids2 = np.concatenate(I, axis=1)
    vals2 = np.concatenate(V, axis=1)
    if ids2.size:
        if ids2.min() < 0 or ids2.max() >= _ID_LIMIT:
            bad = ids2[(ids2 < 0) | (ids2 >= _ID_LIMIT)][0]
            raise ParameterError(f"{what}: token ids must lie in [0, 2^31); found {int(bad)}")
        if not np.isfinite(vals2).all():
            # a shard that let a non-finite logit through did not fail closed: neither does the merge
            t, j = (int(x) for x in np.argwhere(~np.isfinite(vals2))[0])
            raise NonFiniteLogitsError(f"{what}: row {t}: non-finite candidate value {vals2[t, j]} (id {ids2[t, j]})")
        srt = np.sort(ids2, axis=1)
        if (srt[:, 1:] == srt[:, :-1]).any():
            raise ParameterError(f"{what}: a token id appears in two shards' candidates (overlapping shards?)")
    return ids2, vals2


def merge_topk(ids, values, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of the shards' candidates, as the unsharded head's ``topk`` would give them.

    ``ids`` / ``values``: one (T, m_s) array per shard (a list, or an (S, T, m) array), global
    integer ids and float32 values; each shard's list may have any length and order (m_s = 0 for
    a shard with nothing to offer). Returns fresh (ids uint32 (T, k), values float32 (T, k)) in
    canonical order: value descending, ``-0 == +0``, lowest id first among equal values.

    Exact: if each shard gives its own top min(k, rows_s) (``Head.topk``), the result equals the
    top k of the whole row, bytes included (see docs: a candidate of the global top k has fewer
    than k better tokens anywhere, so fewer than k in its own shard). Raises ParameterError for
    k < 1 or more than the candidates, a token id twice or out of [0, 2^31), non-float32 values;
    NonFiniteLogitsError for a non-finite value (fail closed).
    """
    ids2, vals2 = _parts(ids, values, "merge_topk")
    M = ids2.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= M:
        raise ParameterError(f"merge_topk: k: expected an integer in [1, {M}] (the candidates per row); found {k!r}")
    return _select(ids2, vals2, int(k))


def _select(ids2: np.ndarray, vals2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k first of (T, M) finite candidates with distinct ids in selection order.

    ``np.lexsort`` by (-value, id) is that order: floats compare -0 == +0, and no NaN is left
    (checked, or a Head's output); the same order as ``selection_keys`` in fewer numpy calls
    (the merge sits on the decode path: its host wall is what the shards pay for)."""
    order = np.lexsort((ids2, -vals2), axis=1)[:, :k]
    return (np.take_along_axis(ids2, order, axis=1).astype(np.uint32),
            np.take_along_axis(vals2, order, axis=1))


def merge_trusted(ids: list, values: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """merge_topk without the checks, for candidates a Head produced (finite, distinct global ids):
    ShardedHead's merge."""
    if len(ids) == 1:
        return ids[0][:, :k].astype(np.uint32), np.ascontiguousarray(values[0][:, :k])
    if ids[0].shape[0] == 1:  # one row: flat arrays, plain indexing (take_along_axis costs ~3 us)
        i, v = np.concatenate([x[0] for x in ids]), np.concatenate([x[0] for x in values])
        order = np.lexsort((i, -v))[:k]
        return i[order].astype(np.uint32)[None], v[order][None]
    return _select(np.concatenate(ids, axis=1), np.concatenate(values, axis=1), k)


def greedy_trusted(ids: list, values: list) -> np.ndarray:
    """merge_greedy without the checks, for (T,) candidates a Head produced."""
    if len(ids) == 1:
        return ids[0].astype(np.uint32)
    if ids[0].shape[0] == 1:  # one row: a Python loop beats numpy's per-call cost
        best_v, best_i = values[0][0], ids[0][0]
        for i, v in zip(ids[1:], values[1:]):
            # float comparison: -0 == +0; on equal values the lower global id wins
            if v[0] > best_v or (v[0] == best_v and i[0] < best_i):
                best_v, best_i = v[0], i[0]
        return np.array([best_i], np.uint32)
    return _select(np.stack(ids, axis=1), np.stack(values, axis=1), 1)[0][:, 0]


def merge_greedy(ids, values) -> np.ndarray:
    """The greedy token per row from each shard's greedy candidate: (T,) uint32.

    ``ids`` / ``values``: per shard a (T,) (or (T, m)) array of global ids and float32 values (the
    shard's argmax and its logit). The largest value wins, the lowest id among equal values
    (``-0 == +0``): the unsharded ``Head.greedy``'s rule. Checks as :func:`merge_topk`.
    """
    ids2, vals2 = _parts(ids, values, "merge_greedy")
    if ids2.shape[1] == 0:
        raise ParameterError("merge_greedy: no candidate in any shard")
    return _select(ids2, vals2, 1)[0][:, 0]


def check_splits(splits: Sequence[int], rows: int) -> tuple[int, ...]:
    """Row boundaries ``[0, r1, ..., rows]``, strictly increasing integers: the tuple, or a
    ParameterError saying which rule failed."""
    if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
        raise ParameterError(f"splits: expected a sequence of row boundaries [0, r1, ..., {rows}]; found {splits!r}")
    sp = list(splits)
    if any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in sp):
        raise ParameterError(f"splits: expected integer row boundaries; found {sp!r}")
    sp = [int(r) for r in sp]
    if len(sp) < 2:
        raise ParameterError(f"splits: expected at least two boundaries [0, ..., {rows}] (one shard); found {sp!r}")
    if sp[0] != 0 or sp[-1] != rows:
        raise ParameterError(f"splits: expected to start at 0 and end at the head's rows ({rows}); found {sp!r}")
    bad = [i for i in range(1, len(sp)) if sp[i] <= sp[i - 1]]
    if bad:
        i = bad[0]
        raise ParameterError(f"splits: expected strictly increasing boundaries (every shard non-empty); found "
                             f"{sp[i - 1]} then {sp[i]} at position {i}")
    return tuple(sp)


__all__ = ["merge_topk", "merge_greedy", "selection_keys", "check_splits"]

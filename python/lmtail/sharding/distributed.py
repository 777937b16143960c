"""The shard merge across processes: one rank per GPU (tensor-parallel engines), torch.distributed.

Each rank holds its head shard's top candidates with global ids; every rank all-gathers only
those pairs, packed as one int64 each (the float32 value's bits high, the int32 id low: 8 bytes
per candidate, k * 8 per rank and row, instead of 4 * rows_r of logits) and applies the same
merge as :func:`lmtail.sharding.merge_topk`. PyTorch is imported only when the function is
called: it is an optional dependency of this path alone.
"""

from __future__ import annotations

import numpy as np

from ..errors import NonFiniteLogitsError, ParameterError, ShapeError
from .merge import merge_topk

_PAD = 0xFFFFFFFF  # low 32 bits of a padding entry (real ids are < 2^31)
_TWO32 = 1 << 32


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover - exercised only where torch is absent
        raise ImportError("lmtail.sharding.merge_topk_distributed needs PyTorch (torch.distributed); "
                          "install torch, or merge per-shard candidates in one process with merge_topk") from e
    return torch, dist


def _pack(torch, ids, values, k: int):
    """(T, k) int64: value bits * 2^32 + id, the local candidates cut or padded to k."""
    T, m = ids.shape
    if m > k:
        # more than k local candidates: keep this rank's own k best (exact: the global top k
        # holds at most k of them, and they are this rank's best)
        top = torch.topk(_keys(torch, ids.to(torch.int64), values), k, dim=1).indices
        ids, values = ids.gather(1, top), values.gather(1, top)
        m = k
    bits = values.contiguous().view(torch.int32).to(torch.int64)
    packed = bits * _TWO32 + (ids.to(torch.int64) & 0xFFFFFFFF)
    if m < k:
        pad = torch.full((T, k - m), _PAD, dtype=torch.int64, device=packed.device)
        packed = torch.cat([packed, pad], dim=1)
    return packed.contiguous()


def _keys(torch, ids, values):
    """selection_keys in torch: value descending, -0 == +0, lowest id first, as one int64."""
    v = values + 0.0  # -0 + 0 = +0
    b = v.contiguous().view(torch.int32).to(torch.int64)
    mono = torch.where(b >= 0, b, b ^ 0x7FFFFFFF)
    return mono * _TWO32 + (0xFFFFFFFF - ids)


def _unpack(torch, g):
    lo = g & 0xFFFFFFFF
    bits = (g >> 32).to(torch.int32)  # arithmetic shift: the value's bits come back with their sign
    return lo, bits.view(torch.float32)


def _merge_packed(torch, g, k: int):
    """(T, M) gathered packed candidates -> (ids int64 (T, k), values float32 (T, k)) in torch,
    on g's device; the same order as merge_topk. Raises the same typed errors (on every rank)."""
    lo, vals = _unpack(torch, g)
    real = lo != _PAD
    s = torch.sort(torch.where(real, lo, -1), dim=1).values
    # every check in one tensor: one device-to-host copy (one synchronisation) per call
    flags = torch.stack([real.sum(dim=1).min(),
                         (~torch.isfinite(vals) & real).any().to(torch.int64),
                         ((lo >= 2**31) & real).any().to(torch.int64),
                         ((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)).any().to(torch.int64)]).tolist()
    if flags[0] < k:
        raise ParameterError(f"merge_topk_distributed: k={k} but a row has only {flags[0]} candidates over all ranks")
    if flags[1]:
        raise NonFiniteLogitsError("merge_topk_distributed: a rank's candidate value is non-finite (its head did not fail closed)")
    if flags[2]:
        raise ParameterError("merge_topk_distributed: token ids must lie in [0, 2^31)")
    if flags[3]:
        raise ParameterError("merge_topk_distributed: a token id appears in two ranks' candidates (overlapping shards?)")
    keys = torch.where(real, _keys(torch, lo, vals), torch.iinfo(torch.int64).min)
    idx = torch.topk(keys, k, dim=1, largest=True, sorted=True).indices
    return lo.gather(1, idx), vals.gather(1, idx)


def merge_topk_distributed(ids, values, k: int, *, group=None):
    """The k best candidates over every rank of a ``torch.distributed`` group, on every rank.

    Each rank passes its shard's candidates: ``ids`` (T, m) integer *global* token ids in
    [0, 2^31) and ``values`` (T, m) float32 logits, any order, m <= k allowed (a shard with fewer
    rows than k); T must be equal on every rank. One ``all_gather`` moves k * 8 bytes per rank and
    row (value bits and id packed in an int64; a rank with m < k pads). Returns, on every rank,
    the k best of the union in canonical order (value descending, ``-0 == +0``, lowest id first
    among equal values): exactly :func:`lmtail.sharding.merge_topk` of all ranks' candidates,
    hence the unsharded head's top k when each rank passes its own ``Head.topk(hidden,
    min(k, rows_r))`` with its row offset added. Greedy: k = 1 with each rank's greedy candidate.

    numpy arrays (or CPU tensors): gathered over the group (gloo), merged on the host by
    ``merge_topk``; numpy in gives numpy out (ids uint32, values float32), tensors give tensors
    (ids int64, values float32). CUDA tensors (NCCL): gathered and merged on their device
    (``torch.topk`` over the same int64 keys), nothing copied to the host but a few check flags.

    Errors: a wrong shape or dtype raises on the rank that has it before the collective (the
    other ranks then wait in it, as with any collective given bad arguments). Candidate data --
    a non-finite value (NonFiniteLogitsError: fail closed), an id out of range or on two ranks,
    fewer than k candidates in all -- is checked after the gather, so every rank raises the same.
    """
    torch, dist = _torch()
    numpy_in = isinstance(ids, np.ndarray) or isinstance(values, np.ndarray)
    ti = torch.as_tensor(np.asarray(ids)) if isinstance(ids, np.ndarray) else ids
    tv = torch.as_tensor(np.asarray(values)) if isinstance(values, np.ndarray) else values
    if not (isinstance(ti, torch.Tensor) and isinstance(tv, torch.Tensor)):
        raise ParameterError(f"merge_topk_distributed: expected numpy arrays or torch tensors; found "
                             f"{type(ids).__name__} and {type(values).__name__}")
    if ti.dim() == 1:
        ti, tv = ti[:, None], tv.reshape(-1, 1)
    if ti.dim() != 2 or tuple(tv.shape) != tuple(ti.shape):
        raise ShapeError(f"merge_topk_distributed: expected (T, m) ids and values of one shape; found "
                         f"{tuple(ti.shape)} and {tuple(tv.shape)}")
    if ti.shape[0] == 0:
        raise ShapeError("merge_topk_distributed: expected at least one row (T >= 1)")
    if ti.dtype.is_floating_point or ti.dtype.is_complex or ti.dtype == torch.bool:
        raise ParameterError(f"merge_topk_distributed: expected integer ids; found {ti.dtype}")
    if tv.dtype != torch.float32:
        raise ParameterError(f"merge_topk_distributed: expected float32 values; found {tv.dtype}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"merge_topk_distributed: k: expected an integer >= 1; found {k!r}")
    k = int(k)
    if tv.device != ti.device:
        raise ParameterError(f"merge_topk_distributed: ids on {ti.device} but values on {tv.device}")
    packed = _pack(torch, ti, tv, k)
    world = dist.get_world_size(group)
    parts = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(parts, packed, group=group)
    g = torch.cat(parts, dim=1)  # (T, world * k): rank r's candidates in columns [r k, (r + 1) k)
    if g.device.type == "cuda":
        return _merge_packed(torch, g, k)
    # Host: the pure merge, with padding dropped per row.
    lo, vals = (x.numpy() for x in _unpack(torch, g))
    real = lo != _PAD
    counts = real.sum(axis=1)
    if g.shape[0] and counts.min() < k:
        raise ParameterError(f"merge_topk_distributed: k={k} but a row has only {int(counts.min())} candidates over all ranks")
    rows_i = [lo[t][real[t]] for t in range(g.shape[0])]
    rows_v = [vals[t][real[t]] for t in range(g.shape[0])]
    if g.shape[0] and (counts == counts[0]).all():
        mi, mv = merge_topk(np.stack(rows_i), np.stack(rows_v), k)
    else:  # rows with different padding: merge row by row
        outs = [merge_topk(i[None], v[None], k) for i, v in zip(rows_i, rows_v)]
        mi = np.concatenate([o[0] for o in outs]) if outs else np.zeros((0, k), np.uint32)
        mv = np.concatenate([o[1] for o in outs]) if outs else np.zeros((0, k), np.float32)
    if numpy_in:
        return mi, mv
    return torch.from_numpy(mi.astype(np.int64)), torch.from_numpy(mv)


__all__ = ["merge_topk_distributed"]

"""A vocabulary-sharded LM head: shards compute their rows' candidates, the host merges them exactly.

* :class:`ShardedHead` -- one process, N shards (CPU shards, CUDA streams), the methods of
  :class:`lmtail.Head` with results equal to the unsharded head's, bytes included.
* :func:`merge_topk`, :func:`merge_greedy` -- the merge itself, pure functions over per-shard
  (ids, values) arrays (lmtail's selection order: value descending, -0 == +0, lowest id first).
* :func:`merge_topk_distributed` -- the same merge across the ranks of a ``torch.distributed``
  group (one process per GPU, NCCL; gloo on the CPU), all-gathering 8 bytes per candidate
  instead of the logits. PyTorch is imported only when it is called.
"""

from __future__ import annotations

from .distributed import merge_topk_distributed
from .head import ShardedHead
from .merge import check_splits, merge_greedy, merge_topk, selection_keys

__all__ = ["ShardedHead", "merge_topk", "merge_greedy", "merge_topk_distributed", "selection_keys", "check_splits"]

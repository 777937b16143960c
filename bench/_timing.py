"""Shared timing helper of the bench scripts (run them from the repository root or bench/)."""

from __future__ import annotations

import statistics
import time


def median_time(fn, reps: int, warmup: int = 0) -> float:
    """Median wall time of ``fn()`` in seconds over ``reps`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)

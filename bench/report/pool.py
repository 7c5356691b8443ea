"""Fork-based parallel map for the report's two costly, independent loops (per-run trace
reduction and per-kind figures). Workers inherit the inputs through fork, so only the
results are pickled; BENCH_REPORT_JOBS=1 runs everything in-process."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

# Set just before the pool forks; the workers read it instead of unpickling the inputs.
_TASK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def jobs() -> int:
    """Worker processes: BENCH_REPORT_JOBS, else up to 2 (one per core on small machines)."""
    env = os.environ.get("BENCH_REPORT_JOBS", "")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"BENCH_REPORT_JOBS={env!r}: expected a positive integer")
        return int(env)
    return max(1, min(2, os.cpu_count() or 1))


def _call(i: int) -> Any:
    fn, items = _TASK
    return fn(items[i])


def fork_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """[fn(x) for x in items], spread over jobs() forked workers when that can help."""
    global _TASK
    n = min(jobs(), len(items))
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        return [fn(x) for x in items]
    _TASK = (fn, items)
    try:
        with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as pool:
            return list(pool.map(_call, range(len(items)), chunksize=max(1, len(items) // (4 * n))))
    finally:
        _TASK = None

"""Run a compiled kernel over disjoint parts of one batch on a few threads.

Kernels release the GIL, so plain threads run them in parallel. Work is split by hash-index
sub-table (``sub_ranges``): all copies of an id fall in one sub-table, hence one thread, so
threads never write the same row or slot, and results do not depend on the thread count.
Batches too small to pay for a thread hop run on the caller's thread.
"""

import os
from concurrent.futures import ThreadPoolExecutor

from cardinal.embedding.index_kernels import N_SUB

MIN_PER_THREAD = 8192
_threads = max(1, min(8, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None


def set_threads(n: int) -> None:
    """Threads per kernel call (default: cores, at most 8)."""
    global _threads, _pool
    if n < 1:
        raise ValueError(f"kernel threads must be >= 1, got {n}")
    _threads = n
    if _pool is not None:
        _pool.shutdown()
        _pool = None


def _parts(n_work: int) -> int:
    return max(1, min(_threads, n_work // MIN_PER_THREAD))


def _run(fn, ranges) -> None:
    global _pool
    if len(ranges) == 1:
        fn(*ranges[0])
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="cardinal-kernel")
    for f in [_pool.submit(fn, lo, hi) for lo, hi in ranges]:
        f.result()


def over_subs(n_work: int, fn) -> None:
    """fn(lo, hi) for sub-table ranges covering [0, N_SUB)."""
    k = _parts(n_work)
    _run(fn, [(N_SUB * i // k, N_SUB * (i + 1) // k) for i in range(k)])


def over_rows(start: int, stop: int, fn) -> None:
    """fn(lo, hi) for row ranges covering [start, stop)."""
    k = _parts(stop - start)
    n = stop - start
    _run(fn, [(start + n * i // k, start + n * (i + 1) // k) for i in range(k)])

"""Run a compiled kernel over disjoint parts of one batch on a few threads.

Kernels release the GIL, so plain threads run them in parallel. Every caller splits its work
so that results do not depend on the thread count: the table kernels that write the index by
hash-index sub-table (``over_slots`` over ``N_SUB``: all copies of an id fall in one sub-table,
hence one thread, so threads never write the same row or slot), its lookups by positions
(``over_rows``: each writes only its own answers, so no cache line ping-pongs between threads),
pooling by bags or by rows (``over_parts``), Saec's clustering by rows (``over_rows``). Below every part that runs kernels, it imports none of them. The caller's thread
runs the first part itself; the pool holds the others. Batches too small to pay for a thread
hop run on the caller's thread alone.

One budget: ``set_threads(n)`` is the number of threads (the caller's included) a kernel call
may use; the trainer sets it with torch's and numba's from ``train.threads``.
"""

import os
from concurrent.futures import ThreadPoolExecutor

MIN_PER_THREAD = 8192


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_threads = max(1, min(8, available_cores()))
_pool: ThreadPoolExecutor | None = None


def set_threads(n: int) -> None:
    """Threads per kernel call, the caller's included (default: cores, at most 8)."""
    global _threads, _pool
    if n < 1:
        raise ValueError(f"kernel threads must be >= 1, got {n}")
    _threads = n
    if _pool is not None:
        _pool.shutdown()
        _pool = None


def threads() -> int:
    """Threads per kernel call, as last set."""
    return _threads


def parts(n_work: int, min_per_thread: int = MIN_PER_THREAD) -> int:
    """How many threads ``n_work`` units pay for: about ``min_per_thread`` each, at most the budget."""
    return max(1, min(_threads, n_work // min_per_thread))


def _run(fn, args: list[tuple]) -> None:
    """fn(*a) for every a in args: the first on this thread, the rest on the pool; waits for all."""
    global _pool
    if len(args) == 1:
        fn(*args[0])
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max(1, _threads - 1), thread_name_prefix="cardinal-kernel")
    futures = [_pool.submit(fn, *a) for a in args[1:]]
    try:
        fn(*args[0])
    finally:
        for f in futures:
            f.result()


def over_slots(n_slots: int, n_work: int, fn) -> None:
    """fn(lo, hi) for ranges covering [0, n_slots) (a hash index's sub-tables), as many as
    ``n_work`` units pay for."""
    k = parts(n_work)
    _run(fn, [(n_slots * i // k, n_slots * (i + 1) // k) for i in range(k)])


def over_rows(start: int, stop: int, fn) -> None:
    """fn(lo, hi) for row ranges covering [start, stop)."""
    k = parts(stop - start)
    n = stop - start
    _run(fn, [(start + n * i // k, start + n * (i + 1) // k) for i in range(k)])


def over_parts(n_work: int, fn, min_per_thread: int = MIN_PER_THREAD) -> None:
    """fn(part, n_parts) for part in 0..n_parts-1, n_parts = parts(n_work, min_per_thread);
    the kernel picks its share from (part, n_parts)."""
    each(parts(n_work, min_per_thread), fn)


def each(n_parts: int, fn) -> None:
    """fn(part, n_parts) for part in 0..n_parts-1 (a split the caller already chose)."""
    _run(fn, [(i, n_parts) for i in range(n_parts)])

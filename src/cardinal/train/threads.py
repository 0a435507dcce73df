"""One thread budget for a worker: torch, Cardinal's kernels and numba share ``train.threads``.

The worker's phases take turns: dedup and pooling (Cardinal's kernel threads,
``cardinal/parallel.py``), then the dense forward and backward (torch's intra-op threads). So
each gets the whole budget. Embedded servers do not take turns with them: the shards apply
the last step's pushes and serve the next batch's pulls (on the kernel threads) while torch
computes. Both at the budget of every core oversubscribe the machine, and torch's parallel
regions then wait for descheduled threads at every barrier: on 16 cores one process trained at
46,552 samples/s with 16 threads and 121,216 with 8 (``benchmarks/results/device/``). So with
embedded servers the budget is half the cores: at least 2 for torch (one torch thread lost a quarter
of the samples/s on 2 cores), at least 1 for the kernels, so that on 2 or 3 cores torch's idle
threads, which spin between parallel regions, do not hold the core a kernel's second part waits
for (``benchmarks/results/kernel_threads.md``). Only the batch prefetcher (one thread, parsing while
the step runs) lies outside it.
"""

import os

import numba
import torch

from cardinal import parallel


def budget(threads: int, embedded: bool = False) -> int:
    """``threads``, or for 0 the cores this worker may use: its launcher's share when one set
    OMP_NUM_THREADS (``cardinal launch`` splits the machine among its local workers), else the
    cores in this process's CPU affinity, split among LOCAL_WORLD_SIZE local workers (torchrun
    sets OMP_NUM_THREADS=1 for several local workers whatever the cores: that is not a share);
    half of them, at least 2, with ``embedded`` servers working beside the step (this module's
    docstring)."""
    if threads:
        return _checked(threads)
    cores = _share()
    return max(min(2, cores), cores // 2) if embedded else cores


def kernel_budget(threads: int, embedded: bool = False) -> int:
    """Cardinal's kernel threads: ``budget``'s, but with ``embedded`` servers and no explicit
    ``threads``, half the cores at least 1 (this module's docstring)."""
    if threads or not embedded:
        return budget(threads, embedded)
    return max(1, _share() // 2)


def _checked(threads: int) -> int:
    if threads < 0:
        raise ValueError(f"train.threads must be >= 0 (0: the cores this process may use), got {threads}")
    return threads


def _share() -> int:
    """The cores this worker may use (``budget`` for 0)."""
    share = os.environ.get("OMP_NUM_THREADS", "")
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    local = int(local) if local.isdigit() and int(local) > 0 else 1
    if share.isdigit() and int(share) > 0 and not (share == "1" and local > 1):
        return int(share)
    return max(1, parallel.available_cores() // local)


def apply(threads: int, embedded: bool = False) -> int:
    """Set torch's thread count to ``budget(threads, embedded)`` and Cardinal's kernel and numba's to
    ``kernel_budget(threads, embedded)``; returns torch's."""
    n, kernels = budget(threads, embedded), kernel_budget(threads, embedded)
    torch.set_num_threads(n)
    parallel.set_threads(kernels)
    numba.set_num_threads(min(kernels, numba.config.NUMBA_NUM_THREADS))  # numba cannot go past its start-up pool
    return n

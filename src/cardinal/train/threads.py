"""One thread budget for a worker: torch, Cardinal's kernels and numba share ``train.threads``.

The worker's phases take turns: dedup and pooling (Cardinal's kernel threads,
``cardinal/parallel.py``), then the dense forward and backward (torch's intra-op threads). So
each gets the whole budget. Embedded servers do not take turns with them: the shards apply
the last step's pushes and serve the next batch's pulls (on the kernel threads) while torch
computes. Both at the budget of every core oversubscribe the machine, and torch's parallel
regions then wait for descheduled threads at every barrier: on 16 cores one process trained at
46,552 samples/s with 16 threads and 121,216 with 8 (``benchmarks/results/device/``). So with
embedded servers the budget is half the cores (at least 2, or all of fewer); only the batch
prefetcher (one thread, parsing while the step runs) lies outside it.
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
    half of them with ``embedded`` servers working beside the step (this module's docstring)."""
    if threads < 0:
        raise ValueError(f"train.threads must be >= 0 (0: the cores this process may use), got {threads}")
    if threads:
        return threads
    share = os.environ.get("OMP_NUM_THREADS", "")
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    local = int(local) if local.isdigit() and int(local) > 0 else 1
    if share.isdigit() and int(share) > 0 and not (share == "1" and local > 1):
        cores = int(share)
    else:
        cores = max(1, parallel.available_cores() // local)
    return max(min(2, cores), cores // 2) if embedded else cores


def apply(threads: int, embedded: bool = False) -> int:
    """Set torch's, Cardinal's kernel and numba's thread counts to ``budget(threads, embedded)``; returns it."""
    n = budget(threads, embedded)
    torch.set_num_threads(n)
    parallel.set_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # numba cannot go past its start-up pool
    return n

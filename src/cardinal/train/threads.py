"""One thread budget for a worker: torch, Cardinal's kernels and numba share ``train.threads``.

The phases of a step take turns on the cores rather than running at once: dedup and pooling
(Cardinal's kernel threads, ``cardinal/parallel.py``), then the dense forward and backward
(torch's intra-op threads), then pushes (the embedded shards' kernels, on the same kernel
threads). So each gets the whole budget, and the budget is the cores this worker may use;
only the batch prefetcher (one thread, parsing while the step runs) lies outside it.
"""

import os

import numba
import torch

from cardinal import parallel


def budget(threads: int) -> int:
    """``threads``, or for 0 the cores this worker may use: its launcher's share when one set
    OMP_NUM_THREADS (``cardinal launch`` splits the machine among its local workers), else the
    cores in this process's CPU affinity, split among LOCAL_WORLD_SIZE local workers (torchrun
    sets OMP_NUM_THREADS=1 for several local workers whatever the cores: that is not a share)."""
    if threads < 0:
        raise ValueError(f"train.threads must be >= 0 (0: the cores this process may use), got {threads}")
    if threads:
        return threads
    share = os.environ.get("OMP_NUM_THREADS", "")
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    local = int(local) if local.isdigit() and int(local) > 0 else 1
    if share.isdigit() and int(share) > 0 and not (share == "1" and local > 1):
        return int(share)
    return max(1, parallel.available_cores() // local)


def apply(threads: int) -> int:
    """Set torch's, Cardinal's kernel and numba's thread counts to ``budget(threads)``; returns it."""
    n = budget(threads)
    torch.set_num_threads(n)
    parallel.set_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # numba cannot go past its start-up pool
    return n

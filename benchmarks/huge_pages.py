"""Tensors on transparent huge pages, for baselines measured beside Cardinal's tables.

Cardinal's arenas ask for huge pages (``embedding/arena.py``: ``MADV_HUGEPAGE``), so a random row
read costs one TLB entry per 2 MiB. Where the kernel's THP mode is ``madvise`` (this machine's:
``/sys/kernel/mm/transparent_hugepage/enabled``), a torch or numpy table gets 4 KiB pages unless
asked, and a baseline beside Cardinal would pay TLB misses Cardinal does not; under ``always`` it
gets huge pages unasked. ``huge_like`` gives a baseline the same pages as Cardinal's tables.
"""

import mmap

import numpy as np
import torch

HUGE = 2 << 20


def huge_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised array on an anonymous map that asks for huge pages, 2 MiB aligned."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    m = mmap.mmap(-1, nbytes + HUGE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    base = np.frombuffer(m, np.uint8)  # holds the map
    offset = -base.ctypes.data % HUGE
    return base[offset:offset + nbytes].view(dtype).reshape(shape)


def huge_like(t: torch.Tensor) -> torch.Tensor:
    """A float32 CPU copy of ``t`` on huge pages (written here, so the pages are huge from the start)."""
    out = torch.from_numpy(huge_empty(tuple(t.shape), np.float32))
    out.copy_(t)
    return out

"""Keep freed message buffers in the process instead of handing them back to the kernel.

Every pull reply is a few MiB, allocated, filled, sent and freed: with glibc's defaults the
freed memory goes back to the kernel at once (blocks over the mmap threshold are unmapped,
and the top of a thread's heap is trimmed), so the next reply page-faults all of it in again:
on the loopback benchmark at dim 64, a server took about 90,000 page faults (350 MB) for 64
replies of 4 MB without this and next to none with it, and its time per pull roughly halved.
Raising both thresholds once per process lets those buffers be reused.

Only servers do this: the settings are process-wide and keep every thread's freed blocks of
up to 32 MiB resident, not only messages. In a training worker (torch, numpy, readers) 8
threads freeing 100 MiB of 4 MiB arrays each kept about 680 MiB instead of 36, so a gRPC
client leaves its process's allocator as it found it.

glibc only: elsewhere (musl, macOS) this does nothing and says so through its result.

Under a ``ps.memory.budget`` what the heap keeps is part of what the process holds
(``ps/server/process_memory.py``): each thread's arena keeps its own freed blocks, so the arenas are
capped at ARENAS and each keeps at most a 16th of the budget: a server with a disk tier at a
64 MiB budget peaked at 1,260 MB with glibc's arenas (up to 8 per core: gRPC's and RocksDB's
threads) and at 702 MB with 2 (benchmarks/server_rss.py --budgets-mib 64 --steps 20). Blocks
freed in the middle of a heap stay resident whatever the thresholds, so a server under a budget
also trims every heap twice a second (``trim``): at 256 MiB its peak went from 653 to 608 MB,
832 to 657 with the disk tier (main heap 164 -> 27 MB).
"""

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling (HEAP_MAX_SIZE / 2 on 64-bit): larger blocks stay mmapped
TRIM_THRESHOLD = 256 << 20
ARENAS = 2  # under a budget
TRIM_EVERY_S = 0.5  # under a budget
_done: bool | None = None


def trim() -> bool:
    """Hand the heap's free pages back to the kernel, from anywhere in it (``malloc_trim(0)``; the
    trim threshold only returns its top). A server under a budget calls it every TRIM_EVERY_S."""
    try:
        return bool(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def keep_freed_buffers(budget: int = 0) -> bool:
    """Once per process; True when glibc took the settings. ``budget``: the server's
    ps.memory.budget (0: none), which bounds what the heap keeps."""
    global _done
    if _done is None:
        try:
            mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
        except (OSError, AttributeError):
            _done = False
        else:
            trim = min(TRIM_THRESHOLD, max(4 << 20, budget // 16)) if budget else TRIM_THRESHOLD
            _done = bool(mallopt(M_MMAP_THRESHOLD, min(MMAP_THRESHOLD, trim))) and bool(mallopt(M_TRIM_THRESHOLD, trim))
            if budget:
                _done = bool(mallopt(M_ARENA_MAX, ARENAS)) and _done
    return _done

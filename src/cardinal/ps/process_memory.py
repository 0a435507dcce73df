"""What a server process holds besides its tables, and how ``ps.memory_budget`` sizes it.

A user sets the budget so that a pod stays under its memory limit, so the process, not only
the tables, must stay near it. A server's resident memory is

    floor        the interpreter, numpy, numba and its kernels, gRPC, RocksDB's code: FLOOR,
                 fixed (no torch: cardinal.model_traits gives the server what it reads of models)
    tables       rows, hash index, admission filters, disk-tier index: accounted against the
                 budget by ps/memory.py, which evicts (or demotes) past it
    disk tier    RocksDB's memtables and block cache: ``rocks_memory``, sized from the budget
                 (its index and filter blocks are the tables' part, counted by the tier)
    requests     messages being read and their decoded arrays: ``rpc_threads`` calls at a time
    save         a full checkpoint streams its rows SAVE_CHUNK_BYTES at a time
    freed heap   what glibc keeps of freed blocks: ``heap.keep_freed_buffers`` caps its arenas and
                 how much each keeps, from the budget

Without a budget (0) every part keeps its unbounded default.
"""

MIB = 1 << 20
FLOOR = 150_000_000  # an idle `cardinal server` (listening, no row) measured 125-138 MB (393 with torch), of
                     # which 43 MB its own (heap, anonymous maps), the rest libraries' pages; right after a
                     # fresh install the page cache holds them whole and RSS maps more of them: 198-203 MB.
                     # Its first requests load numba's kernels: +50 MB, not counted in FLOOR
SAVE_CHUNK_BYTES = 8 * MIB  # rows a full checkpoint copies out at a time


def rocks_memory(budget: int, tiers: int) -> tuple[int, int]:
    """(write buffer, block cache) bytes of each of ``tiers`` RocksDB tiers: RocksDB's defaults
    here (16 MiB, 8 MiB) unless a 64th of the budget each, split among the tiers, is less (64 KiB
    at least). A tier holds up to two write buffers (one flushing) and its cache: 3/64 of the
    budget (4.7%) in all, within the 10% the process may hold past it."""
    if not budget:
        return 16 * MIB, 8 * MIB
    share = budget // 64 // max(1, tiers)
    return max(64 << 10, min(16 * MIB, share)), max(64 << 10, min(8 * MIB, share))


def rpc_threads(budget: int, threads: int) -> int:
    """Calls a server applies at once: each holds its message and a few copies of its arrays (a
    push of 4 MiB, the clients' chunk, took about 20 MiB), so one thread per 64 MiB of budget,
    2 at least, ``threads`` at most."""
    return threads if not budget else max(2, min(threads, budget // (64 * MIB)))

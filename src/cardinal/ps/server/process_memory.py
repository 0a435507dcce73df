"""What a server process holds besides its tables, and how ``ps.memory.budget`` sizes it.

A user sets the budget so that a pod stays under its memory limit, so the process, not only
the tables, must stay near it. A server's resident memory is

    floor        the interpreter, numpy, numba and its kernels, gRPC, RocksDB's code: FLOOR,
                 fixed (no torch: cardinal.model_traits gives the server what it reads of models)
    tables       rows, hash index, admission filters, disk-tier index, the ids deleted since the
                 last checkpoint (``deletion_log_bytes`` at most): accounted against the budget by
                 ps/server/memory.py, which evicts (or demotes) past it
    disk tier    RocksDB's memtables and block cache: ``rocks_memory``, sized from the budget
                 (its index and filter blocks are the tables' part, counted by the tier)
    requests     messages being read and their decoded arrays: ``requests`` sizes how many calls
                 are read at once and how large each may be, and clients follow what a server says
    save         a full checkpoint streams its rows SAVE_CHUNK_BYTES at a time
    freed heap   what glibc keeps of freed blocks: ``heap.keep_freed_buffers`` caps its arenas and
                 how much each keeps, from the budget

Without a budget (0) every part keeps its unbounded default.
"""

MIB = 1 << 20
FLOOR = 180_000_000  # a `cardinal server` after its first step, no row kept: 172-176 MB measured. Idle (listening,
                     # no call yet) 122-138 MB (393 with torch): libllvmlite 40 MB, gRPC 10, RocksDB 6, the
                     # interpreter and numpy, and 44 MB its own (heap, anonymous maps); numba's kernels load on
                     # the first calls: +50 MB (libllvmlite's pages touched 40 -> 69 MB, +20 MB heap and maps).
                     # Right after a fresh install the page cache holds the libraries whole and RSS maps more.
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


def deletion_log_bytes(budget: int, tables: int) -> int:
    """Bytes of deleted ids each table keeps for the next delta checkpoint: a 32nd of the budget
    among the tables (0: no bound without a budget). Past it the next checkpoint is a full one."""
    return budget // 32 // max(1, tables)


REQUEST_COPIES = 4  # a call holds its message, decoded arrays, the reply and gRPC's copy of it (a 4 MiB
                    # push was measured at about 20 MiB, the store's own scratch included)
MIN_MESSAGE = 256 << 10  # below this a call's own cost passes its rows' (1,000 rows at dim 64)


def requests(budget: int, threads: int, calls: int, message: int) -> tuple[int, int, int]:
    """(threads, calls read at once, largest message in bytes) of a server: its settings unless a
    budget asks for less. Calls in flight may hold a 32nd of the budget (3.1%; with RocksDB's 4.7%,
    within the 10% the process may hold past it): a thread per 64 MiB of budget (2 to ``threads``),
    two calls more than threads read and waiting, and messages small enough for all of them."""
    if not budget:
        return threads, calls, message
    threads = max(2, min(threads, budget // (64 * MIB)))
    calls = min(calls, threads + 2)
    return threads, calls, min(message, max(MIN_MESSAGE, budget // 32 // (calls * REQUEST_COPIES)))

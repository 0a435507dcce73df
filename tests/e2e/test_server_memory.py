"""What a server holds besides its tables is sized from ps.memory.budget (issue 25, item 5):
RocksDB's memtables and block cache, and the rows a full checkpoint copies out at a time."""

import os
import platform
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.process_memory import SAVE_CHUNK_BYTES

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

MIB = 1 << 20


def test_the_disk_tiers_memtables_and_cache_are_a_small_share_of_the_budget(tmp_path):
    budget = 8 * MIB
    store = ShardStore(StoreConfig((TableConfig("user", 16, seed=1), TableConfig("item", 16, seed=2))), 0, 1,
                       StoreLimits(memory_budget=budget, disk_budget=64 * budget), str(tmp_path))
    try:
        ids = np.arange(200_000, dtype=np.int64)  # about 4 x the budget: most rows go to disk
        for step, part in enumerate(np.array_split(ids, 20), 1):
            for name in ("user", "item"):
                store.pull(name, part, step=step)
        assert store.stats()["disk_bytes"] > 2 * budget
        held = 0
        for table in store.tables.values():
            db = table.cold._db
            held += db.property_int_value("rocksdb.block-cache-capacity")
            held += db.property_int_value("rocksdb.size-all-mem-tables")
        assert held <= budget * 3 // 64 + 2 * (64 << 10), held  # 3/64 of the budget (+ an arena block each)
    finally:
        store.close()


def test_a_full_save_copies_a_bounded_number_of_rows_at_a_time(tmp_path):
    store = ShardStore(StoreConfig((TableConfig("emb", 64, seed=1),), {"name": "sgd", "lr": 0.1}))
    store.pull("emb", np.arange(300_000, dtype=np.int64), step=1)  # 78 MB of values
    tracemalloc.start()
    try:
        store.save(str(tmp_path), 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 3 * SAVE_CHUNK_BYTES, peak / MIB


HEAP = """
import sys, threading
import numpy as np
from cardinal.ps.transport import heap
heap.keep_freed_buffers(int(sys.argv[1]))
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) << 10
def replies():  # 4 MiB message buffers, three alive at a time, freed once sent, on one of 8 server threads
    for _ in range(10):
        kept = [np.ones(4 << 20, np.uint8) for _ in range(3)]
    del kept
before = rss()
threads = [threading.Thread(target=replies) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only: elsewhere the heap settings do nothing")
def test_under_a_budget_the_heap_keeps_a_bounded_share_of_freed_buffers():
    """heap.py keeps freed message buffers for reuse; under ps.memory.budget its arenas are capped
    and each keeps at most a 16th of the budget, so 8 server threads do not keep 8 heaps."""
    budget = 64 * MIB
    done = subprocess.run([sys.executable, "-c", HEAP, str(budget)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) <= budget // 8, int(done.stdout) / MIB  # at most 2 arenas x a 16th of the budget


FRAGMENTS = """
import sys, time
import numpy as np
from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.process import ServerOptions, ShardServer
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) << 10
store = ShardStore(StoreConfig((TableConfig("t", 4),)), limits=StoreLimits(memory_budget=int(sys.argv[1])))
server = ShardServer(store, sys.argv[2], "j", "t", ServerOptions()).start()
before = rss()
blocks = [np.ones(100_000, np.uint8) for _ in range(1500)]  # 150 MB of heap blocks, each below mmap's threshold
blocks = blocks[::10]  # every 10th kept: the heap's top stays in use, its middle is free pages
time.sleep(1.5)
print(rss() - before)
server.stop(0)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only: elsewhere the heap settings do nothing")
def test_under_a_budget_a_server_hands_free_pages_inside_its_heap_back(tmp_path):
    budget = 256 * MIB
    done = subprocess.run([sys.executable, "-c", FRAGMENTS, str(budget), str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) <= 50_000_000, int(done.stdout) / 1e6  # 15 MB still in use; 150 MB without a trim

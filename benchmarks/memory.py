"""Bytes per id and the worst growth pause of one table, up to 50M ids.

    python benchmarks/memory.py [--quick]

One table, dim 16, row-wise Adagrad, filled with new random int64 ids in pulls of 1M. At
1M, 10M and 50M ids it reports the bytes the table accounts for and the process RSS growth,
per id, against the payload (8-byte key + 64-byte row + 4-byte optimizer state = 76 B).
Every growth (a hash sub-table rehash, an arena remap) is timed; the worst is the longest
time a table pauses for growth. The slowest whole pull is shown for context.
"""

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.embedding import EmbeddingTable, TableConfig  # noqa: E402
from cardinal.embedding.arena import Arena  # noqa: E402
from cardinal.embedding.index import IdIndex  # noqa: E402
from cardinal.optim import make_optimizer  # noqa: E402

PAYLOAD = 8 + 16 * 4 + 4
pauses: dict[str, float] = {"index": 0.0, "arena": 0.0}


def timed_growth(kind, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            pauses[kind] = max(pauses[kind], time.perf_counter() - start)
    return wrapper


def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 2M ids only")
    args = parser.parse_args()
    marks = [1_000_000, 2_000_000] if args.quick else [1_000_000, 10_000_000, 50_000_000]
    IdIndex._grow = timed_growth("index", IdIndex._grow)
    Arena.reserve = timed_growth("arena", Arena.reserve)
    rng = np.random.default_rng(0)
    warm = EmbeddingTable(TableConfig("w", 16), make_optimizer({"name": "rowwise_adagrad"}))
    warm.pull(rng.integers(-2**63, 2**63 - 1, 50_000, dtype=np.int64))  # compile outside the figures
    del warm
    gc.collect()
    pauses.update(index=0.0, arena=0.0)
    base = rss()
    table = EmbeddingTable(TableConfig("t", 16), make_optimizer({"name": "rowwise_adagrad"}))
    rows, worst_pull, n = [], 0.0, 0
    batch = 1_000_000
    for mark in marks:
        while n < mark:
            ids = rng.integers(-2**63, 2**63 - 1, batch, dtype=np.int64, endpoint=True)
            start = time.perf_counter()
            table.pull(ids, step=1)
            worst_pull = max(worst_pull, time.perf_counter() - start)
            n = len(table)
            del ids
        gc.collect()
        rows.append({"ids": n, "accounted B/id": table.nbytes / n, "RSS growth B/id": (rss() - base) / n,
                     "payload B/id": PAYLOAD, "accounted / payload": table.nbytes / n / PAYLOAD,
                     "RSS / payload": (rss() - base) / n / PAYLOAD,
                     "worst index growth s": pauses["index"], "worst arena growth s": pauses["arena"],
                     "slowest 1M pull s": worst_pull})
    write("memory_quick" if args.quick else "memory", "Memory per id and growth pauses (dim 16, row-wise Adagrad)",
          rows, [f"payload = 8 B key + 64 B row + 4 B row-wise Adagrad state = {PAYLOAD} B",
                 "accounted = row records (id, values, state, count, last step) + live hash index regions",
                 "a growth pause is one sub-table rehash (1/64 of the ids) or one arena remap (mremap, no copy)",
                 "reproduce: python benchmarks/memory.py"])


if __name__ == "__main__":
    main()

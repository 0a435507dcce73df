"""A table far larger than its RAM budget: filled, trained, saved, reloaded, compared bit for bit.

    python benchmarks/huge_table.py [--ids 100000000] [--budget-gib 2] [--steps 100]

One store (one server's shard), one table, dim 16, row-wise Adagrad (84 B of payload a row: id,
16 values, 1 accumulator, count, last step), ps.memory.budget = --budget-gib and a disk tier
(RocksDB, under ./.huge-table/ beside this checkout's files) for the rest:

1. fill: --ids distinct ids pushed a million at a time (rows past the budget go to disk);
2. train: --steps steps, each pulling and pushing 200,000 ids drawn Zipf(1.05) over all of them;
3. save: a full checkpoint, streamed from both tiers (./.huge-table/ckpt);
4. restart: the store is closed (its disk tier removed), a fresh one loads the checkpoint block by
   block (within the same budget) and its digest is compared with the first store's.

Peak RSS is the process's resident memory at its highest, sampled after every block and step.
"""

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.checkpoint import layout  # noqa: E402
from cardinal.checkpoint.write import commit  # noqa: E402
from cardinal.embedding import TableConfig  # noqa: E402
from cardinal.ps import ShardStore, StoreConfig, StoreLimits  # noqa: E402

CONFIG = StoreConfig((TableConfig("t", 16),), {"name": "rowwise_adagrad"})
BLOCK = 1 << 20
peak = 0


def rss() -> int:
    global peak
    now = int(open("/proc/self/statm").read().split()[1]) * 4096
    peak = max(peak, now)
    return now


def ids_of(ranks: np.ndarray) -> np.ndarray:
    """A bijection of ranks onto int64 ids (an odd multiplier mod 2^64), so ranks 0..N-1 are N ids."""
    return (ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)


def store(budget: int, tiers: Path) -> ShardStore:
    limits = StoreLimits(max_rows=2**31 - 1, memory_budget=budget, disk_budget=1 << 40)
    return ShardStore(CONFIG, limits=limits, tier_dir=str(tiers))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=100_000_000)
    parser.add_argument("--budget-gib", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    budget = int(args.budget_gib * (1 << 30))
    work = Path(__file__).resolve().parents[1] / ".huge-table"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        rows = run(args, budget, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write("huge_table", f"{args.ids:,} ids under a {args.budget_gib:g} GiB RAM budget", rows,
          ["one store, one table, dim 16, row-wise Adagrad; the rest of the rows in the disk tier (RocksDB)",
           "peak RSS: the whole process at its highest (the budget bounds what the store accounts: rows, "
           "hash index, the disk tier's key filter; RocksDB's own memory and an eviction pass's scores are beside it)",
           "bitwise: the digest of every row (values, optimizer state, count, last step) after the reload "
           "equals the first store's",
           f"reproduce: python benchmarks/huge_table.py --ids {args.ids} --budget-gib {args.budget_gib:g} "
           f"--steps {args.steps}"])


def run(args, budget: int, work: Path) -> list[dict]:
    s = store(budget, work / "tiers-a")
    start = time.perf_counter()
    for lo in range(0, args.ids, BLOCK):
        ids = ids_of(np.arange(lo, min(args.ids, lo + BLOCK)))
        s.push("t", ids, np.full((len(ids), 16), 0.01, np.float32), step=1 + lo // BLOCK)
        rss()
        if lo // BLOCK % 10 == 0:
            st = s.stats()
            print(f"fill {lo + len(ids):,} ids: RAM {st['bytes'] / 2**30:.2f} GiB, disk {st['disk_bytes'] / 2**30:.2f} "
                  f"GiB, RSS {rss() / 2**30:.2f} GiB, {time.perf_counter() - start:.0f} s", flush=True)
    fill_s = time.perf_counter() - start
    first = 2 + args.ids // BLOCK
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for step in range(first, first + args.steps):
        ranks = np.unique(np.minimum(rng.zipf(1.05, 200_000), args.ids) - 1)
        ids = ids_of(ranks)
        got = s.pull("t", ids, step=step)
        s.push("t", ids, 0.01 * got + 0.001, step=step)
        rss()
    train_s = time.perf_counter() - start
    st = s.stats()
    print(f"trained: RAM {st['bytes'] / 2**30:.2f} GiB, disk {st['disk_bytes'] / 2**30:.2f} GiB", flush=True)
    digest = s.tables["t"].digest()
    step = first + args.steps
    start = time.perf_counter()
    s.save(str(work / "ckpt"), step)
    commit(layout.step_dir(work / "ckpt", step), step, 1)
    save_s = time.perf_counter() - start
    saved = sum(f.stat().st_size for f in layout.step_dir(work / "ckpt", step).rglob("*") if f.is_file())
    table = st["tables"]["t"]
    s.close()
    del s
    start = time.perf_counter()
    back = store(budget, work / "tiers-b")
    back.load(str(layout.step_dir(work / "ckpt", step)))
    load_s = time.perf_counter() - start
    loaded = back.stats()
    same = back.tables["t"].digest() == digest
    back.close()
    return [{"ids": args.ids, "RAM budget GiB": budget / 2**30, "RAM GiB (accounted)": st["bytes"] / 2**30,
             "rows in RAM": table["ram_rows"], "rows on disk": table["disk_rows"], "peak RSS GiB": peak / 2**30,
             "fill rows/s": args.ids / fill_s, "train steps/s": args.steps / train_s, "RAM hit rate":
             1 - table["faulted"] / max(1, table["requested"]), "save s": save_s, "save MB/s": saved / 1e6 / save_s,
             "load s": load_s, "RAM GiB after load": loaded["bytes"] / 2**30, "bitwise after reload":
             "yes" if same else "NO"}]


if __name__ == "__main__":
    main()

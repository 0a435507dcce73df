"""Checkpoint saves: a full one's throughput, and a delta after 1% of the rows changed.

    python benchmarks/checkpoints.py [--rows 4000000]

One store (one shard), one table of --rows ids, dim 16, row-wise Adagrad, trained one step so
every row exists. A full save (every file written and fsynced, the manifest, the commit marker)
is timed, then 1% of the rows are pushed again and a delta on it is saved and timed; then the
chain is loaded back into a fresh store and compared with the live one. Bytes are the files
written; MB/s are payload bytes (ids, rows, counts, steps) per second of the whole save.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.checkpoint import layout  # noqa: E402
from cardinal.checkpoint.write import commit  # noqa: E402
from cardinal.embedding import TableConfig  # noqa: E402
from cardinal.ps import ShardStore, StoreConfig  # noqa: E402

CONFIG = StoreConfig((TableConfig("t", 16),), {"name": "rowwise_adagrad"})


def files_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed_save(store: ShardStore, root: Path, step: int, base: int | None) -> tuple[float, int]:
    start = time.perf_counter()
    store.save(str(root), step, base)
    commit(layout.step_dir(root, step), step, 1, base=base)
    return time.perf_counter() - start, files_bytes(layout.step_dir(root, step))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    args = parser.parse_args()
    store = ShardStore(CONFIG)
    ids = np.random.default_rng(0).integers(-2**63, 2**63 - 1, args.rows, dtype=np.int64)
    for lo in range(0, len(ids), 1 << 20):
        part = ids[lo:lo + (1 << 20)]
        store.push("t", part, np.full((len(part), 16), 0.01, np.float32), step=1)
    changed = ids[:: 100]
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:  # the checkout's disk, not a RAM-backed /tmp
        root = Path(tmp)
        full_s, full_b = timed_save(store, root, 1, None)
        store.push("t", changed, np.full((len(changed), 16), 0.01, np.float32), step=2)
        delta_s, delta_b = timed_save(store, root, 2, 1)
        back = ShardStore(CONFIG)
        start = time.perf_counter()
        back.load(str(layout.step_dir(root, 2)))
        load_s = time.perf_counter() - start
        same = back.tables["t"].digest() == store.tables["t"].digest()
    payload = len(ids) * (8 + 4 * (16 + 1) + 4 + 4)
    rows = [{"save": "full", "rows written": len(ids), "MB": full_b / 1e6, "s": full_s, "payload MB/s": payload / 1e6 / full_s,
             "vs full (time)": 1.0, "vs full (bytes)": 1.0},
            {"save": "delta, 1% of rows changed", "rows written": len(changed), "MB": delta_b / 1e6, "s": delta_s,
             "payload MB/s": len(changed) * (payload / len(ids)) / 1e6 / delta_s, "vs full (time)": delta_s / full_s,
             "vs full (bytes)": delta_b / full_b}]
    write("checkpoints", "Checkpoint saves: full, and a delta after 1% of the rows changed", rows,
          [f"one shard, one table of {args.rows:,} ids, dim 16, row-wise Adagrad: {payload / 1e6:,.0f} MB of payload "
           "(8 B id + 68 B row and state + 8 B count and step)", "each save writes and fsyncs every file, the shard "
           "manifest and the commit marker, into a directory on the checkout's disk",
           f"the chain (full + delta) loaded back into a fresh store in {load_s:.1f} s: "
           f"{'bitwise equal' if same else 'NOT EQUAL'} to the store that saved it",
           f"reproduce: python benchmarks/checkpoints.py --rows {args.rows}"])


if __name__ == "__main__":
    main()

"""Parse time of one worker's share of a TSV file: world 1 against one worker of world 4.

    python benchmarks/reader_shares.py [lines]

A worker parses only its lines and passes over the others by scanning to their newline, so one
worker of 4 should take about a quarter of the parse time plus one scan of the bytes (the
"empty share" row: lo == hi, nothing parsed). "kernel s" times the compiled parser (and the
newline count that sizes its output) on buffers held in memory; "reader s" a whole
``CriteoReader`` pass (read, parse, batches). Best of 3.
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report import write  # noqa: E402

from cardinal.data import CriteoReader  # noqa: E402
from cardinal.data import tsv_kernels as K  # noqa: E402
from cardinal.data.criteo import count_lines, parse_share  # noqa: E402
from cardinal.data.shares import bounds, count_in  # noqa: E402

BATCH, CHUNK = 4096, 8 << 20


def write_tsv(path: Path, lines: int, seed: int = 0) -> None:
    """Criteo-shaped lines: counts with 3% missing, 8-hex-digit categorical values."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for start in range(0, lines, 100_000):
            n = min(100_000, lines - start)
            ints = rng.geometric(0.05, (n, K.N_INT)).astype(np.int64)
            cats = rng.integers(0, 1 << 32, (n, K.N_CAT), dtype=np.int64)
            out = np.empty(n * 400, np.uint8)
            size = K.format_lines(rng.integers(0, 2, n).astype(np.int64), ints, rng.random((n, K.N_INT)) > 0.03,
                                  cats, rng.random((n, K.N_CAT)) > 0.03, out)
            f.write(out[:size].tobytes())


def best(f, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    lines = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.tsv"
        write_tsv(path, lines)
        data = path.read_bytes()
        buffers, start, first = [], 0, 0  # whole lines, CHUNK bytes at a time, as the reader reads them
        while start < len(data):
            end = data.rfind(b"\n", start, start + CHUNK) + 1 if start + CHUNK < len(data) else len(data)
            buffers.append((data[start:end], first))
            first += count_lines(buffers[-1][0])
            start = end

        def kernel(lo: int, hi: int) -> None:
            for buf, first in buffers:
                parse_share(buf, count_lines(buf), first, BATCH, lo, hi)

        def reader(share) -> None:
            for _ in CriteoReader([path], BATCH, chunk_bytes=CHUNK, share=share):
                pass

        kernel(0, BATCH)  # compile
        rows = []
        for name, share in [("world 1", (0, 1)), ("world 4, rank 0", (0, 4)), ("world 4, rank 3", (3, 4)),
                            ("empty share (scan only)", None)]:
            lo, hi = bounds(BATCH, share) if share else (0, 0)
            rows.append({"worker": name, "lines parsed": count_in(0, lines, BATCH, lo, hi),
                         "kernel s": best(lambda: kernel(lo, hi)),
                         "reader s": best(lambda: reader(share)) if share else float("nan")})
        for r in rows:
            r["kernel vs world 1"] = r["kernel s"] / rows[0]["kernel s"]
    write("reader_shares", f"Parse time of one worker's share, {lines:,} TSV lines ({len(data) / 2**20:.0f} MiB)",
          rows, [f"batch_size {BATCH}, {CHUNK >> 20} MiB reads; best of 3; the file is in memory (page cache)",
                 "reproduce: python benchmarks/reader_shares.py"])


if __name__ == "__main__":
    main()

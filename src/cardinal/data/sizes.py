"""How many rows a data set holds, known before reading it, so a progress bar has a total and an ETA.

Parquet files say it exactly (their metadata's row counts). A TSV file does not; counting its
lines would read it all (a Criteo day is 11 GB), so its size in bytes is divided by the mean
line length of its first ``sample_bytes``: a few per cent off on files whose lines are alike,
which is what Criteo files are. Either way the answer only sizes a bar: the readers never rely on it.
"""

import math
from pathlib import Path

SAMPLE_BYTES = 1 << 20


def tsv_rows(paths: list[str | Path], sample_bytes: int = SAMPLE_BYTES) -> int:
    """An estimate of the lines of the TSV files, from each file's size and its first lines."""
    total = 0
    for path in paths:
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            head = f.read(sample_bytes)
        if not head:
            continue
        whole = head if len(head) == size else head[: head.rfind(b"\n") + 1] or head
        lines = whole.count(b"\n") + (not whole.endswith(b"\n"))
        total += lines if len(head) == size else round(size * lines / len(whole))
    return total


def parquet_rows(paths: list[str | Path]) -> int:
    """The rows of the Parquet files, from their metadata (exact; nothing else is read)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def train_batches(fmt: str, paths: list[str | Path], batch_size: int) -> int | None:
    """Global batches in one pass over ``paths`` ("criteo": estimated, "parquet": exact), or None
    when the files cannot tell (unreadable: the reader names the problem when it gets there)."""
    try:
        rows = tsv_rows(paths) if fmt == "criteo" else parquet_rows(paths)
    except Exception:  # a bar without a total is better than an error here that is not the reader's
        return None
    return math.ceil(rows / batch_size)

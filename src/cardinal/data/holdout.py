"""A held-out split carved from the training files, for runs given no eval files.

Two readers of the same files see complementary rows: the ``train`` side never sees a held-out
row, and the two sides together are every row.

    by = "time"   rows are in time order (Criteo's days, logs): the last ``share`` of the lines
                  (counted over the files in order, bad lines included) are held out, so the
                  model is judged on the future, as it will be used
    by = "hash"   a row is held out when a seeded hash of its parsed values falls below ``share``:
                  for files whose order means nothing (equal rows go to the same side)

    lines:  0 ............................ cut ........ total
    time:   train                          | eval
    hash:   train, eval mixed by hash(row) (about share of them eval)
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SIDES = ("train", "eval")


@dataclass(frozen=True)
class Holdout:
    share: float                  # in (0, 1)
    by: str                       # "time" or "hash"
    side: str                     # "train" or "eval": which rows this reader keeps
    total: int                    # lines over all files (time: where the cut is)
    seed: int = 0

    def __post_init__(self):
        assert 0 < self.share < 1 and self.by in ("time", "hash") and self.side in SIDES

    @property
    def cut(self) -> int:
        """The first held-out line (time)."""
        return self.total - max(1, round(self.total * self.share))

    def keep(self, rows, line: np.ndarray) -> np.ndarray:
        """(n,) bool: which of ``rows`` (global lines ``line``) this side keeps."""
        held = line >= self.cut if self.by == "time" else row_hash(rows, self.seed) < self.share
        return ~held if self.side == "train" else held

    def done_before(self, done: int) -> bool:
        """True once the train side (time) has handled every line it can keep."""
        return self.by == "time" and self.side == "train" and done >= self.cut


def row_hash(rows, seed: int) -> np.ndarray:
    """(n,) float64 in [0, 1): splitmix64 over each row's label, integers and categorical values."""
    h = np.full(len(rows), (seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF, np.uint64)
    columns = [rows.labels.astype(np.float64).view(np.uint64)[:, None],
               np.where(rows.int_ok, rows.ints, -(1 << 62)).astype(np.int64).view(np.uint64),
               np.where(rows.cat_ok, rows.cats, -1).astype(np.int64).view(np.uint64)]
    with np.errstate(over="ignore"):
        for col in np.concatenate(columns, axis=1).T:
            h = _mix(h ^ col)
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def count_rows(fmt: str, paths: list[str | Path]) -> int:
    """Lines of TSV files (a last line without its newline counts), or rows of Parquet files."""
    total = 0
    for path in map(Path, paths):
        if not path.is_file():
            raise ValueError(f"data file not found: {path}")
        if fmt == "parquet":
            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except (pa.ArrowException, OSError) as e:
                raise ValueError(f"{path}: not a readable Parquet file ({e})") from e
            continue
        last = b"\n"
        with open(path, "rb") as f:
            while chunk := f.read(16 << 20):
                total += int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == 10))
                last = chunk[-1:]
        total += last != b"\n"
    return total

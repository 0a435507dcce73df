"""Streaming reader of Criteo-layout TSV files (the Kaggle ``train.txt`` layout).

Files are read in chunks of whole lines and parsed by a compiled kernel, so memory stays at
a few chunks whatever the file size. Features become:
  - dense ``I1..I13``: log(1 + max(x, 0)), 0 when missing;
  - sparse ``C1..C26``: id ``(j << 32) | value`` for field Cj, so fields never collide and
    can share one table; a missing value is an empty bag.
A bad line (wrong column count, bad label, non-numeric integer, bad hex) is skipped, counted
and reported with its file and line number; with ``strict=True`` it stops the run instead, and
so does a share of bad lines above ``max_bad_fraction`` (``bad_rows.BadRows``). The value rules
(labels 0/1; integers of at most 18 digits; categorical values below 2**32, so the field bits
above them stay intact) are ``LABELS``, ``INT_LIMIT`` and ``CAT_LIMIT``, shared with Parquet.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from cardinal.data import tsv_kernels as K
from cardinal.data.bad_rows import BadRows
from cardinal.data.batch import Batch, single_hot

DENSE = [f"I{i}" for i in range(1, K.N_INT + 1)]
SPARSE = [f"C{i}" for i in range(1, K.N_CAT + 1)]
INT_LIMIT = 10**18   # |integer| < this: the TSV parser takes at most 18 digits
CAT_LIMIT = 1 << 32  # categorical values: 0 <= value < this (8 hex digits); the field sits above


class Rows:
    """Parsed rows, column-wise: labels, ints + int_ok, cats + cat_ok."""

    def __init__(self, labels, ints, int_ok, cats, cat_ok):
        self.labels, self.ints, self.int_ok, self.cats, self.cat_ok = labels, ints, int_ok, cats, cat_ok

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, s: slice) -> "Rows":
        return Rows(self.labels[s], self.ints[s], self.int_ok[s], self.cats[s], self.cat_ok[s])

    @staticmethod
    def concat(parts: list["Rows"]) -> "Rows":
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("labels", "ints", "int_ok", "cats", "cat_ok")))

    def to_batch(self) -> Batch:
        dense = np.log1p(np.maximum(self.ints, 0) * self.int_ok).astype(np.float32)
        sparse = {name: single_hot(self.cats[:, j] | ((j + 1) << 32), self.cat_ok[:, j]) for j, name in enumerate(SPARSE)}
        return Batch(torch.from_numpy(dense), sparse, torch.from_numpy(self.labels.astype(np.float32)))


def parse_buffer(buf: bytes) -> tuple[Rows, np.ndarray, np.ndarray]:
    """Parse whole lines; returns (rows, bad line indices, reason codes)."""
    arr = np.frombuffer(buf, np.uint8)
    n = int(np.count_nonzero(arr == 10)) + 1
    labels = np.empty(n, np.float32)
    ints, int_ok = np.empty((n, K.N_INT), np.int64), np.empty((n, K.N_INT), np.bool_)
    cats, cat_ok = np.empty((n, K.N_CAT), np.int64), np.empty((n, K.N_CAT), np.bool_)
    bad_line, bad_reason = np.empty(n, np.int64), np.empty(n, np.int64)
    rows, bad = K.parse(arr, labels, ints, int_ok, cats, cat_ok, bad_line, bad_reason)
    return Rows(labels, ints, int_ok, cats, cat_ok)[:rows], bad_line[:bad], bad_reason[:bad]


class LayoutReader(ABC):
    """A reader of files in the Criteo layout: yields ``Batch``es of ``batch_size`` rows (the
    last one may be smaller) from the ``chunks`` of parsed rows a subclass reads, and reports
    bad rows through one ``BadRows`` (TSV and Parquet alike)."""

    dense_fields, sparse_fields = DENSE, SPARSE

    def __init__(self, paths: list[str | Path], batch_size: int, strict: bool = False,
                 max_bad_fraction: float = 1.0, keep_examples: int = 10):
        self.paths = [Path(p) for p in paths]
        for p in self.paths:
            if not p.is_file():
                raise ValueError(f"data file not found: {p}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.strict = batch_size, strict
        self.bad = BadRows(strict, max_bad_fraction, keep_examples)

    @abstractmethod
    def chunks(self) -> Iterator[Rows]:
        """The good rows of the files, a chunk at a time (bad ones handed to ``self.bad``)."""

    @property
    def bad_lines(self) -> int:
        return self.bad.bad

    @property
    def bad_examples(self) -> list[str]:
        return self.bad.examples

    def __iter__(self) -> Iterator[Batch]:
        self.bad.reset()
        yield from batches(self.chunks(), self.batch_size)
        self.bad.finish()


class CriteoReader(LayoutReader):
    """Criteo TSV files, read ``chunk_bytes`` at a time and parsed by a compiled kernel."""

    def __init__(self, paths: list[str | Path], batch_size: int, strict: bool = False,
                 chunk_bytes: int = 8 << 20, keep_examples: int = 10, max_bad_fraction: float = 1.0):
        super().__init__(paths, batch_size, strict, max_bad_fraction, keep_examples)
        self.chunk_bytes = chunk_bytes

    def chunks(self) -> Iterator[Rows]:
        """Parsed rows, a chunk of the files at a time."""
        for path in self.paths:
            line_base = 0
            with open(path, "rb") as f:
                rest = b""
                while True:
                    data = f.read(self.chunk_bytes)
                    buf = rest + data
                    if not data:
                        if buf:
                            yield self._parse(path, buf, line_base)
                        break
                    cut = buf.rfind(b"\n") + 1
                    if cut == 0:
                        rest = buf
                        continue
                    rest = buf[cut:]
                    yield self._parse(path, buf[:cut], line_base)
                    line_base += buf.count(b"\n", 0, cut)

    def _parse(self, path: Path, buf: bytes, line_base: int) -> Rows:
        rows, bad_line, bad_reason = parse_buffer(buf)
        where = [f"{path}:{line_base + int(i) + 1}: {K.REASONS[int(r)]}" for i, r in zip(bad_line, bad_reason)]
        self.bad.add(where, len(rows) + len(where))
        return rows


def batches(chunks: Iterator[Rows], batch_size: int) -> Iterator[Batch]:
    """Batches of ``batch_size`` rows (the last one may be smaller) from chunks of any size."""
    pending: list[Rows] = []
    have = 0
    for rows in chunks:
        pending.append(rows)
        have += len(rows)
        if have < batch_size:
            continue
        merged = Rows.concat(pending)
        full = have // batch_size * batch_size
        for start in range(0, full, batch_size):
            yield merged[start:start + batch_size].to_batch()
        pending, have = [merged[full:]], have - full
    if have:
        yield Rows.concat(pending).to_batch()

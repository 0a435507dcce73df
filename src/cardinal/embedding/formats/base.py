"""How a table stores a row's values: the row format, one strategy per file.

A stored row is float32 words: the values, encoded by the format, then the optimizer state,
always float32 (an accumulator held at 8 bits would stop growing):

    fp32, dim 4, row-wise Adagrad    [ v0 v1 v2 v3 | s ]                     5 words
    bf16, dim 4                      [ v0v1 v2v3 | s ]   (two halves a word) 3 words
    int8, dim 4                      [ scale | q0q1q2q3 | s ]                3 words

Values and state are separate fields of one record rather than separate arrays: compaction
moves opaque words and never learns the format, and a push reads and writes one row's cache lines.

Whole-table paths (the disk tier, checkpoints, digests, ``check``, a push's backup) move rows in
their *portable* form (``portable``/``place``): for these formats the stored words themselves,
for a format that keeps part of a row outside its words (``chunked.py``: values in a chunk pool)
the row made whole, so a row written out and placed back is bit for bit the row that left.

Only the table decodes: a pull gathers values as float32; a push decodes the rows it updates
into float32 working rows ``[values | state]``, runs the optimizer's kernel on them, and
encodes them back. Encoding rounds stochastically, keyed by (id, step, column) (``rounding.py``):
an update smaller than a step of the format still moves the row on average, and a run gives
the same bits every time, on any shard count or tier.
"""

from abc import ABC, abstractmethod

import numpy as np

BLOCK = 1 << 16  # rows decoded at a time by whole-table passes


class RowFormat(ABC):
    name: str
    exact = False  # fp32 only: stored values are the float32 values themselves

    @abstractmethod
    def value_words(self, dim: int) -> int:
        """float32 words the encoded values of one row take; the state starts there."""

    @abstractmethod
    def decode(self, data: np.ndarray, rows: np.ndarray, dim: int, out: np.ndarray) -> None:
        """out[i] = the values of row rows[i], zeros where rows[i] < 0.

        data,  # (R, width) float32 words
        rows,  # (n,) int64
        out,   # (n, dim) float32
        """

    @abstractmethod
    def encode(self, values: np.ndarray, ids: np.ndarray, step: int, data: np.ndarray, rows: np.ndarray) -> None:
        """Store ``values`` (n, dim) float32 as rows ``rows`` of ``data`` (their values only);
        ``ids`` (n,) and ``step`` key the stochastic rounding. A non-finite value stays
        non-finite (``first_nonfinite`` finds it)."""

    # --- built on the two above ------------------------------------------------------------

    def working(self, data: np.ndarray, rows: np.ndarray, dim: int) -> np.ndarray:
        """(n, dim + state) float32: the rows decoded, the optimizer's view of them."""
        vw = self.value_words(dim)
        work = np.empty((len(rows), dim + data.shape[1] - vw), np.float32)
        self.decode(data, rows, dim, work[:, :dim])
        work[:, dim:] = data[rows, vw:]
        return work

    def store(self, data: np.ndarray, rows: np.ndarray, work: np.ndarray, dim: int, ids: np.ndarray,
              step: int) -> None:
        """Write working rows (n, dim + state) back: values encoded, state as it is."""
        vw = self.value_words(dim)
        self.encode(np.ascontiguousarray(work[:, :dim]), ids, step, data, rows)
        data[rows, vw:] = work[:, dim:]

    def first_nonfinite(self, data: np.ndarray, rows: np.ndarray, lo: int, hi: int, dim: int) -> int:
        """The first i in [lo, hi) whose row rows[i] holds NaN or Inf (values or state), or -1."""
        work = self.working(data, rows[lo:hi], dim)
        bad = np.flatnonzero(~np.isfinite(work).all(axis=1))
        return lo + int(bad[0]) if len(bad) else -1

    def push_block(self, data: np.ndarray, rows: np.ndarray, grads: np.ndarray, update, at, backup: np.ndarray,
                   dim: int, ids: np.ndarray, step: int) -> int:
        """One block of a push on stored rows (``EmbeddingTable.push``): ``backup`` gets the rows'
        portable form first, then the push is observed (``on_push``), ``update(work, all, grads,
        at)`` runs on the working rows, and they are stored. Returns the first i whose row holds
        NaN or Inf after, or -1; the table then restores every block from its backup."""
        backup[:] = self.portable(data, rows, dim)
        self.on_push(data, rows, grads, dim)
        work = self.working(data, rows, dim)
        update(work, np.arange(len(rows), dtype=np.int64), grads, at)
        self.store(data, rows, work, dim, ids, step)
        return self.first_nonfinite(data, rows, 0, len(rows), dim)

    def values(self, data: np.ndarray, dim: int) -> np.ndarray:
        """(n, dim) float32: the values of every row of ``data`` (n, width), decoded."""
        out = np.empty((len(data), dim), np.float32)
        for lo in range(0, len(data), BLOCK):
            hi = min(len(data), lo + BLOCK)
            self.decode(data, np.arange(lo, hi, dtype=np.int64), dim, out[lo:hi])
        return out

    def all_finite(self, data: np.ndarray, dim: int) -> bool:
        """Whether every value and state of the rows of ``data`` is finite (in blocks: no full copy)."""
        rows = np.arange(len(data), dtype=np.int64)
        return all(self.first_nonfinite(data, rows, lo, min(len(data), lo + BLOCK), dim) < 0
                   for lo in range(0, len(data), BLOCK))

    # --- portable rows: what whole-table paths move ----------------------------------------

    def width(self, dim: int, state_width: int) -> int:
        """float32 words of a stored row: the encoded values, then the optimizer's state."""
        return self.value_words(dim) + state_width

    def portable_width(self, dim: int, state_width: int) -> int:
        """float32 words of a portable row (``portable``); the stored row here."""
        return self.width(dim, state_width)

    @property
    def portable_form(self) -> "RowFormat":
        """The format that reads portable rows (their values, their finiteness): this one here."""
        return self

    @property
    def extra_bytes(self) -> int:
        """Bytes the format holds outside the row words (counted in ``EmbeddingTable.nbytes``)."""
        return 0

    def portable(self, data: np.ndarray, rows: np.ndarray, dim: int) -> np.ndarray:
        """(n, portable_width) float32, a new array: rows ``rows`` (n,) int64 of ``data``, whole."""
        return data[rows]

    def place(self, data: np.ndarray, rows: np.ndarray, portable: np.ndarray, dim: int) -> None:
        """Make rows ``rows`` of ``data`` hold ``portable`` (n, portable_width) exactly; what they held
        before is released."""
        data[rows] = portable

    def from_working(self, work: np.ndarray, ids: np.ndarray, step: int, dim: int) -> np.ndarray:
        """The portable rows that working rows ``work`` (n, dim + state) become, values encoded at
        ``step`` (new rows: not stored anywhere yet)."""
        out = np.zeros((len(work), self.width(dim, work.shape[1] - dim)), np.float32)
        self.store(out, np.arange(len(work), dtype=np.int64), work, dim, ids, step)
        return out

    def mask_new(self, grads: np.ndarray) -> None:
        """Zero, in place, the gradient (n, dim) columns that rows ``from_working`` makes do not
        hold, before their first update. All are held here."""

    def release(self, data: np.ndarray, rows: np.ndarray) -> None:
        """Rows ``rows`` (unique) are about to be deleted or overwritten: free what they hold outside
        their words. Nothing to free here."""

    def on_push(self, data: np.ndarray, rows: np.ndarray, grads: np.ndarray, dim: int) -> None:
        """What the format observes of a push to rows ``rows`` (unique), gradients ``grads`` (n, dim)
        float32 (the push's own summed array, which it may change: an entry set to zero is dropped):
        called before the update of existing rows, after new rows are placed. Nothing here."""

    def check_rows(self, data: np.ndarray, n: int) -> None:
        """Assert the format's own invariants over live rows [0, n); none here."""

    def __repr__(self) -> str:
        return f"<row format {self.name}>"

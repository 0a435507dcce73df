"""Whole-table views of an ``EmbeddingTable``: export, checkpoint pieces, imports, digests, invariants.

Every whole-table path sees rows in the format's portable form (``formats/base.py``: values and
optimizer state as float32), whatever the format stores and whichever tier holds them, so a
checkpoint, a digest or a check reads the same for fp32, int8 or chunks, in RAM or on disk.
A mixin of ``EmbeddingTable`` (``table.py``): it uses the table's lock, storage, index, format,
cold tier, admission filter and deletion log.
"""

import functools
import operator

import numpy as np

from cardinal.embedding import row_kernels as RK
from cardinal.embedding.dedup import unique_inverse
from cardinal.embedding.formats.base import BLOCK
from cardinal.embedding.storage import Columns


class WholeTableViews:
    def values(self, data: np.ndarray) -> np.ndarray:
        """(n, dim) float32: the values of stored rows ``data`` (n, width), decoded (``formats/``)."""
        return self.format.values(data, self.dim)

    def cold_values(self, data: np.ndarray) -> np.ndarray:
        """(n, dim) float32: the values of portable rows ``data`` (the cold tier's, a checkpoint's)."""
        return self.format.portable_form.values(data, self.dim)

    def _ram_rows(self, rows: np.ndarray) -> Columns:
        """Copies of RAM rows ``rows``, their data portable (lock held)."""
        cols = self.storage.columns()
        return Columns(cols.ids[rows], self.format.portable(cols.data, rows, self.dim), cols.count[rows],
                       cols.last_step[rows])

    def after_push(self, step: int, replace) -> bool:
        """What the schedule has due after a push of ``step`` (``protocol.py``); False without one."""
        return self.schedule is not None and self.schedule(self, step, replace)

    def adjust_dims(self) -> dict | None:
        """The format's periodic pass over the RAM rows (``formats/chunked.py``: which chunks each row
        keeps); None for a format without one."""
        adjust = getattr(self.format, "adjust", None)
        if adjust is None:
            return None
        with self.lock:
            return adjust(self.storage.columns().data, self.storage.size, self.dim)

    def export(self, since: int | None = None) -> dict[str, np.ndarray]:
        """Copies of every row (RAM, then the cold tier): ids, data (values + state), count, last_step;
        with ``since``, only the rows pulled or pushed at a later step (a delta checkpoint's)."""
        with self.lock:
            n, cols = self.storage.size, self.storage.columns()
            keep = np.arange(n) if since is None else np.flatnonzero(cols.last_step[:n] > since)
            parts = [[col] for col in self._ram_rows(keep)]
            for chunk in (self.cold.chunks() if self.cold is not None else ()):
                keep = slice(None) if since is None else np.flatnonzero(chunk.last_step > since)
                for part, col in zip(parts, chunk):
                    part.append(col[keep])
            return {name: np.concatenate(part) for name, part in zip(cols._fields, parts)}

    def row_chunks(self, size: int = 1 << 20):
        """Every row, ``size`` at a time (RAM, then the cold tier), as ``Columns`` of copies; the
        caller holds the lock throughout (a checkpoint streams a table larger than RAM this way)."""
        n = self.storage.size
        for lo in range(0, n, size):
            yield self._ram_rows(np.arange(lo, min(n, lo + size)))
        yield from (self.cold.chunks() if self.cold is not None else ())

    def snapshot(self, since: int | None = None) -> dict:
        """What a checkpoint of this table holds besides a full one's rows (``row_chunks``, read under
        the same hold of the lock): a delta's ``rows`` (``export(since)``; None without ``since``),
        ``deleted`` (the ids deleted since the previous snapshot, unique, or None where the log let
        them go: ``DeletionLog``; the log starts again),
        ``admission`` (the filter's description and state, or None)."""
        with self.lock:
            deleted = self.deleted.take()
            admission = None if self.admission is None else (self.admission.describe(), self.admission.state())
            rows = None if since is None else self.export(since)
            return {"rows": rows, "deleted": deleted, "admission": admission}

    def checkpoint_files(self) -> None:
        """None: saved as rows (``row_chunks``, ``snapshot``)."""
        return None

    def delta_refused(self) -> str | None:
        """Why a delta cannot follow: the deletion log let go of its ids (``DeletionLog.cap``)."""
        if self.deleted.overflowed:
            return (f"deleted more ids from table {self.config.name!r} than its log keeps under ps.memory.budget "
                    f"({self.deleted.cap:,} bytes)")
        return None

    def import_rows(self, ids, data, count, last_step) -> None:
        """Insert rows as saved (portable), e.g. from a checkpoint; ids must be unique and new to this table
        (in any tier), else ValueError and nothing is inserted."""
        if len(ids) == 0:
            return
        with self.lock:
            if len(unique_inverse(ids)[0]) != len(ids) or self.has(ids).any():
                raise ValueError("holds duplicate ids (an id given twice, or one the table already holds)")
            self._insert(Columns(ids, data, count, last_step))

    def _insert(self, rows: Columns) -> None:
        """New RAM rows holding exactly ``rows``, whose ids are unique and in no RAM row (lock held)."""
        at = self._rows(rows.ids, init=False)
        cols = self.storage.columns()
        self._place(cols.data, at, rows.data)
        cols.count[at] = rows.count
        cols.last_step[at] = rows.last_step

    def digest_parts(self) -> tuple[int, int]:
        """(sum, xor) of per-row hashes; combine shards with ``combine_digests``."""
        with self.lock:
            parts = [(0, 0)]
            for c in self.row_chunks(BLOCK):
                parts.append(RK.digest_rows(c.ids, c.data.view(np.int32), c.count, c.last_step, len(c.ids)))
        return sum(int(t) for t, _ in parts) % 2**64, functools.reduce(operator.xor, (int(x) for _, x in parts))

    def digest(self) -> str:
        """Hash of every id, row, optimizer state and metadata; independent of row order."""
        return combine_digests([self.digest_parts()])

    def check(self) -> None:
        """Invariants between index, rows and metadata; raises AssertionError naming the broken one."""
        with self.lock:
            n, cols = self.storage.size, self.storage.columns()
            self.index.check(cols.ids, n)
            self.format.check_rows(cols.data, n)
            if self.admission is not None:
                self.admission.check()
            if self.cold is not None:
                cold = 0
                for chunk in self.cold.chunks():
                    cold += len(chunk.ids)
                    assert (self.index.find(cols.ids, chunk.ids) < 0).all(), "a row is in RAM and in the cold tier"
                    assert self.format.portable_form.all_finite(chunk.data, self.dim), \
                        f"table {self.config.name!r} holds a non-finite cold value"
                assert cold == len(self.cold), "the cold tier's row count disagrees with its rows"
            for lo in range(0, n, BLOCK):
                rows = self.format.portable(cols.data, np.arange(lo, min(n, lo + BLOCK)), self.dim)
                assert self.format.portable_form.all_finite(rows, self.dim), \
                    f"table {self.config.name!r} holds a non-finite value"


def combine_digests(parts: list[tuple[int, int]]) -> str:
    total, xored = 0, 0
    for t, x in parts:
        total, xored = (total + t) % 2**64, xored ^ x
    return f"{total:016x}{xored:016x}"

"""Removing rows from an ``EmbeddingTable``: deletion, eviction, and moving rows to the cold tier.

Apart from pull and push because it is another concern with its own rule: a row that leaves
RAM is either gone (its id logged for the next delta checkpoint, ``deletion_log.py``) or moved
(to the cold tier, or replaced by a load), and the live rows stay 0..size-1 (``compaction.py``).
A mixin of ``EmbeddingTable`` (``table.py``): it uses the table's lock, storage, index, format,
cold tier and counters.
"""

from collections.abc import Callable

import numpy as np

from cardinal.embedding.compaction import delete_rows
from cardinal.embedding.storage import Columns


class RowRemoval:
    def delete(self, ids: np.ndarray, log: bool = True) -> int:
        """Delete the rows of those unique ``ids`` that have one, in any tier; returns how many.
        ``log=False``: not a change a delta checkpoint records (a load replacing rows)."""
        with self.lock:
            rows = self.index.find(self.storage.columns().ids, ids)
            n = self._delete(rows[rows >= 0], moved=not log)
            if self.cold is not None and len(self.cold):
                cold = self.cold.get(ids[rows < 0])[1].ids
                self.cold.delete(cold)
                if log:
                    self.deleted.add(cold)
                n += len(cold)
            return n

    def demote(self, select: Callable[[Columns, int], np.ndarray]) -> int:
        """Move the RAM rows ``select(columns, size)`` names to the cold tier, ``cold.put_bytes`` of
        rows at a time (each piece all or nothing, put before RAM lets go of it); returns how many."""
        with self.lock:
            ids = self.storage.columns().ids[np.unique(select(self.storage.columns(), self.storage.size))]
            per = max(1, self.cold.put_bytes // (4 * self.portable_width + 16)) if self.cold.put_bytes else len(ids)
            moved = 0
            for lo in range(0, len(ids), per):  # by id: a piece's deletion moves other rows' numbers
                rows = self.index.find(self.storage.columns().ids, ids[lo:lo + per])
                self.cold.put(self._ram_rows(rows))
                self.demoted += len(rows)
                moved += self._delete(rows, moved=True)
            return moved

    def evict_cold(self, select: Callable[[Columns], np.ndarray], reason: str) -> int:
        """Delete the cold rows whose ids ``select`` names, called on every chunk of the tier in
        turn and once more with None at the end (for selections that need the whole tier)."""
        with self.lock:
            dead = [select(chunk) for chunk in self.cold.chunks()] + [select(None)]
            dead = np.unique(np.concatenate(dead))
            self.cold.delete(dead)
            self.deleted.add(dead)
            self.evicted[reason] = self.evicted.get(reason, 0) + len(dead)
            return len(dead)

    def evict(self, select: Callable[[Columns, int], np.ndarray], reason: str) -> int:
        """Delete the rows ``select(columns, size)`` names (row numbers), reading and deleting
        under one hold of the lock; counted under ``reason``. Returns how many."""
        with self.lock:
            n = self._delete(select(self.storage.columns(), self.storage.size))
            self.evicted[reason] = self.evicted.get(reason, 0) + n
            return n

    def _delete(self, rows: np.ndarray, moved: bool = False) -> int:
        """Delete RAM rows; unless they ``moved`` (to the cold tier, or are being replaced), their ids
        are logged as deleted."""
        size, rows = self.storage.size, np.unique(np.asarray(rows, np.int64))
        if not moved and len(rows):
            self.deleted.add(self.storage.columns().ids[rows])
        self.format.release(self.storage.columns().data, rows)
        self.storage.shrink(delete_rows(self.index, self.storage.columns(), size, rows))
        return size - self.storage.size

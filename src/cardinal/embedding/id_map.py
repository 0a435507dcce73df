"""``IdMap``: id -> slot, for a table whose ids share rows (``clustered_table.py``: Saec's frozen map)."""

import numpy as np

from cardinal.embedding.compaction import delete_rows
from cardinal.embedding.index import IdIndex
from cardinal.embedding.storage import Columns, MemoryRowStorage


class IdMap:
    """id -> slot, with each id's count and last step: a ``MemoryRowStorage`` of one word a row (the
    slot's int32 bits) behind an ``IdIndex``, so rows stay dense and deletable like a table's."""

    def __init__(self, capacity: int = 1024):
        self.storage = MemoryRowStorage(1, capacity)
        self.index = IdIndex(capacity)

    def __len__(self) -> int:
        return self.storage.size

    @property
    def nbytes(self) -> int:
        return self.storage.nbytes + self.index.nbytes

    def columns(self) -> Columns:
        return self.storage.columns()

    def find(self, ids: np.ndarray) -> np.ndarray:
        """(n,) int64: the map row of each id, -1 where absent."""
        return self.index.find(self.storage.columns().ids, ids)

    def slots(self, rows: np.ndarray) -> np.ndarray:
        """(n,) int64: the slot of each map row (rows >= 0)."""
        return self.storage.columns().data[:, 0].view(np.int32)[rows].astype(np.int64)

    def insert(self, ids: np.ndarray, slots: np.ndarray, count: np.ndarray | None = None,
               last_step: np.ndarray | None = None) -> None:
        """New entries: ``ids`` (n,) unique and absent, their slots, counts and last steps (0 if None)."""
        n = self.storage.size
        self.storage.reserve(n + len(ids))
        cols = self.storage.columns()
        rows, n_new = self.index.find_or_insert(cols.ids, n, ids)
        assert n_new == n + len(ids), "map entries inserted must be new and unique"
        cols.data[:, 0].view(np.int32)[rows] = slots
        cols.count[rows] = 0 if count is None else count
        cols.last_step[rows] = 0 if last_step is None else last_step
        self.storage.size = n_new

    def delete(self, rows: np.ndarray) -> int:
        size = self.storage.size
        self.storage.shrink(delete_rows(self.index, self.storage.columns(), size, rows))
        return size - self.storage.size

    def check(self) -> None:
        self.index.check(self.storage.columns().ids, self.storage.size)

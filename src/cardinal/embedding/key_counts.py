"""A compiled int64 id -> uint32 count map with deletion: the exact admission filter's state.

The same collisionless index as a table's (``index.py``) over two dense columns, ids and
counts; deleted entries are compacted away as a table's rows are (``compaction.py``).
"""

import numpy as np

from cardinal.embedding.arena import Arena
from cardinal.embedding.compaction import delete_rows
from cardinal.embedding.index import IdIndex


class KeyCounts:
    def __init__(self):
        self.index = IdIndex()
        self._ids = Arena(np.int64)
        self._counts = Arena(np.uint32)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self.size * 12 + self.index.nbytes

    def get(self, keys: np.ndarray) -> np.ndarray:
        """(n,) uint32: the count of each key, 0 where absent."""
        rows = self.index.find(self._ids.array, keys)
        out = np.zeros(len(keys), np.uint32)
        found = rows >= 0
        out[found] = self._counts.array[rows[found]]
        return out

    def set(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """counts[i] for keys[i] (unique), inserting absent keys."""
        if len(keys) == 0:
            return
        for arena in (self._ids, self._counts):
            arena.reserve(self.size + len(keys))
        rows, self.size = self.index.find_or_insert(self._ids.array, self.size, keys)
        self._counts.array[rows] = counts

    def remove(self, keys: np.ndarray) -> None:
        """Drop the keys present (unique); absent ones are ignored."""
        rows = self.index.find(self._ids.array, keys)
        dead = rows[rows >= 0]
        if len(dead) == 0:
            return
        size, self.size = self.size, delete_rows(self.index, (self._ids.array, self._counts.array), self.size, dead)
        for arena in (self._ids, self._counts):
            arena.truncate(size, self.size)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of (ids, counts) of every key, in row order."""
        return np.array(self._ids.array[:self.size]), np.array(self._counts.array[:self.size])

    def check(self) -> None:
        self.index.check(self._ids.array, self.size)

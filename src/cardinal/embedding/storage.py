"""Where a table's rows live: one strategy behind a small interface.

A ``RowStorage`` keeps, per row (rows [0, size) are the live ones, ``compaction.py``): the id, float32
words of values (as the table's row format stores them, ``formats/``) then optimizer state,
and the metadata later parts admit and evict on (times seen, last step touched). Kernels
work on its ``columns()``, plain arrays valid until the next ``reserve``.

``MemoryRowStorage`` keeps them in arenas that grow without copying (``arena.py``).
The disk tier (``tiers/``) holds the same columns.
"""

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from cardinal.embedding.arena import Arena


class Columns(NamedTuple):
    ids: np.ndarray        # (capacity,) int64
    data: np.ndarray       # (capacity, width) float32 words: encoded values, then optimizer state
    count: np.ndarray      # (capacity,) uint32: times pulled for training
    last_step: np.ndarray  # (capacity,) uint32: last step that pulled or pushed the row


class RowStorage(ABC):
    width: int
    size: int  # rows in use: rows [0, size) are live

    @abstractmethod
    def reserve(self, n: int) -> None:
        """Make room for ``n`` rows; invalidates arrays from earlier ``columns()`` calls."""

    @abstractmethod
    def columns(self) -> Columns:
        """The arrays behind the rows (over the capacity; rows [0, size) are live)."""

    @abstractmethod
    def shrink(self, n: int) -> None:
        """Rows [n, size) are gone (``compaction.py`` moved the live ones below n): size = n,
        and their memory may go back to the OS."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the live rows account for."""


class MemoryRowStorage(RowStorage):
    def __init__(self, width: int, capacity: int = 1024):
        self.width = width
        self.size = 0
        self._ids = Arena(np.int64, capacity=capacity)
        self._data = Arena(np.float32, (width,), capacity=capacity)
        self._count = Arena(np.uint32, capacity=capacity)
        self._step = Arena(np.uint32, capacity=capacity)

    def reserve(self, n: int) -> None:
        for arena in (self._ids, self._data, self._count, self._step):
            arena.reserve(n)

    def columns(self) -> Columns:
        return Columns(self._ids.array, self._data.array, self._count.array, self._step.array)

    def shrink(self, n: int) -> None:
        assert 0 <= n <= self.size
        for arena in (self._ids, self._data, self._count, self._step):
            arena.truncate(self.size, n)  # new rows start from zeros (optimizer state, count, step)
        self.size = n

    @property
    def nbytes(self) -> int:
        return self.size * (8 + 4 * self.width + 4 + 4)

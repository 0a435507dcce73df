"""A cold tier: rows a table keeps off its RAM columns, by id.

The RAM columns (``storage.py``) hold the rows a table reads and updates; a cold tier holds
the rest, whole (values, optimizer state, count, last step), so that a row written back and
read in again is bit for bit the row that left. Rows are only ever updated in RAM: a training
request first moves the rows it needs in (``take``), the store's memory budget moves the
coldest out (``put``). A row lives in exactly one tier at a time.

A cold tier is scratch space, never a checkpoint: checkpoints export every tier's rows, and a
restarted server rebuilds its tiers from the last checkpoint. So a crash while a tier is
written costs nothing that a checkpoint holds.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np

from cardinal.embedding.storage import Columns


class ColdTier(ABC):
    width: int  # float32 words of values and optimizer state per row
    put_bytes: int = 0  # bytes of rows a demotion hands to one ``put`` (0: all at once), so that its copies stay small

    @abstractmethod
    def put(self, rows: Columns) -> None:
        """Write rows (ids not in this tier) in, all or nothing."""

    @abstractmethod
    def get(self, ids: np.ndarray) -> tuple[np.ndarray, Columns]:
        """(found (n,) bool, the found rows in order of ``ids``); changes nothing."""

    @abstractmethod
    def delete(self, ids: np.ndarray) -> None:
        """Remove ``ids``, which must all be in this tier."""

    @abstractmethod
    def chunks(self, size: int = 1 << 16) -> Iterator[Columns]:
        """Every row, ``size`` at a time, in one fixed order."""

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def nbytes(self) -> int:
        """Bytes of the rows held (id, values and state, count, last step); what ps.memory.disk_budget bounds."""
        return len(self) * (8 + 4 * self.width + 8)

    @property
    def ram_bytes(self) -> int:
        """Bytes the tier keeps in RAM (counted in the RAM budget)."""
        return 0

    def settle(self) -> None:
        """Finish what the tier writes in the background, so that what it holds in RAM stops moving
        (a load holds the budget once more after it); nothing to do for a tier without such work."""

    def io_bytes(self) -> tuple[int, int]:
        """(bytes of rows put so far, bytes the tier wrote to its disk for them): their ratio is
        its write amplification. (0, 0) for a tier that does not know."""
        return 0, 0

    def take(self, ids: np.ndarray) -> Columns:
        """The rows of those unique ``ids`` that are here, removed from the tier."""
        found, rows = self.get(ids)
        if len(rows.ids):
            self.delete(rows.ids)
        return rows

    def close(self) -> None:
        """Release the tier's files."""

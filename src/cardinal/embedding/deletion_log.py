"""``DeletionLog``: the ids a table deleted since its last checkpoint, for the next delta.

A delta checkpoint lists the ids deleted since its base so that a load deletes them too. Under
eviction a table deletes rows every few steps, and ids created and evicted between two saves
are logged too: a server at a 256 MiB budget held 90 MB of such ids at its save (benchmarks/
server_rss.py), memory no budget counted. So the log keeps each id once (it is made unique
whenever it doubles), its bytes count with the table's, and past ``cap`` bytes it lets go of
its ids and says so: the next checkpoint must then be a full one, which needs no log.
"""

import numpy as np

COMPACT_AT = 1 << 16  # ids logged before the first de-duplication


class DeletionLog:
    def __init__(self, cap: int = 0):
        self.cap = cap  # bytes the log may hold (0: no bound); a server sets it from its budget
        self.overflowed = False  # ids were let go since the last checkpoint: no delta can follow
        self._parts: list[np.ndarray] = []
        self._n = self._unique = 0

    @property
    def nbytes(self) -> int:
        return 8 * self._n

    def add(self, ids: np.ndarray) -> None:
        if self.overflowed or not len(ids):
            return
        self._parts.append(np.asarray(ids, np.int64))
        self._n += len(ids)
        if self._n > 2 * self._unique + COMPACT_AT or (self.cap and self.nbytes > self.cap):
            self._compact()

    def _compact(self) -> None:
        ids = np.unique(np.concatenate(self._parts))
        self._parts, self._n = [ids], len(ids)
        self._unique = self._n
        if self.cap and self.nbytes > self.cap:
            self._parts, self._n, self._unique, self.overflowed = [], 0, 0, True

    def take(self) -> np.ndarray | None:
        """The unique ids logged since the last ``take`` (None if they were let go); the log starts again."""
        ids = None if self.overflowed else np.unique(np.concatenate(self._parts)) if self._parts else \
            np.empty(0, np.int64)
        self._parts, self._n, self._unique, self.overflowed = [], 0, 0, False
        return ids

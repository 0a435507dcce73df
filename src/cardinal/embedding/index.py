"""The collisionless id -> row index of one table: open addressing over 64 sub-tables.

Why sub-tables: a single hash table must rehash every entry when it grows, which at 50M
ids is a pause of well over a second. Here each sub-table (1/64 of the ids) grows on its
own, so a pause is bounded by one sub-table's rehash. Their load limits are staggered
(0.6 ... 0.85 by sub-table number) so they do not all cross their limit in the same batch,
and the index's average load stays near the middle instead of see-sawing with each
doubling. A grown sub-table takes a fresh region at the end of the arenas and hands its old
pages back to the OS (``Arena.release``); nothing else moves.

The index stores row numbers, not ids: ``ids`` (row -> id) is owned by the row storage and
passed in, so an id is stored once. Row numbers are int32: 2^31 - 1 rows per table per shard.
"""

import numpy as np

from cardinal import parallel
from cardinal.embedding import index_kernels as K
from cardinal.embedding.arena import Arena
from cardinal.embedding.dedup import unique_inverse

MIN_CAP = 256
MAX_ROWS = 2**31 - 1


class IdIndex:
    def __init__(self, initial_capacity: int = 0):
        cap = max(MIN_CAP, _pow2(int(initial_capacity / 0.7 / K.N_SUB) + 1))
        self.sub_cap = np.full(K.N_SUB, cap, np.int64)
        self.sub_off = np.arange(K.N_SUB, dtype=np.int64) * cap
        self.sub_size = np.zeros(K.N_SUB, np.int64)
        self.limit = 0.6 + 0.25 * np.arange(K.N_SUB) / (K.N_SUB - 1)
        self._end = cap * K.N_SUB
        self.tags = Arena(np.uint8, capacity=self._end)
        self.slots = Arena(np.int32, capacity=self._end)
        self.grow_count = 0

    def __len__(self) -> int:
        return int(self.sub_size.sum())

    @property
    def nbytes(self) -> int:
        """Bytes of live index regions (freed regions are returned to the OS)."""
        return int(self.sub_cap.sum()) * 5

    def find(self, ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Row of each key, -1 where absent. Never inserts."""
        out = np.empty(len(keys), np.int64)
        tags, slots = self.tags.array, self.slots.array
        parallel.over_rows(0, len(keys), lambda lo, hi: K.find(tags, slots, self.sub_off, self.sub_cap,
                                                               ids, keys, out, lo, hi))
        return out

    def make_room(self, ids: np.ndarray, keys: np.ndarray) -> None:
        """Grow every sub-table that could pass its load limit if all ``keys`` were new.

        ``ids`` (row -> id, owned by the row storage) is read to rehash a grown sub-table.
        """
        incoming = np.zeros(K.N_SUB, np.int64)
        K.sub_counts(keys, incoming)
        worst = self.sub_size + incoming
        if len(self) + len(keys) > MAX_ROWS:
            raise ValueError(f"a table shard holds at most {MAX_ROWS} rows; use more shards")
        for p in np.flatnonzero(worst > self.sub_cap * self.limit):
            self._grow(ids, int(p), int(worst[p]))

    def find_or_insert(self, ids: np.ndarray, n_rows: int, keys: np.ndarray) -> tuple[np.ndarray, int]:
        """Rows of ``keys``; absent ones become rows n_rows, n_rows + 1, ... in order of first
        appearance (so numbering never depends on threads), their ids written to ``ids``.

        ``ids`` must have room for ``n_rows + len(keys)`` rows. Returns (rows, new row count).
        """
        rows = self.find(ids, keys)
        missing = np.flatnonzero(rows < 0)
        if len(missing) == 0:
            return rows, n_rows
        new, inverse = unique_inverse(keys[missing])
        self.append(ids, n_rows, new)
        rows[missing] = n_rows + inverse
        return rows, n_rows + len(new)

    def append(self, ids: np.ndarray, n_rows: int, keys: np.ndarray) -> None:
        """Point ``keys``, unique and absent (the caller found them missing), at new rows n_rows,
        n_rows + 1, ... in order, their ids written to ``ids`` (room for ``n_rows + len(keys)``)."""
        ids[n_rows:n_rows + len(keys)] = keys
        self.insert(ids, keys, np.arange(n_rows, n_rows + len(keys), dtype=np.int64))

    def insert(self, ids: np.ndarray, keys: np.ndarray, rows: np.ndarray) -> None:
        """Point absent, unique ``keys`` at ``rows`` (any rows: a worker cache reuses free slots);
        ``ids[rows]`` already holds them."""
        self.make_room(ids, keys)
        tags, slots = self.tags.array, self.slots.array
        parallel.over_slots(K.N_SUB, len(keys), lambda lo, hi: K.insert_new(tags, slots, self.sub_off, self.sub_cap,
                                                                   self.sub_size, keys, rows, lo, hi))

    def remove(self, ids: np.ndarray, keys: np.ndarray) -> None:
        """Remove ``keys`` (present, unique) before their rows are reused or moved."""
        tags, slots = self.tags.array, self.slots.array
        parallel.over_slots(K.N_SUB, len(keys), lambda lo, hi: K.remove(tags, slots, self.sub_off, self.sub_cap, self.sub_size,
                                                              ids, keys, lo, hi))

    def relink(self, ids: np.ndarray, keys: np.ndarray, rows: np.ndarray) -> None:
        """Point present ``keys`` at ``rows``: their rows are about to move there."""
        tags, slots = self.tags.array, self.slots.array
        parallel.over_slots(K.N_SUB, len(keys), lambda lo, hi: K.relink(tags, slots, self.sub_off, self.sub_cap,
                                                              ids, keys, rows, lo, hi))

    def _grow(self, ids: np.ndarray, p: int, need: int) -> None:
        cap = int(self.sub_cap[p])
        new_cap = cap * 2
        while need > new_cap * self.limit[p]:
            new_cap *= 2
        old_off, new_off = int(self.sub_off[p]), self._end
        self._end += new_cap
        self.tags.reserve(self._end)
        self.slots.reserve(self._end)
        K.rehash(self.tags.array, self.slots.array, old_off, cap, new_off, new_cap, ids)
        self.tags.array[old_off:old_off + cap] = 0
        self.tags.release(old_off, old_off + cap)
        self.slots.release(old_off, old_off + cap)
        self.sub_off[p], self.sub_cap[p] = new_off, new_cap
        self.grow_count += 1

    def check(self, ids: np.ndarray, n_rows: int) -> None:
        """Invariants: sizes match occupied slots, and every row's id finds that row."""
        live = np.zeros(K.N_SUB, np.int64)
        K.count_live(self.tags.array, self.sub_off, self.sub_cap, live)
        assert np.array_equal(live, self.sub_size), "index sub-table sizes disagree with occupied slots"
        assert live.sum() == n_rows, f"index holds {live.sum()} ids but storage holds {n_rows} rows"
        rows = self.find(ids, ids[:n_rows])
        assert np.array_equal(rows, np.arange(n_rows)), "an id does not find its own row"
        assert (self.sub_size <= self.sub_cap * self.limit).all(), "a sub-table is past its load limit"


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())

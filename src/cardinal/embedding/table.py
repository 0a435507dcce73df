"""One embedding table (or one shard of it): int64 id -> row, with its sparse optimizer.

    table = EmbeddingTable(TableConfig("user", dim=16), make_optimizer({"name": "adam"}))
    rows = table.pull(np.array([42, -7], np.int64), step=1)    # creates rows on first sight
    table.push(np.array([42, 42]), grads, step=1)              # duplicates summed, then one update

No vocabulary and no collisions: any int64 is an id, and a new id gets a new row whose
values depend only on (seed, id), unless an admission filter (``admission/``) holds it back
until it has been seen often enough: until then it reads zeros and its gradients are
dropped. Rows can be deleted (``delete``, ``evict``); the live rows stay 0..size-1
(``compaction.py``). With a cold tier (``tiers/``) rows may also live off the RAM columns: a
training request moves the rows it needs back in first, so every update happens in RAM and a
run gives the same bits whichever tier held a row in between (``demote`` moves rows out). Values
may be stored at lower precision (``formats/``: fp16, bf16, int8): pulls decode, pushes run the
optimizer on decoded float32 rows and encode them back; or in chunks that a row keeps only while
they are worth their memory (``chunks > 1``, ``formats/chunked.py``, passes by ``adjust_dims``).
Whole-table paths (export, checkpoints, the cold tier, digests, checks) see rows in the format's
portable form (``formats/base.py``). A lookup-only pull (``create=False``) never inserts and
returns zeros for unknown ids. Callers validate requests (``ps/validate.py``); the table
asserts only its invariants. One lock per table: kernels release the GIL, so different
tables (and shards) update in parallel threads. A ``Table`` (``protocol.py``) for the store, as the
clustered one is (``clustered_table.py``); its settings are a ``TableConfig`` (``table_config.py``).
"""

import threading

import numpy as np

from cardinal import parallel
from cardinal.embedding import row_kernels as RK
from cardinal.embedding.admission import AdmissionFilter
from cardinal.embedding.deletion_log import DeletionLog
from cardinal.embedding.dedup import segment_max, segment_sum, unique_inverse
from cardinal.embedding.formats.rounding import INIT_STEP
from cardinal.embedding.hashing import init_rows
from cardinal.embedding.index import IdIndex
from cardinal.embedding.index_kernels import find_copy
from cardinal.embedding.protocol import Admit, check_out
from cardinal.embedding.storage import MemoryRowStorage, RowStorage
from cardinal.embedding.table_config import TableConfig, bind, make_format, portable_width, stored_width  # noqa: F401
from cardinal.embedding.table_removal import RowRemoval
from cardinal.embedding.table_views import WholeTableViews
from cardinal.embedding.tiers import ColdTier
from cardinal.optim import SparseOptimizer
from cardinal.optim.base import Update

TRY_BLOCK_BYTES = 512 << 10  # rows updated per block: still in (one core's) L2 when checked
PROBE = 4096  # a push's first ids, found alone: unless they are distinct rows it de-duplicates first (raw draws)


class NonFiniteUpdate(ValueError):
    """A push whose result would hold NaN or Inf: refused whole, nothing changed."""


class EmbeddingTable(RowRemoval, WholeTableViews):
    """A ``Table`` (``protocol.py``) of a row per id: pull and push here, removing rows in
    ``table_removal.py``, whole-table views (checkpoints, digests, checks) in ``table_views.py``.
    ``schedule``: what it runs after a push (``after_push.py``: a chunked table's passes, a
    clustering), None for nothing."""

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer,
                 storage: RowStorage | None = None, capacity: int = 1024, admission: AdmissionFilter | None = None,
                 cold: ColdTier | None = None, schedule=None):
        self.config = config
        self.dim = config.dim
        self.optimizer = optimizer = bind(config, optimizer)
        self.format = make_format(config, optimizer)
        width = self.format.width(self.dim, optimizer.state_width(self.dim))
        self.portable_width = self.format.portable_width(self.dim, optimizer.state_width(self.dim))
        self.storage = storage if storage is not None else MemoryRowStorage(width, capacity)
        assert self.storage.width == width
        self.index = IdIndex(capacity)
        self.lock = threading.RLock()  # re-entrant: a store holds every table's lock at once to save a shard
        self._backup = np.empty((0, self.portable_width), np.float32)  # rows a push updates, portable (lock held)
        self._marks = np.zeros(0, np.uint64)  # a bit per row, all zero between pushes (``_found``)
        self.admission = admission
        self.cold = cold
        assert cold is None or cold.width == self.portable_width
        self.created = 0   # rows made by training pulls
        self.refused = 0   # sightings of ids the filter did not admit (pulls)
        self.dropped = 0   # gradient rows of ids without a row, dropped (pushes, with a filter)
        self.evicted: dict[str, int] = {}  # rows deleted, by reason
        self.faulted = 0   # rows read back in from the cold tier...
        self.requested = 0  # ... of the ids training requests asked for while it held rows
        self.deleted = DeletionLog()  # ids deleted (not moved between tiers), for delta checkpoints
        self.demoted = 0   # rows written out to it
        self.schedule = schedule

    def __len__(self) -> int:
        """Rows in every tier."""
        return self.storage.size + (len(self.cold) if self.cold is not None else 0)

    @property
    def nbytes(self) -> int:
        """Bytes in RAM: the rows there, the index, the admission filter's state, the cold tier's key
        filter, the log of deleted ids."""
        return self.row_bytes + self.index.nbytes + (self.admission.nbytes if self.admission else 0) \
            + (self.cold.ram_bytes if self.cold is not None else 0) + self.deleted.nbytes

    @property
    def row_bytes(self) -> int:
        """Bytes of the RAM rows: their words, and what the format holds for them outside (chunks)."""
        return self.storage.nbytes + self.format.extra_bytes

    @property
    def cold_bytes(self) -> int:
        return self.cold.nbytes if self.cold is not None else 0

    @property
    def cold_rows(self) -> int:
        return len(self.cold) if self.cold is not None else 0

    @property
    def cold_ram_bytes(self) -> int:
        return self.cold.ram_bytes if self.cold is not None else 0

    def settle(self) -> None:
        if self.cold is not None:
            self.cold.settle()

    @property
    def tiered(self) -> bool:
        """Rows leaving RAM go to the cold tier (``demote``) rather than being deleted."""
        return self.cold is not None

    def close(self) -> None:
        if self.cold is not None:
            self.cold.close()

    def stats(self) -> dict:
        """Rows, bytes and counters: this table's entry of a Stats reply."""
        s = {"rows": len(self), "bytes": self.nbytes, "dim": self.dim, "optimizer": self.optimizer.name,
             "admission": self.admission.name if self.admission else "none",
             "admission_bytes": self.admission.nbytes if self.admission else 0,
             "created": self.created, "refused": self.refused, "dropped": self.dropped, "evicted": dict(self.evicted),
             "ram_rows": self.storage.size, "disk_rows": len(self) - self.storage.size, "disk_bytes": self.cold_bytes,
             "faulted": self.faulted, "demoted": self.demoted, "requested": self.requested,
             "disk_io": self.cold.io_bytes() if self.cold is not None else (0, 0)}
        if self.config.chunks > 1:
            s["live_chunks"] = self.format.live
        return s

    def pull(self, ids: np.ndarray, *, create: bool = True, step: int = 0, admit: Admit | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Rows of ``ids`` (n,) int64 as (n, dim) float32, written into ``out`` when given (a reply
        being built: ``ps/transport/buffers.py``).

        ``create=True`` (training) inserts unknown ids and counts a sighting of each;
        ``create=False`` (evaluation, serving) changes nothing and gives zeros for unknown ids.
        ``admit(n_new, table)`` is asked before any row is created or sighting counted; it may raise
        to refuse the request, which then changes nothing. With an admission filter only the
        ids it admits get rows; the others read zeros and their sighting is counted.
        """
        out = np.empty((len(ids), self.dim), np.float32) if out is None else check_out(out, len(ids), self.dim)
        rows = np.empty(len(ids), np.int64)
        step = np.uint32(step)
        with self.lock:
            if create:
                self._fault_in(ids)
            self._lookup(ids, rows, out)
            if not create:
                self._read_cold(ids, rows, out)
                return out
            missing = np.flatnonzero(rows < 0)
            if len(missing):
                new_ids = ids[missing]
                unique, inverse = unique_inverse(new_ids)
                decision = self.admission.decide(unique, int(step)) if self.admission is not None else None
                admitted = unique if decision is None else unique[decision.admitted]
                release = admit(len(admitted), self) if admit is not None else None
                try:
                    if decision is None:
                        rows[missing] = self._rows(unique)[inverse]
                    elif len(admitted):
                        self._rows(admitted)
                finally:
                    if release is not None:
                        release()
                self.created += len(unique) if decision is None else len(admitted)
                if decision is not None:  # the request went through: count the sightings
                    decision.commit()
                    self.refused += len(unique) - len(admitted)
                    rows[missing] = self.index.find(self.storage.columns().ids, new_ids)
                part = np.empty((len(missing), self.dim), np.float32)
                self.format.decode(self.storage.columns().data, rows[missing], self.dim, part)
                out[missing] = part
            cols = self.storage.columns()
            RK.touch(cols.count, cols.last_step, rows, step, True)
        return out

    def has(self, ids: np.ndarray) -> np.ndarray:
        """(n,) bool: which ids have a row. Changes nothing."""
        with self.lock:
            found = self.index.find(self.storage.columns().ids, ids) >= 0
            if self.cold is not None and len(self.cold) and not found.all():
                found[~found] = self.cold.get(ids[~found])[0]
            return found

    def _fault_in(self, ids: np.ndarray) -> None:
        """Move the rows of ``ids`` that are in the cold tier into RAM, exactly as they left (lock held)."""
        if self.cold is None or len(self.cold) == 0:
            return
        self.requested += len(ids)
        absent = ids[self.index.find(self.storage.columns().ids, ids) < 0]
        if len(absent) == 0:
            return
        rows = self.cold.get(unique_inverse(absent)[0])[1]
        if len(rows.ids):
            self._insert(rows)
            self.cold.delete(rows.ids)
            self.faulted += len(rows.ids)

    def _read_cold(self, ids, rows, out) -> None:
        """Fill in ``out`` for the ids without a RAM row from the cold tier, moving nothing (lock held)."""
        missing = np.flatnonzero(rows < 0)
        if self.cold is None or len(self.cold) == 0 or len(missing) == 0:
            return
        found, cold = self.cold.get(ids[missing])
        out[missing[found]] = self.cold_values(cold.data)

    def _lookup(self, ids, rows, out) -> None:
        """The fast path of a pull, in parallel by positions (lock held); sightings are counted
        after. The arena views are locals: they are gone before anything may grow the arenas."""
        cols, ix = self.storage.columns(), self.index
        if not self.format.exact:  # find, then decode
            rows[:] = ix.find(cols.ids, ids)
            self.format.decode(cols.data, rows, self.dim, out)
            return
        tags, slots = ix.tags.array, ix.slots.array
        parallel.over_rows(0, len(ids), lambda lo, hi: find_copy(
            tags, slots, ix.sub_off, ix.sub_cap, cols.ids, ids, rows, lo, hi, cols.data, out, self.dim))

    def push(self, ids: np.ndarray, grads: np.ndarray, *, step: int = 0, kind: str = "grad",
             admit: Admit | None = None, lr_scale: float = 1.0, counts: np.ndarray | None = None) -> None:
        """Apply the optimizer to the rows of ``ids`` (n,), gradients (n, dim) float32; or,
        with ``kind="delta"``, add the arrays to the rows' values (GEO-SGD: changes a worker
        made locally), leaving optimizer state alone.

        ``counts`` (n,) int32 >= 1 (gradient pushes only): how many updates each gradient row
        accumulates (a worker cache's pending sum), given to the optimizer; None is one each.

        Duplicate ids are summed in order of appearance first (their counts merge by max: parts of
        one update; a push with neither repeated nor unknown ids skips that work); unknown ids are
        created, or, with an admission filter, dropped (the filter admits ids at pulls). If any
        value or optimizer state would become NaN or Inf, ``NonFiniteUpdate`` is raised and the
        whole request changes nothing (no row created, none updated): new ids are tried on the
        rows they would start as, and existing rows are updated in place a cache-sized block at
        a time, each block copied first and checked while still in cache, every block restored
        from its copy at the first bad one.
        """
        optimizer = self.optimizer if lr_scale == 1.0 else self.optimizer.scaled(lr_scale)
        assert kind == "grad" or counts is None, "only gradient pushes carry counts (ps/validate.py)"
        with self.lock:
            found = self._found(ids)
            if found is not None and RK.distinct_rows(found, self._marks):  # summed as de-duplicated: 0 + g (+0.0)
                rows, unique, summed, merged = found, ids, grads + np.float32(0), counts
            else:
                unique, inverse = unique_inverse(ids)
                summed = segment_sum(grads, inverse, len(unique))
                merged = None if counts is None else segment_max(counts, inverse, len(unique))
                if found is None:
                    self._fault_in(unique)
                    rows = self.index.find(self.storage.columns().ids, unique)
                else:  # a repeated id has one row
                    rows = np.empty(len(unique), np.int64)
                    rows[inverse] = found
            cols = self.storage.columns()
            missing = np.flatnonzero(rows < 0)
            if len(missing) and self.admission is not None:  # not admitted: no row, the gradient is dropped
                self.dropped += len(missing)
                present = np.flatnonzero(rows >= 0)
                rows, unique, summed = rows[present], unique[present], summed[present]
                if merged is not None:
                    merged = merged[present]
                missing = missing[:0]
            update = Update(RK.add_values, (), self.dim) if kind == "delta" else optimizer.update(self.dim, merged)
            fresh, release = None, None
            if len(missing):  # the new rows, portable, not stored yet
                fresh = self._made(unique[missing], step, update, summed[missing], missing)
                bad = self.format.portable_form.first_nonfinite(fresh, np.arange(len(missing)), 0, len(missing),
                                                                self.dim)
                if bad >= 0:
                    raise self._non_finite(kind, unique[missing[bad]])
                release = admit(len(missing), self) if admit is not None else None
            try:
                if len(missing):
                    present = np.flatnonzero(rows >= 0)
                    self._update_in_place(cols.data, rows[present], summed[present], update, kind, unique[present],
                                          step, present)
                    cols = None  # the arenas may grow now: no view of them may be held (arena.py)
                    rows[missing] = self._rows(unique[missing], init=False)
                    cols = self.storage.columns()
                    self._place(cols.data, rows[missing], fresh)  # the tried rows, written
                    self.format.on_push(cols.data, rows[missing], summed[missing], self.dim)
                else:
                    self._update_in_place(cols.data, rows, summed, update, kind, unique, step)
            finally:
                if release is not None:
                    release()
            RK.touch(cols.count, cols.last_step, rows, np.uint32(step), False)

    def _found(self, ids: np.ndarray) -> np.ndarray | None:
        """Rows of ``ids`` (-1: absent); None if cold rows exist or the first PROBE are not distinct rows (lock held)."""
        if len(self._marks) * 64 < self.storage.size:  # a bit per row for ``distinct_rows``, all zero between calls
            self._marks = np.zeros(2 * self.storage.size // 64 + 1, np.uint64)
        known = self.storage.columns().ids
        head = None if self.cold is not None and len(self.cold) else self.index.find(known, ids[:PROBE])
        if head is None or not RK.distinct_rows(head, self._marks):
            return None
        return np.concatenate([head, self.index.find(known, ids[PROBE:])])

    def _update_in_place(self, data, rows, summed, update, kind, ids, step, at: np.ndarray | None = None) -> None:
        """``update`` block by block; at the first non-finite result every block is restored.
        ``ids``: the ids of ``rows``; ``at``: the positions of ``rows`` among the push's unique ids
        (None: all of them, in order). fp32 rows are updated on the kernel threads, each taking a
        range of the (unique) rows, block by block, stopping at its first bad block; then every
        row updated is restored and the first bad id in order is named, as one thread would. A row
        format other than fp32 runs each block itself, in order (``RowFormat.push_block``: decoded,
        updated, encoded back; chunked rows in place)."""
        if self._backup.shape[0] < len(rows):  # kept: a fresh array each push would fault its pages in
            self._backup = np.empty((max(len(rows), 2 * self._backup.shape[0]), self.portable_width), np.float32)
        block = max(64, TRY_BLOCK_BYTES // (4 * data.shape[1]))
        reached = {}  # first row of a range -> (end of the rows it updated, first bad row or -1)

        def blocks(start, stop):
            for lo in range(start, stop, block):
                hi = min(lo + block, stop)
                pos = slice(lo, hi) if at is None else at[lo:hi]
                if self.format.exact:
                    RK.copy_rows(data, rows, lo, hi, self._backup)
                    self.format.on_push(data, rows[lo:hi], summed[lo:hi], self.dim)
                    update(data, rows[lo:hi], summed[lo:hi], pos)
                    bad = self.format.first_nonfinite(data, rows, lo, hi, self.dim)
                else:
                    bad = self.format.push_block(data, rows[lo:hi], summed[lo:hi], update, pos,
                                                 self._backup[lo:hi], self.dim, ids[lo:hi], step)
                    bad = lo + bad if bad >= 0 else -1
                if bad >= 0:
                    reached[start] = (hi, bad)
                    return
            reached[start] = (stop, -1)

        if self.format.exact:
            parallel.over_rows(0, len(rows), blocks)
        else:
            blocks(0, len(rows))
        bad = [b for _, b in reached.values() if b >= 0]
        if bad:
            for start, (hi, _) in reached.items():
                self._place(data, rows[start:hi], self._backup[start:hi])
            raise self._non_finite(kind, ids[min(bad)])

    def _place(self, data, rows: np.ndarray, portable: np.ndarray) -> None:
        """Rows ``rows`` of ``data`` hold the portable rows ``portable`` (fp32: the words, by a compiled copy)."""
        if self.format.exact:
            RK.restore_rows(data, rows, len(rows), portable)
        else:
            self.format.place(data, rows, portable, self.dim)

    def _made(self, ids: np.ndarray, step: int, update=None, g=None, at=None) -> np.ndarray:
        """The portable rows new ``ids`` start as (after ``update(work, all, g, at)`` if given), values
        encoded at ``step``; not stored."""
        work = self._fresh(ids)
        if update is not None:
            self.format.mask_new(g)
            update(work, np.arange(len(ids), dtype=np.int64), g, at)
        return work if self.format.exact else self.format.from_working(work, ids, step, self.dim)

    def _fresh(self, ids: np.ndarray) -> np.ndarray:
        """The working rows (float32 values, then optimizer state) new ``ids`` would start as, not stored."""
        fresh = np.zeros((len(ids), self.dim + self.optimizer.state_width(self.dim)), np.float32)
        init_rows(ids, fresh, 0, len(ids), self.dim, np.int64(self.config.seed), np.float32(self.config.init_scale),
                  self.config.first_column)
        self.optimizer.init_state(fresh, 0, len(ids), self.dim)
        return fresh

    def _non_finite(self, kind: str, id_) -> "NonFiniteUpdate":
        return NonFiniteUpdate(f"table {self.config.name!r}: this {kind} push would make the row of id {int(id_)} "
                               "(values or optimizer state) NaN or Inf; nothing was changed: lower the learning "
                               "rate or clip gradients")

    def _rows(self, ids: np.ndarray, init: bool = True) -> np.ndarray:
        """New rows for ``ids``, unique and without a RAM row (the caller found them missing): rows
        size, size + 1, ... in order, initialised, or (``init=False``) left as zeros for the caller
        to ``_place`` at once (lock held)."""
        n = self.storage.size
        n_new = n + len(ids)
        self.storage.reserve(n_new)
        cols = self.storage.columns()
        self.index.append(cols.ids, n, ids)
        rows = np.arange(n, n_new, dtype=np.int64)
        if n_new > n and init and self.format.exact:
            seed, scale = np.int64(self.config.seed), np.float32(self.config.init_scale)
            parallel.over_rows(n, n_new, lambda lo, hi: init_rows(cols.ids, cols.data, lo, hi, self.dim, seed, scale,
                                                                    self.config.first_column))
            self.optimizer.init_state(cols.data, n, n_new, self.dim)
        elif n_new > n and init:
            self.format.place(cols.data, np.arange(n, n_new), self._made(cols.ids[n:n_new], INIT_STEP), self.dim)
        self.storage.size = n_new
        return rows

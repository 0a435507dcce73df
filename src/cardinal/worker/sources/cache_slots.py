"""``Slots``: one table's cached rows, preallocated, and what the cache knows of each.

    rows      (slots, dim) float32 on the device    the row as fetched, plus this worker's own
                                                    gradients since, applied here (``follow``)
    pending   (slots, dim) float32 on the device    gradients accumulated, not pushed yet
    state     (slots, width) float32 on the host    the sparse optimizer's state for ``follow``:
                                                    local, fresh when the row is cached, kept
                                                    across refreshes (the servers send values only)
    ids       (slots,) int64, where ``used``    index: id -> slot (``embedding/index.py``, compiled)
    count     (slots,) int32   gradients in pending (0..h)
    behind    (slots,) int32   steps the row lacks that the servers applied (own: k per pushed sum of k;
                               others: one per update), as far as known
    seen      (slots,) int64   the step of the servers' clock the fetched row surely reflects
    shard     (slots,) int64   the id's shard (whose update log reports on it)
    last_used, uses            for the eviction policy

Row data lives on the device and is only touched with torch ops, so the same code serves a
cache in GPU memory or in RAM; the bookkeeping (small per-slot numbers and the id map) stays
in numpy on the host, where the decisions are made. The id map is the tables' own compiled
index, not a Python dict: a lookup of a batch's ids is one kernel call, not a loop of dict gets.
``follow`` runs the servers' own optimizer kernel on the host, over a copy of the rows it moves.
"""

import numpy as np
import torch

from cardinal.embedding.index import IdIndex
from cardinal.optim import SparseOptimizer
from cardinal.worker.sources.cache_policy import EvictionPolicy

# host bytes per slot besides its rows and state: the arrays above, ``used``, and the index's 5 bytes a
# slot at a load of 0.6 to 0.85, up to twice that just after a sub-table grew
META_BYTES = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 1 + 16


def slot_bytes(dim: int, state_width: int) -> int:
    """What one slot costs: its row, its pending sum, its optimizer state and META_BYTES."""
    return 4 * (2 * dim + state_width) + META_BYTES


def slots_for(capacity_bytes: int, dim: int, state_width: int) -> int:
    """How many rows ``capacity_bytes`` hold."""
    return capacity_bytes // slot_bytes(dim, state_width)


class Slots:
    def __init__(self, n: int, dim: int, device: torch.device, optimizer: SparseOptimizer):
        self.n, self.dim, self.device, self.optimizer = n, dim, device, optimizer
        self.rows = torch.zeros((n, dim), dtype=torch.float32, device=device)
        self.pending = torch.zeros((n, dim), dtype=torch.float32, device=device)
        width = optimizer.state_width(dim)
        self.state = np.zeros((n, width), np.float32)
        fresh = np.zeros((1, dim + width), np.float32)
        optimizer.init_state(fresh, 0, 1, dim)
        self.fresh_state = fresh[0, dim:]  # a new row's state, as the servers start it
        self.ids = np.full(n, -1, np.int64)
        self.count = np.zeros(n, np.int32)
        self.behind = np.zeros(n, np.int32)
        self.seen = np.zeros(n, np.int64)
        self.shard = np.zeros(n, np.int64)
        self.last_used = np.zeros(n, np.int64)
        self.uses = np.zeros(n, np.int64)
        self.used = np.zeros(n, bool)  # apart from ``ids``: any int64 is an id, -1 too
        self.index = IdIndex(n)

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """(n,) slot of each id, -1 where not cached."""
        return self.index.find(self.ids, ids)

    def occupied(self) -> np.ndarray:
        """The slots holding a row."""
        return np.flatnonzero(self.used)

    def insert(self, ids: np.ndarray, values: torch.Tensor, seen: int, shards: np.ndarray, step: int,
               policy: EvictionPolicy) -> tuple[np.ndarray, tuple]:
        """Cache ``ids`` (not cached yet) with their fetched rows; evicts by ``policy`` among slots
        not used at ``step``. Returns (mask of the ids cached, the evicted slots' pending
        (ids, sums, counts), how many slots were evicted)."""
        free = np.flatnonzero(~self.used)
        need = len(ids) - len(free)
        evicted, victims = _EMPTY, free[:0]
        if need > 0:
            eligible = self.used & (self.last_used < step)
            victims = policy.victims(self.last_used, self.uses, eligible, need)
            evicted = self.take_pending(victims)
            self.free(victims)
            free = np.concatenate([free, victims])
        k = min(len(free), len(ids))
        slots, cached = free[:k], np.zeros(len(ids), bool)
        cached[:k] = True  # the first ones in pull order, when there is room for fewer
        if k:
            self.rows[torch.from_numpy(slots).to(self.device)] = values[:k]
            self.state[slots] = self.fresh_state
            self.ids[slots] = ids[:k]
            self.used[slots] = True
            self.index.insert(self.ids, ids[:k], slots)
            self.count[slots] = 0
            self.behind[slots] = 0
            self.seen[slots] = seen
            self.shard[slots] = shards[:k]
            self.last_used[slots] = step
            self.uses[slots] = 0
        return cached, evicted, len(victims)

    def refresh(self, slots: np.ndarray, values: torch.Tensor, seen: int) -> None:
        """Fetched again: the rows are current (their pending gradients stay, still unpushed)."""
        self.rows[torch.from_numpy(slots).to(self.device)] = values
        self.behind[slots] = 0
        self.seen[slots] = seen

    def follow(self, slots: np.ndarray, grads: np.ndarray, counts: np.ndarray | None) -> None:
        """Apply this worker's own gradients (``grads`` (k, dim) float32 on the host; ``counts``:
        updates each sums, or None) to the rows of ``slots`` (unique), as the servers' optimizer
        does, with the slots' local state."""
        if not len(slots):
            return
        index = torch.from_numpy(slots).to(self.device)
        work = np.empty((len(slots), self.dim + self.state.shape[1]), np.float32)  # [values | state], as a table row
        work[:, :self.dim] = self.rows[index].cpu().numpy()
        work[:, self.dim:] = self.state[slots]
        self.optimizer.match_values(work, self.dim)
        self.optimizer.apply(work, np.arange(len(slots), dtype=np.int64), np.ascontiguousarray(grads, np.float32),
                             self.dim, counts)
        self.rows[index] = torch.from_numpy(work[:, :self.dim]).to(self.device)
        self.state[slots] = work[:, self.dim:]

    def take_pending(self, slots: np.ndarray) -> tuple:
        """(ids, sums (k, dim) float32 numpy, counts int32) of those ``slots`` holding gradients;
        their pending is cleared."""
        held = slots[self.count[slots] > 0]
        if not len(held):
            return _EMPTY
        index = torch.from_numpy(held).to(self.device)
        sums = self.pending[index].cpu().numpy()
        out = (self.ids[held].copy(), sums, self.count[held].copy())
        self.count[held] = 0
        return out

    def free(self, slots: np.ndarray) -> None:
        """Empty occupied ``slots`` (unique)."""
        self.index.remove(self.ids, self.ids[slots])
        self.used[slots] = False
        self.ids[slots] = -1
        self.count[slots] = 0

    def clear(self) -> None:
        self.free(self.occupied())


_EMPTY = (np.zeros(0, np.int64), None, np.zeros(0, np.int32))

"""What the worker cache keeps: eviction policies (LRU, LFU) and admission after n sightings.

Eviction picks victims among the slots a step has not used yet (a slot read by this step's
pull stays until its gradient is pushed), smallest score first:

    LRU  score = the last step that read the slot          (oldest goes first)
    LFU  score = how many accesses read it since cached     (rarest goes first; ties: oldest)

Admission counts how often each id was pulled in a count-min sketch (4 hashed rows of
counters, halved when their total passes a limit, so old popularity fades and memory stays
fixed); an id is cached once its estimate reaches ``admit_after``. The sketch only ever
over-estimates, so an id seen n times is always admitted, and a cold id is sometimes let in
early, which costs a slot, never correctness.
"""

from abc import ABC, abstractmethod

import numpy as np

POLICIES = ("lru", "lfu")
_MULTIPLIERS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93],
                        np.uint64)


class EvictionPolicy(ABC):
    name: str

    @abstractmethod
    def victims(self, last_used: np.ndarray, uses: np.ndarray, eligible: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` positions among ``eligible`` ones (bool mask), the first to go first."""


class LRU(EvictionPolicy):
    name = "lru"

    def victims(self, last_used, uses, eligible, k):
        candidates = np.flatnonzero(eligible)
        return _smallest(candidates, last_used[candidates], k)


class LFU(EvictionPolicy):
    name = "lfu"

    def victims(self, last_used, uses, eligible, k):
        candidates = np.flatnonzero(eligible)
        key = (np.minimum(uses[candidates], (1 << 30) - 1) << 32) | last_used[candidates]  # by uses, then by age
        return _smallest(candidates, key, k)


def _smallest(candidates: np.ndarray, key: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` candidates of smallest key, smallest first (deterministic: the same state, the same victims)."""
    if k < len(candidates):
        part = np.argpartition(key, k - 1)[:k] if k > 0 else np.zeros(0, np.int64)
        candidates, key = candidates[part], key[part]
    order = np.lexsort((candidates, key))
    return candidates[order[:k]]


def make_policy(name: str) -> EvictionPolicy:
    if name == "lru":
        return LRU()
    if name == "lfu":
        return LFU()
    raise ValueError(f"cache.policy must be one of {POLICIES}, got {name!r}")


class Admission:
    """Admit an id once it was pulled ``admit_after`` times (count-min estimate; <= 1: at once)."""

    def __init__(self, admit_after: int, width: int = 1 << 16, depth: int = 4):
        if isinstance(admit_after, bool) or not isinstance(admit_after, int) or admit_after < 0:
            raise ValueError(f"cache.admit_after must be an int >= 0, got {admit_after!r}")
        self.admit_after, self.width, self.depth = admit_after, width, depth
        self.counts = np.zeros((depth, width), np.uint32) if admit_after > 1 else None
        self.limit = 8 * width  # halve every counter once this many sightings were added

    def _columns(self, ids: np.ndarray) -> np.ndarray:
        """(depth, n) counter columns of ``ids``."""
        hashed = ids.astype(np.uint64)[None, :] * _MULTIPLIERS[:self.depth, None]
        return ((hashed >> np.uint64(40)) % np.uint64(self.width)).astype(np.int64)

    def see(self, ids: np.ndarray) -> np.ndarray:
        """Count one sighting of each of ``ids`` (unique); bool mask of those now admitted."""
        if self.counts is None:
            return np.ones(len(ids), bool)
        cols = self._columns(ids)
        rows = np.arange(self.depth)[:, None]
        np.add.at(self.counts, (np.broadcast_to(rows, cols.shape), cols), 1)
        if int(self.counts[0].sum()) > self.limit:
            self.counts >>= 1
        return self.counts[rows, cols].min(axis=0) >= self.admit_after

    def reset(self) -> None:
        if self.counts is not None:
            self.counts[:] = 0

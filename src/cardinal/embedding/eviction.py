"""Eviction policies: one ``score`` per row, the lowest scores go first.

A policy reads only what every row already carries (``storage.py``): its values, its times
seen (count) and the last step that pulled or pushed it. Scores are float64 over the live
rows [0, n); who is evicted, and when, is the store's business (``ps/server/memory.py``).

    lru      last_step                                   least recently used first
    lfu      count                                       least often used first
    l2       |values|                                    rows that stayed near zero first
    decayed  log(1 + count) + (step - last_step) log(decay)   a count that fades with age
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from cardinal.embedding.storage import Columns


class EvictionPolicy(ABC):
    name: ClassVar[str]

    @abstractmethod
    def score(self, cols: Columns, n: int, values: Callable[[np.ndarray], np.ndarray], step: int) -> np.ndarray:
        """(n,) float64: the worth of each live row; the lowest are evicted first. ``values(data)``
        decodes the values of stored rows (``formats/``)."""

    def key(self, cols: Columns, n: int) -> np.ndarray | None:
        """(n,) uint32 that orders the rows as ``score`` does, where there is one: the victims are
        then chosen from it in one compiled pass (``eviction_kernels.py``)."""
        return None


class LRU(EvictionPolicy):
    name = "lru"

    def score(self, cols, n, values, step):
        return cols.last_step[:n].astype(np.float64)

    def key(self, cols, n):
        return cols.last_step[:n]


class LFU(EvictionPolicy):
    name = "lfu"

    def score(self, cols, n, values, step):
        return cols.count[:n].astype(np.float64)

    def key(self, cols, n):
        return cols.count[:n]


class L2(EvictionPolicy):
    name = "l2"

    def score(self, cols, n, values, step):
        v = values(cols.data[:n])
        return np.sqrt(np.einsum("ij,ij->i", v, v, dtype=np.float64))


class Decayed(EvictionPolicy):
    name = "decayed"

    def __init__(self, decay: float = 0.99):
        assert 0 < decay <= 1
        self.decay = decay

    def score(self, cols, n, values, step):
        age = np.maximum(np.int64(step) - cols.last_step[:n].astype(np.int64), 0)
        return np.log1p(cols.count[:n].astype(np.float64)) + age * np.log(self.decay)


POLICIES = {p.name: p for p in (LRU, LFU, L2, Decayed)}


def make_policy(name: str, decay: float = 0.99) -> EvictionPolicy:
    """A policy by name (``cardinal.recipe.eviction.EVICTION_POLICIES``, checked when the recipe loads)."""
    return Decayed(decay) if name == "decayed" else POLICIES[name]()


def lowest(scores: np.ndarray, k: int) -> np.ndarray:
    """Row numbers of the ``k`` lowest finite scores (ties: a fixed order, the same every run)."""
    k = min(k, int(np.isfinite(scores).sum()))
    if k <= 0:
        return np.empty(0, np.int64)
    if k >= len(scores):
        return np.arange(len(scores), dtype=np.int64)
    return np.argpartition(scores, k - 1)[:k].astype(np.int64)

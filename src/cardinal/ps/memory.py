"""A shard's memory: one byte budget for all its tables, time-to-live sweeps, eviction.

After each request that may create rows (training pulls, pushes) the store calls
``Memory.after``; it is cheap unless there is work:

- **TTL**: every ``every`` steps, rows not pulled or pushed for ``ttl_steps`` steps, or for
  ``ttl_seconds`` by this server's clock (Paddle's ``delete_after_unseen_days``), are deleted.
  Wall time maps to steps through the time each step was first seen here, so rows carry no
  clock of their own.
- **Budget**: when the tables' bytes (rows, index, admission filters: ``EmbeddingTable.nbytes``)
  pass ``budget``, the lowest-scored rows (``embedding/eviction.py``) are deleted until they are
  back under LOW_WATER x budget. Each table gives up rows in proportion to its share of the row
  bytes, so a table is never emptied for another's growth.

Rows touched in the last ``protect_steps`` steps are never evicted: they may be in flight
(pulled ahead for the next batch, or held in a worker's cache window). Deletion keeps every
checkpoint consistent: it holds the table's lock, as a save does.
"""

import logging
import math
import threading
import time
from collections import deque

import numpy as np

from cardinal.embedding.eviction import lowest, make_policy
from cardinal.memory_config import EvictionConfig

LOW_WATER = 0.99  # a budget eviction frees down to this share of the budget
log = logging.getLogger(__name__)




class Memory:
    def __init__(self, config: EvictionConfig, budget: int = 0):
        self.config = config
        self.budget = budget
        self.policy = make_policy(config.policy, config.decay)
        self.swept = 0  # step // every of the last sweep: sweeps fall on the same steps in a resumed run
        self._step_times: deque[tuple[int, float]] = deque()  # (step, when first seen), steps increasing
        self._lock = threading.Lock()
        self.short = 0  # budget evictions that could not get under the budget (all rows protected)

    def after(self, tables: dict, step: int) -> None:
        """Sweep and evict as due after a request of ``step``; one thread at a time (others go on)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.config.ttl_seconds:
                self._note_time(step)
            if (self.config.ttl_steps or self.config.ttl_seconds) and step // self.config.every > self.swept:
                self.swept = step // self.config.every
                self.sweep(tables, step)
            if self.budget and sum(t.nbytes for t in tables.values()) > self.budget:
                self.fit(tables, step)
        finally:
            self._lock.release()

    def sweep(self, tables: dict, step: int) -> None:
        """Delete rows past their time to live."""
        cutoffs = []
        if self.config.ttl_steps:
            cutoffs.append(("ttl_steps", step - self.config.ttl_steps))
        if self.config.ttl_seconds:
            cutoffs.append(("ttl_seconds", self._step_at(time.monotonic() - self.config.ttl_seconds)))
        for reason, cutoff in cutoffs:
            if cutoff <= 0:
                continue
            for t in tables.values():
                t.evict(lambda cols, n, c=cutoff: np.flatnonzero(cols.last_step[:n] < c), reason)

    def fit(self, tables: dict, step: int) -> None:
        """Evict the lowest-scored rows until the tables are under LOW_WATER x budget."""
        total = sum(t.nbytes for t in tables.values())
        need = total - LOW_WATER * self.budget
        row_bytes = {name: t.storage.nbytes for name, t in tables.items()}
        reclaimable = sum(row_bytes.values())
        if need <= 0 or reclaimable == 0:
            return
        freed = 0
        for name, t in tables.items():
            if len(t) == 0:
                continue
            per_row = row_bytes[name] / len(t)
            k = math.ceil(need * row_bytes[name] / reclaimable / per_row)
            freed += per_row * t.evict(lambda cols, n, k=k, dim=t.dim: self._victims(cols, n, dim, step, k), "budget")
        if total - freed > self.budget:
            if self.short == 0:
                fixed = total - reclaimable
                log.warning("memory budget %d bytes not met: %d bytes are rows touched in the last %d steps (never "
                            "evicted) or not rows at all (%d bytes of hash index and admission filter state); raise "
                            "ps.memory_budget, or bound the filter with admission.policy = 'bloom'",
                            self.budget, int(total - freed), self.config.protect_steps, fixed)
            self.short += 1

    def _victims(self, cols, n, dim, step, k) -> np.ndarray:
        scores = self.policy.score(cols, n, dim, step)
        scores[cols.last_step[:n].astype(np.int64) >= step - self.config.protect_steps] = np.inf
        return lowest(scores, k)

    def _note_time(self, step: int) -> None:
        if not self._step_times or step > self._step_times[-1][0]:
            now = time.monotonic()
            self._step_times.append((step, now))
            while len(self._step_times) > 1 and self._step_times[1][1] < now - self.config.ttl_seconds:
                self._step_times.popleft()

    def _step_at(self, when: float) -> int:
        """The first step seen at or after ``when`` (rows last touched before it are older)."""
        for step, seen in self._step_times:
            if seen >= when:
                return step
        return self._step_times[-1][0] + 1 if self._step_times else 0

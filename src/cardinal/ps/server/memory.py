"""A shard's memory: one byte budget for all its tables, time-to-live sweeps, eviction.

After each request that may create rows (training pulls, pushes) the store calls
``Memory.after``; it is cheap unless there is work:

- **TTL**: every ``every`` steps, rows not pulled or pushed for ``ttl_steps`` steps, or for
  ``ttl_seconds`` by this server's clock (Paddle's ``delete_after_unseen_days``), are deleted.
  Wall time maps to steps through the time each step was first seen here, so rows carry no
  clock of their own.
- **Budget**: when the tables' bytes in RAM (rows, index, admission filters:
  ``EmbeddingTable.nbytes``) pass ``budget``, counting filters past their share of it decay
  (``budget.py``), then the lowest-scored rows (``embedding/eviction.py``) leave RAM until it is
  back under LOW_WATER x budget: to the disk tier when the tables have one (``demote``), else
  deleted. Each table gives up rows in proportion to the bytes of rows it may give up, so a
  table is never emptied for another's growth while the other has rows to give.
- **Disk budget**: when the disk tier's rows pass ``disk_budget``, its lowest-scored rows are
  deleted down to DISK_LOW_WATER x disk_budget (a scan of the tier: rarer, so a wider margin).

The tables are ``Table``s (``embedding/protocol.py``); their disk tier (``RowTable``) only where ``tiered``.

Rows touched in the last ``protect_steps`` steps are never evicted: they may be in flight
(pulled ahead for the next batch, or held in a worker's cache window); new rows get room before
they are created, or are refused when protected rows fill the budget (``budget.py``). Deletion
keeps every checkpoint consistent: it holds the table's lock, as a save does.
"""

import logging
import math
import threading
import time
from collections import deque

import numpy as np

from cardinal.embedding.eviction import lowest, make_policy
from cardinal.embedding.eviction_kernels import lowest_keys
from cardinal.ps.server.budget import FILTER_SHARE, LOW_WATER, decay_filters
from cardinal.recipe.eviction import EvictionConfig

ROUNDS = 3  # of evictions, at most, for one request
DISK_LOW_WATER = 0.95  # ... and a disk budget eviction, which scans the whole tier
log = logging.getLogger(__name__)
_EMPTY = np.empty(0, np.int64)


class Memory:
    def __init__(self, config: EvictionConfig, budget: int = 0, disk_budget: int = 0):
        self.config = config
        self.budget = budget
        self.disk_budget = disk_budget
        self.policy = make_policy(config.policy, config.decay)
        self.swept = 0  # step // every of the last sweep: sweeps fall on the same steps in a resumed run
        self._step_times: deque[tuple[int, float]] = deque()  # (step, when first seen), steps increasing
        self.lock = threading.Lock()
        self.short = 0  # budget evictions that could not get under the budget (all rows protected)
        self.failures = 0  # evictions that raised (a disk tier's write, say)

    def after(self, tables: dict, step: int) -> None:
        """Sweep and evict as due after a request of ``step``; one thread at a time (others go on)."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            self._after(tables, step)
        except Exception as e:  # the request itself went through; the budget is tried again next time
            self.failures += 1
            log.warning("eviction failed (%s: %s); rows stay where they are until the next request", type(e).__name__, e)
        finally:
            self.lock.release()

    def _after(self, tables: dict, step: int) -> None:
        if self.config.ttl_seconds:
            self._note_time(step)
        if (self.config.ttl_steps or self.config.ttl_seconds) and step // self.config.every > self.swept:
            self.swept = step // self.config.every
            self.sweep(tables, step)
        if self.budget and sum(t.nbytes for t in tables.values()) > self.budget:
            self.fit(tables, step)
        if self.disk_budget and sum(t.cold_bytes for t in tables.values() if t.tiered) > self.disk_budget:
            self.fit_disk(tables, step)

    def hold(self, tables: dict, step: int) -> None:
        """A load's RAM budget: rows past it move to the disk tier as they arrive (nothing is in flight
        then, so none is protected). Only moved, never deleted: what the run would delete, its next
        request deletes, as the run that saved the checkpoint and went on did."""
        if not self.disk_budget:
            return
        with self.lock:
            if self.budget and sum(t.nbytes for t in tables.values()) > self.budget:
                self.fit(tables, step, protect=False)

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
                if t.tiered and t.cold_rows:
                    t.evict_cold(lambda rows, c=cutoff: _EMPTY if rows is None else rows.ids[rows.last_step < c], reason)

    def fit(self, tables: dict, step: int, protect: bool = True, extra: int = 0) -> None:
        """Get the tables under LOW_WATER x budget with ``extra`` bytes to spare. In turn, while over:
        admission counts past their share of the budget decay (``budget.py``); the lowest-scored rows
        that are not protected leave RAM; with a disk tier, protected rows go to it too if that gets
        the tables under the budget (a training request brings them back whole); counts decay further."""
        target = LOW_WATER * self.budget
        held = lambda: sum(t.nbytes for t in tables.values()) + extra  # noqa: E731
        decay_filters(tables, held() - target, FILTER_SHARE * self.budget)
        for _ in range(ROUNDS):  # again while what the rows cost where they went (a tier's filter) keeps it over
            free = self.free(tables, step, protect) if held() > target else None
            if not free:
                break
            self.leave_rows(tables, step, held() - target, free, protect)
        for _ in range(2 if protect and any(t.tiered for t in tables.values()) else 0):
            free = self.free(tables, step, False)  # twice: the tier's key filter grows as rows go to it
            if held() <= target or held() - sum(free.values()) > self.budget:  # only if that gets under it
                break
            self.leave_rows(tables, step, held() - target, free, False)
        decay_filters(tables, held() - target, 0)
        total = held()
        if total > self.budget:
            if self.short == 0:
                fixed = sum(t.nbytes - t.row_bytes for t in tables.values())
                log.warning("memory budget %d bytes not met: %d bytes are rows touched in the last %d steps (never "
                            "evicted) or not rows at all (%d bytes of hash index and admission filter state); raise "
                            "ps.memory.budget", self.budget, int(total), self.config.protect_steps, fixed)
            self.short += 1

    def leave_rows(self, tables: dict, step: int, need: float, free: dict, protect: bool) -> float:
        """The lowest-scored rows leave RAM until ``need`` bytes are freed, each table giving in
        proportion to the bytes of rows it may give (``free``); returns the bytes freed."""
        total, freed = sum(free.values()), 0
        for name, nbytes in free.items():
            t = tables[name]
            freed += self.leave(t, math.ceil(need * nbytes / total / self.net_cost(t)), step, protect)
        return freed

    def free(self, tables: dict, step: int, protect: bool = True) -> dict[str, float]:
        """Bytes of RAM rows each table may let go of: those not protected (any, unless ``protect``)."""
        free = {}
        for name, t in tables.items():
            with t.lock:
                n = t.storage.size
                k = n - int(self.protected(t.storage.columns().last_step[:n], step).sum()) if protect else n
                if k:
                    free[name] = k * self.row_cost(t)
        return free

    def leave(self, t, k: int, step: int, protect: bool = True) -> int:
        """The ``k`` lowest-scored RAM rows of table ``t`` (none protected, unless not ``protect``) leave
        RAM: to its disk tier, else deleted. Returns the bytes freed."""
        select = lambda cols, n: self._victims(cols, n, t.values, step, k, protect)  # noqa: E731
        per_row = self.row_cost(t)
        return per_row * (t.demote(select) if t.tiered else t.evict(select, "budget"))

    @staticmethod
    def row_cost(t) -> float:
        """Bytes one RAM row of table ``t`` takes (its index slot aside)."""
        return t.row_bytes / t.storage.size if t.storage.size else 16 + 4 * t.storage.width

    @classmethod
    def net_cost(cls, t) -> float:
        """Bytes a row leaving RAM frees: its cost, less what it costs where it goes: its share of
        the disk tier's RAM (key filter, RocksDB's table readers), or the id a deletion logs for the
        next delta checkpoint (``embedding/deletion_log.py``)."""
        if t.tiered:
            there = t.cold_ram_bytes / t.cold_rows if t.cold_rows else 0
        else:
            there = 0 if t.deleted.overflowed else 8
        return max(1.0, cls.row_cost(t) - there)

    def protected(self, last_step: np.ndarray, step: int) -> np.ndarray:
        """Which rows (by ``last_step``) a request of ``step`` may not evict: touched in the last protect_steps."""
        return last_step.astype(np.int64) >= step - self.config.protect_steps

    def fit_disk(self, tables: dict, step: int) -> None:
        """Delete the disk tier's lowest-scored rows until it is under DISK_LOW_WATER x disk_budget."""
        cold = {name: t.cold_bytes for name, t in tables.items() if t.tiered and t.cold_rows}
        need = sum(cold.values()) - DISK_LOW_WATER * self.disk_budget
        for name, nbytes in cold.items():
            t = tables[name]
            k = math.ceil(need * nbytes / sum(cold.values()) / (nbytes / t.cold_rows))
            t.evict_cold(self._lowest_over_chunks(k, t.cold_values, step), "disk_budget")

    def _lowest_over_chunks(self, k: int, values, step: int):
        """A selection for ``evict_cold``: the ids of the k lowest scores over every chunk, kept as it scans."""
        best_ids, best = np.empty(0, np.int64), np.empty(0, np.float64)

        def select(rows):
            nonlocal best_ids, best
            if rows is None:
                return best_ids
            best_ids = np.concatenate([best_ids, rows.ids])
            best = np.concatenate([best, self.policy.score(rows, len(rows.ids), values, step)])
            keep = lowest(best, k)
            best_ids, best = best_ids[keep], best[keep]
            return _EMPTY
        return select

    def _victims(self, cols, n, values, step, k, protect=True) -> np.ndarray:
        key = self.policy.key(cols, n)
        if key is not None:  # lru, lfu: no float scores sorted
            cutoff = step - self.config.protect_steps if protect else np.iinfo(np.int64).max
            return lowest_keys(key, cols.last_step[:n], np.int64(cutoff), np.int64(k))
        scores = self.policy.score(cols, n, values, step)
        if protect:
            scores[self.protected(cols.last_step[:n], step)] = np.inf
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

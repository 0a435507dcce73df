"""``CachedSource``: a worker cache of hot rows, with bounded staleness, over ``PSSource``.

    pull(unique)  ──> cached and at most s updates behind?  hits: served, no request
                  └─> the rest (misses, stale rows): ONE pull from the servers; admitted rows
                      (seen in ``admit_after`` pulls) are cached, evicting by LRU or LFU
    push(grads)   ──> a cached row's gradient is applied to the cached row at once (below) and
                      added to its pending sum; once a row holds more than h (``hold``, <= s)
                      of them, the sum goes out with its count (``counts=``, one update on the
                      server); every other row's gradient goes out at once.
                      With several workers each table is pushed once per step, so the push is
                      held until the next pull, settle or flush (which folds every pending sum
                      into it); one worker sends it at once
    flush(step)   ──> everything pending is pushed, settled, and the cache is DROPPED

The contract: (a) a row is served as fetched at most s updates behind its server, plus this
worker's own gradients since, applied on the worker; (b) a worker holds at most h unpushed
updates of a row. A cached row follows its own gradients as HET's do: the servers' optimizer
runs on it with a state kept on the worker (fresh when the row is cached, kept across its
refreshes: the servers send values only, ``cache_slots.py``). Rows left as fetched until
refreshed trained as if the worker's last s steps had not happened: at s = 4 on 200k rows the
loss spiked (0.536 -> 0.66-0.75 near step 40) and AUC fell 0.043, 0.026 with every gradient
pushed at once; following them, one worker loses nothing and two 0.0027, the price of the other
worker's updates read late (benchmarks/cache.py; on the 3M-row default s = 1, 2, 4 are within
0.0001). Own pushes still count in the lag: the refresh every s + 1 steps keeps the worker's
copy, moved with a state of its own, from drifting from the servers' row.

Holding (h > 0) saves pushes at a price in the model: the servers take a sum's second moment as
that of k equal parts (``optim/base.py``), less than k noisy gradients add, so held rows learn
faster than without the cache: on 200k rows AUC rose 0.007-0.010 at h = s = 1, 2, 4; on 3M it
fell 0.0002, 0.0013, 0.0022. Sending the parts' squares made the rows exact in their second
moments but cost more bytes than holding saved (and 0.002-0.005 AUC on 200k rows); h = 0 is the
default. This cache counts (a) more strictly than it asks, in training steps, because a pushed
sum of k gradients is one update on the server but k steps the fetched value lacks. A cached
row's lag is:

    its pending gradients (steps not pushed yet) + the steps of its own pushes since it was
    fetched (k for a sum of k), and, with several workers, the others' updates (one each):
    each push reply carries the shard's update log since this worker's cursor
    (``ps/server/update_log.py``): (id, step) of each update by other workers; those of steps the
    fetched row surely reflected (the servers' clock at the pull) are not counted;
    + updates applied after the last reply, not known yet, bounded by steps: with combined
    steps a row gets at most one update per step, and only steps in (max(reply clock, the
    row's clock at the pull), the last step this worker pushed] can hold one.

A row is a hit only if its lag <= s; s = 0 in sync mode is bitwise equal to no cache (a row's
gradient is pushed at once and makes it 1 behind, so every read goes to the servers). In async
mode the collection's own bound adds to s (a prefetched pull misses the step before it). Lookups
(``create=False``, eval) read the servers. ``metrics()`` gives flat numbers.
"""

from collections import Counter, deque

import numpy as np
import torch

from cardinal.optim import SparseOptimizer, make_optimizer
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle
from cardinal.worker.sources.base import RowSource
from cardinal.worker.sources.cache_history import UNSENT, History
from cardinal.worker.sources.cache_policy import Admission, make_policy
from cardinal.worker.sources.cache_slots import Slots, slots_for
from cardinal.worker.sources.ps import PSSource


class CachedSource(RowSource):
    def __init__(self, inner: PSSource, dims: dict[str, int], capacity_bytes: int, staleness: int,
                 optimizer: dict | SparseOptimizer, hold: int = 0, policy: str = "lru", admit_after: int = 1,
                 device: str | torch.device = "cpu", wide: dict[str, int] | None = None):
        """``wide``: table -> its rows' wide columns (``TableConfig.wide``), as the servers' tables have them."""
        if not isinstance(inner, PSSource):
            raise TypeError(f"a cache wraps a PSSource, got {type(inner).__name__} (GEO keeps a replica already)")
        for name, value in (("cache.bytes", capacity_bytes), ("cache.staleness", staleness), ("cache.hold", hold)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if hold > staleness:
            raise ValueError(f"cache.hold = {hold} is past cache.staleness = {staleness}: a held gradient leaves its "
                             "row's servers a step behind, and the row is read from them once that is over the bound")
        if not dims:
            raise ValueError("a cache needs at least one table")
        if inner.workers > 1 and not inner.combine:
            raise ValueError("a cache with several workers needs consistency.<mode>.combine = true (its staleness "
                             "bound counts one update per row per combined step)")
        self.inner, self.s, self.hold, self.device = inner, staleness, hold, torch.device(device)
        self.policy, self.optimizer = make_policy(policy), make_optimizer(optimizer)
        per_table = capacity_bytes // len(dims)
        self.slots: dict[str, Slots] = {}
        for table, dim in dims.items():
            optimizer = self.optimizer.with_wide((wide or {}).get(table, 0))
            n = slots_for(per_table, dim, optimizer.state_width(dim))
            if n < 1:
                raise ValueError(f"cache.bytes = {capacity_bytes} holds no row of table {table!r} (dim {dim}); "
                                 "give it more bytes, or 0 for no cache")
            self.slots[table] = Slots(n, dim, self.device, optimizer)
        self.admission = {t: Admission(admit_after) for t in dims}
        self.n_shards, self.plan = inner.client.n_shards, inner.client.plan
        split = [t for t in dims if len(self.plan.pieces(t)) > 1]
        if split:
            raise ValueError(f"the hot-row cache keeps whole rows, each from one server; the sharding plan splits "
                             f"table {split[0]!r} by columns: place it row-wise or table-wise (plan.layout)")
        copied = [t for t in dims if t in self.plan.replicas]
        if copied:  # a row read from a copy is older than the servers' clock this cache counts its bound from
            raise ValueError(f"table {copied[0]!r} has copies of its hot rows on the servers (plan.replicate), read "
                             "up to plan.replica_staleness steps old, and the hot-row cache keeps rows up to "
                             "cache.staleness steps behind the rows' own servers: the two bounds would add up; use one "
                             "(cache.bytes = 0, or no plan.replicate)")
        self.held: dict[str, tuple] = {}                  # table -> (ids, grads, counts, step): not sent yet
        self.outbox: dict[str, list[tuple]] = {t: [] for t in dims}  # pending sums of evicted rows
        self.pushed: dict[str, int] = {}                  # table -> the last step sent
        self.cursor = {t: [0] * self.n_shards for t in dims}           # per shard: update log position
        self.reply_clock = {t: np.full(self.n_shards, -1, np.int64) for t in dims}
        self.history = {t: History() for t in dims}       # what happened while pulls were in flight
        self._replies: deque = deque()
        self._last_hit: dict[str, np.ndarray] = {}
        if inner.workers > 1:
            inner.on_reply = lambda table, reply: self._replies.append((table, reply))
        self.counters: Counter[str] = Counter()
        self.lags = np.zeros(staleness + 1, np.int64)  # reads per lag (steps behind), misses at 0

    # --- reads -------------------------------------------------------------------------

    def pull(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Handle:
        if not create:
            return self.inner.pull(table, ids, create=False, step=step)
        if table not in self.slots:
            raise ValueError(f"table {table!r} has no cache; the cache holds {sorted(self.slots)}")
        self._send_held()
        self._drain()
        sl = self.slots[table]
        slots = sl.lookup(ids)
        cached = np.flatnonzero(slots >= 0)
        lag = sl.behind[slots[cached]] + sl.count[slots[cached]] + self._unknown(table, slots[cached])
        hit = np.zeros(len(ids), bool)
        hit[cached] = lag <= self.s
        hits = slots[hit]
        values = sl.rows[torch.from_numpy(hits).to(self.device)]  # a copy: later inserts may reuse the slots
        sl.last_used[slots[cached]] = step  # hits, and stale rows about to be refreshed, stay this step
        sl.uses[hits] += 1
        served = np.bincount(lag[lag <= self.s], minlength=self.s + 1)
        served[0] += len(ids) - int(hit.sum())  # misses: read from the servers
        self.lags += served[:self.s + 1]
        misses = ids[~hit]
        admit = self.admission[table].see(misses)
        self._last_hit[table] = hit
        self.counters[f"{table}.unique"] += len(ids)
        self.counters[f"{table}.unique_hits"] += int(hit.sum())
        handle = self.inner.pull(table, misses, create=True, step=step) if len(misses) else None
        return _CachedPull(self, table, ids, hit, values, misses, admit, handle, self._seen(table),
                           self.history[table].mark(), step)

    def record_uses(self, table: str, inverse: np.ndarray) -> None:
        """Accesses of the last pull of ``table`` (the collection's inverse): hit rate over accesses."""
        hit = self._last_hit.get(table)
        if hit is None:
            return
        uses = np.bincount(inverse, minlength=len(hit))
        self.counters[f"{table}.accesses"] += int(uses.sum())
        self.counters[f"{table}.access_hits"] += int(uses[hit].sum())

    def _unknown(self, table: str, slots: np.ndarray) -> np.ndarray:
        """Updates by other workers applied after the last reply: at most one per combined step in
        (max(reply clock, the row's clock at its pull), the last step this worker sent]."""
        if self.inner.workers == 1:
            return np.zeros(len(slots), np.int32)
        sl = self.slots[table]
        known = np.maximum(self.reply_clock[table][sl.shard[slots]], sl.seen[slots])
        return np.maximum(0, self.pushed.get(table, -1) - known).astype(np.int32)

    def _seen(self, table: str) -> int:
        """Every worker's pushes of steps <= this are applied on every shard (several workers)."""
        return self.inner.clock(table) if self.inner.workers > 1 else 0

    def _fill(self, table: str, ids: np.ndarray, fetched: np.ndarray, admit: np.ndarray, seen: int,
              since: tuple[int, int], step: int) -> None:
        """Cache (or refresh) the rows a pull fetched, counting what happened since it was sent."""
        behind = self.history[table].behind(ids, seen, since)
        if behind is None or not len(ids):
            return  # too much happened meanwhile to know how far behind the rows are: not cached
        sl = self.slots[table]
        rows = torch.as_tensor(fetched).to(self.device)
        slots = sl.lookup(ids)
        present = slots >= 0
        if present.any():
            sl.refresh(slots[present], rows[torch.from_numpy(present).to(self.device)], seen)
            sl.behind[slots[present]] = behind[present]
        new = np.flatnonzero(~present & admit)
        if not len(new):
            return
        cached, evicted, n_evicted = sl.insert(ids[new], rows[torch.from_numpy(new).to(self.device)], seen,
                                               self.plan.route(table, ids[new]), step, self.policy)
        placed = new[cached]
        sl.behind[sl.lookup(ids[placed])] = behind[placed]
        self._evicted(table, evicted)
        self.counters[f"{table}.evictions"] += n_evicted

    # --- writes ------------------------------------------------------------------------

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int, counts: np.ndarray | None = None
             ) -> None:
        self._drain()
        if table in self.held:  # a second push of a table before the next pull (one worker)
            self._send(table)
        sl = self.slots[table]
        slots = sl.lookup(ids)
        cached = slots >= 0
        cs = slots[cached]
        add = np.ones(len(cs), np.int32) if counts is None else np.asarray(counts, np.int32)[cached]
        g = torch.as_tensor(grads).to(self.device)
        fresh = sl.count[cs] == 0
        sl.pending[torch.from_numpy(cs[fresh]).to(self.device)] = g[torch.from_numpy(np.flatnonzero(cached)[fresh])
                                                                    .to(self.device)]
        if (~fresh).any():
            sl.pending[torch.from_numpy(cs[~fresh]).to(self.device)] += \
                g[torch.from_numpy(np.flatnonzero(cached)[~fresh]).to(self.device)]
        sl.count[cs] += add
        due = np.zeros(len(ids), bool)
        due[cached] = sl.count[cs] > self.hold
        if self.s:  # cached rows follow this worker's own gradients at once (s = 0: none is read before a refresh)
            sl.follow(cs, np.asarray(grads[cached], np.float32), None if counts is None else add)
        send = ~cached | due
        out_counts = np.ones(len(ids), np.int32) if counts is None else np.asarray(counts, np.int32).copy()
        out_grads = np.array(grads[send], np.float32, copy=True)
        due_slots = slots[due]
        if len(due_slots):
            where = np.flatnonzero(due[send])  # positions of the due rows among those sent
            out_grads[where] = sl.pending[torch.from_numpy(due_slots).to(self.device)].cpu().numpy()
            out_counts[due] = sl.count[due_slots]
            sl.behind[due_slots] += sl.count[due_slots]  # the k steps of the pushed sum (see the docstring)
            sl.count[due_slots] = 0
        self.counters[f"{table}.rows_pushed_held"] += int((~send).sum())
        self.held[table] = (ids[send], out_grads, out_counts[send], step)
        self.history[table].pushed(ids[send], out_counts[send], step)
        if self.inner.workers == 1:  # sent now, as PSSource would (a flush may push a table twice in a step)
            self._send(table)

    def _evicted(self, table: str, evicted: tuple) -> None:
        if len(evicted[0]):
            self.outbox[table].append(evicted)
            self.history[table].pushed(evicted[0], evicted[2], UNSENT)
            self.counters[f"{table}.evicted_pending"] += len(evicted[0])

    def _send_held(self) -> None:
        for table in list(self.held):
            self._send(table)

    def _send(self, table: str, step: int | None = None) -> None:
        """Send the table's held push (or, at ``step``, a push of its outbox alone)."""
        if table not in self.held and step is None:
            return  # the outbox waits for the table's next push
        ids, grads, counts, held_step = self.held.pop(table, (None, None, None, step))
        parts = [(ids, grads, counts)] if ids is not None else []
        parts += self.outbox[table]
        self.outbox[table] = []
        if not parts:
            return
        ids, grads, counts = parts[0] if len(parts) == 1 else _merge(parts, self.slots[table].dim)
        kwargs = {}
        if (counts > 1).any():
            kwargs["counts"] = counts
        if self.inner.workers > 1:
            kwargs["since"] = list(self.cursor[table])
        self.inner.push(table, ids, grads, step=held_step, **kwargs)
        self.pushed[table] = max(self.pushed.get(table, -1), held_step)
        self.counters[f"{table}.rows_pushed"] += len(ids)

    # --- replies of the servers ----------------------------------------------------------

    def _drain(self) -> None:
        """Apply the update logs that push replies carried (queued by the push thread)."""
        while self._replies:
            table, reply = self._replies.popleft()
            for shard, log in reply.get("log", {}).items():
                self._apply_log(table, int(shard), log)

    def _apply_log(self, table: str, shard: int, log: dict) -> None:
        sl = self.slots.get(table)
        if sl is None:
            return
        self.reply_clock[table][shard] = max(self.reply_clock[table][shard], log["clock"])
        if log["reset"]:  # this worker's cursor fell out of the shard's log: drop the shard's rows
            mine = np.flatnonzero(sl.used & (sl.shard == shard))
            self._evicted(table, sl.take_pending(mine))
            sl.free(mine)
            self.counters[f"{table}.resets"] += 1
            self.cursor[table][shard] = log["cursor"]
            self.history[table].reported(None, None)
            return
        new = log["seqs"] > self.cursor[table][shard]  # a reply may repeat what an earlier one said
        ids, steps, counts = log["ids"][new], log["steps"][new], log["counts"][new]
        self.cursor[table][shard] = max(self.cursor[table][shard], log["cursor"])
        if not len(ids):
            return
        slots = sl.lookup(ids)
        ok = slots >= 0
        ok[ok] = steps[ok] > sl.seen[slots[ok]]
        np.add.at(sl.behind, slots[ok], counts[ok].astype(np.int32))  # the steps each update brought
        self.history[table].reported(ids, steps, counts)

    # --- waiting ---------------------------------------------------------------------------

    def settle(self, up_to_step: int | None) -> None:
        for table, held in list(self.held.items()):
            if up_to_step is None or held[3] <= up_to_step:
                self._send(table)
        self.inner.settle(up_to_step)
        for table, history in self.history.items():
            done = self.pushed.get(table, -1) if up_to_step is None else min(up_to_step, self.pushed.get(table, -1))
            history.applied = max(history.applied, done)
        self._drain()

    def flush(self, step: int) -> None:
        """Push every pending gradient (in the step's held push, which is still unsent), settle,
        and drop the cache: checkpoints and evaluations read the servers, a resumed run starts
        as empty as a straight one after its flush."""
        self._drain()
        for table, sl in self.slots.items():
            pending = sl.take_pending(sl.occupied())
            if len(pending[0]):
                self.outbox[table].append(pending)
        for table in self.slots:
            self._send(table, step)
        self.inner.flush(step)
        self._drain()
        for table, sl in self.slots.items():
            sl.clear()
            self.admission[table].reset()
            self.history[table].clear(self.pushed.get(table, -1))
            self._last_hit.pop(table, None)

    # --- what a user reads ---------------------------------------------------------------

    def metrics(self) -> dict:
        """Flat numbers: per table hit rates (unique ids, accesses), evictions, rows and bytes held,
        pending rows, rows and bytes not sent; staleness at read time p50/p99 (updates)."""
        out: dict[str, float] = {}
        c = self.counters
        for table, sl in self.slots.items():
            row_bytes = 4 * sl.dim + 8  # a row and its id
            p = f"cache_{table}_"
            out[p + "hit_rate_unique"] = c[f"{table}.unique_hits"] / max(1, c[f"{table}.unique"])
            if c[f"{table}.accesses"]:
                out[p + "hit_rate_accesses"] = c[f"{table}.access_hits"] / c[f"{table}.accesses"]
            out[p + "evictions"] = c[f"{table}.evictions"]
            out[p + "rows"] = len(sl)
            out[p + "bytes"] = len(sl) * (2 * 4 * sl.dim)
            out[p + "pending_rows"] = int((sl.count > 0).sum())
            out[p + "pull_bytes_saved"] = c[f"{table}.unique_hits"] * row_bytes
            out[p + "push_bytes_saved"] = c[f"{table}.rows_pushed_held"] * row_bytes
            out[p + "resets"] = c[f"{table}.resets"]
        if self.lags.sum():
            cumulative = np.cumsum(self.lags) / self.lags.sum()
            out["cache_staleness_p50"] = float(np.searchsorted(cumulative, 0.5))
            out["cache_staleness_p99"] = float(np.searchsorted(cumulative, 0.99))
        return out


class _CachedPull(Handle):
    """Hits (copied at the pull) and the misses' one request, in the order of ``ids``."""

    def __init__(self, source: CachedSource, table, ids, hit, values, misses, admit, handle, seen, since, step):
        self.source, self.table, self.ids, self.hit, self.values = source, table, ids, hit, values
        self.misses, self.admit, self.handle = misses, admit, handle
        self.seen, self.since, self.step = seen, since, step
        self.result = None

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT):
        if self.result is not None:
            return self.result
        src = self.source
        dim = src.slots[self.table].dim
        fetched = self.handle.wait(timeout) if self.handle is not None else np.zeros((0, dim), np.float32)
        src._fill(self.table, self.misses, fetched, self.admit, self.seen, self.since, self.step)
        if src.device.type == "cpu":
            out = np.empty((len(self.ids), dim), np.float32)
            out[self.hit] = self.values.numpy()
            out[~self.hit] = fetched
        else:
            out = torch.empty((len(self.ids), dim), dtype=torch.float32, device=src.device)
            out[torch.from_numpy(self.hit).to(src.device)] = self.values
            out[torch.from_numpy(~self.hit).to(src.device)] = torch.as_tensor(fetched).to(src.device)
        self.result = out
        return out


def _merge(parts: list[tuple], dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One push of several (ids, grads, counts): a repeated id's gradients and counts add up
    (they are separate steps' updates, none applied yet)."""
    ids = np.concatenate([p[0] for p in parts])
    grads = np.concatenate([p[1].reshape(-1, dim) for p in parts])
    counts = np.concatenate([p[2] for p in parts]).astype(np.int32)
    unique, inverse = np.unique(ids, return_inverse=True)
    if len(unique) == len(ids):
        return ids, np.ascontiguousarray(grads, np.float32), counts
    summed = np.zeros((len(unique), dim), np.float32)
    np.add.at(summed, inverse, grads)
    total = np.zeros(len(unique), np.int32)
    np.add.at(total, inverse, counts)
    return unique, summed, total

"""``GeoReplica``: GEO-SGD (as Paddle's ``GeoStrategy``): rows train on the worker, servers
receive their changes.

    step t:   rows of the batch come from the worker's replica; ids not in it are pulled
              once, and their pulled values remembered as the base
              push() updates the replica with the sparse optimizer, on the worker
    every k:  at the first pull of a new period of k steps, each replicated row's change since
              it was pulled (replica - base) is pushed as a delta, which the servers add to
              their values; the replica is dropped, so the next rows are pulled fresh and
              include the other workers' changes

A replica, not a cache: it holds rows that diverge from the servers' on purpose, for up to k
steps. Traffic is one pull and one delta push per row per k steps, whatever the row's use;
the price is that workers see each other's updates k steps late. The optimizer's state
lives on the worker between two syncs. Lookups (``create=False``, eval) read the servers.
"""

import numpy as np

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer
from cardinal.ps.client.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle
from cardinal.worker.sources.base import RowSource


class _Local:
    """One table's replica: the rows, and each row's value when it was pulled."""

    def __init__(self, name: str, dim: int, optimizer: dict, wide: int):
        self.table = EmbeddingTable(TableConfig(name, dim, wide=wide), make_optimizer(optimizer))
        self.base: list[np.ndarray] = []


class _Deferred(Handle):
    """Rows read from the replica when waited on, so they include every push made before."""

    def __init__(self, read):
        self.read = read

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT) -> np.ndarray:
        return self.read()


class GeoReplica(RowSource):
    def __init__(self, client: PSClient, optimizer: dict, interval: int, timeout: float = DEFAULT_TIMEOUT,
                 wide: dict[str, int] | None = None):
        """``wide``: table -> its rows' wide columns (``TableConfig.wide``), as the servers' tables have them."""
        if interval < 1:
            raise ValueError(f"geo interval must be >= 1, got {interval}")
        self.client, self.optimizer, self.interval, self.timeout = client, dict(optimizer), interval, timeout
        self.wide = dict(wide or {})
        self.local: dict[str, _Local] = {}
        self.period = 0

    def pull(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Handle:
        if not create:  # a lookup: the servers' rows, the replica untouched
            return self.client.pull(table, ids, create=False, step=step)
        self._sync_if_due(step)
        return _Deferred(lambda: self._rows(table, ids, step))

    def _rows(self, table: str, unique: np.ndarray, step: int) -> np.ndarray:
        """(U, dim) values of ``unique`` from the replica, pulling the ids it lacks."""
        local = self.local.get(table)
        missing = unique if local is None else unique[~local.table.has(unique)]
        if len(missing) or local is None:
            pulled = self.client.pull(table, missing, step=step).wait(self.timeout)
            if local is None:
                local = self.local[table] = _Local(table, pulled.shape[1], self.optimizer, self.wide.get(table, 0))
            t = local.table
            data = np.zeros((len(missing), t.portable_width), np.float32)
            data[:, :t.dim] = pulled
            t.optimizer.init_state(data, 0, len(missing), t.dim)
            t.import_rows(missing, data, np.zeros(len(missing), np.uint32), np.full(len(missing), step, np.uint32))
            local.base.append(pulled)
        return local.table.pull(unique, create=False)

    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int,
             counts: np.ndarray | None = None) -> None:
        """One optimizer step on the replica, applied before this returns. A replica pushes its
        changes as deltas, which carry no counts: counted gradients are refused."""
        if counts is not None:
            raise TypeError("GeoReplica takes no counts (its servers receive deltas, not counted gradients): "
                            "do not put a cache of hot rows in front of GEO, or push counts=None")
        self.local[table].table.push(ids, grads, step=step)

    def settle(self, up_to_step: int | None) -> None:
        """Nothing to wait for: pushes apply to the replica at once, deltas are waited on when sent."""

    def flush(self, step: int) -> None:
        self._sync(step)

    def _sync_if_due(self, step: int) -> None:
        """At the first step of each new period of ``interval`` steps, push every change and drop the replica."""
        period = (step - 1) // self.interval
        if period != self.period:
            self._sync(step)
            self.period = period

    def _sync(self, step: int) -> None:
        handles = []
        for name, local in self.local.items():
            rows = local.table.export()
            if len(rows["ids"]) == 0:
                continue
            delta = rows["data"][:, :local.table.dim] - np.concatenate(local.base)
            changed = np.flatnonzero(np.any(delta != 0, axis=1))
            if len(changed):
                handles.append(self.client.push(name, rows["ids"][changed], np.ascontiguousarray(delta[changed]),
                                                step=step, kind="delta"))
        for h in handles:
            h.wait(self.timeout)
        self.local = {}

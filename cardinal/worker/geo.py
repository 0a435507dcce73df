"""GEO-SGD (as Paddle's ``GeoStrategy``): rows train on the worker, servers receive their changes.

    step t:   rows of the batch come from the worker's local copy; ids not in it are pulled
              once, and their pulled values remembered as the base
              backward updates the local copy with the sparse optimizer, on the worker
    every k:  each cached row's change since it was pulled (local - base) is pushed as a
              delta, which the servers add to their values; the local copy is dropped, so
              the next batch pulls fresh rows that include the other workers' changes

Traffic is one pull and one delta push per row per k steps, whatever the row's use; the
price is that workers see each other's updates k steps late. The optimizer's state lives
on the worker between two syncs.
"""

import numpy as np

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer
from cardinal.ps.client import PSClient


class _Local:
    """One table's local copy: the rows, and each row's value when it was pulled."""

    def __init__(self, name: str, dim: int, optimizer: dict):
        self.table = EmbeddingTable(TableConfig(name, dim), make_optimizer(optimizer))
        self.base: list[np.ndarray] = []


class GeoCache:
    def __init__(self, client: PSClient, optimizer: dict, interval: int, timeout: float):
        if interval < 1:
            raise ValueError(f"geo interval must be >= 1, got {interval}")
        self.client, self.optimizer, self.interval, self.timeout = client, dict(optimizer), interval, timeout
        self.local: dict[str, _Local] = {}
        self.period = 0

    def rows(self, table: str, unique: np.ndarray, step: int) -> np.ndarray:
        """(U, dim) values of ``unique`` from the local copy, pulling the ids it lacks."""
        local = self.local.get(table)
        missing = unique if local is None else unique[~local.table.has(unique)]
        if len(missing) or local is None:
            pulled = self.client.pull(table, missing, step=step).wait(self.timeout)
            if local is None:
                local = self.local[table] = _Local(table, pulled.shape[1], self.optimizer)
            t = local.table
            data = np.zeros((len(missing), t.storage.width), np.float32)
            data[:, :t.dim] = pulled
            t.optimizer.init_state(data, 0, len(missing), t.dim)
            t.import_rows(missing, data, np.zeros(len(missing), np.uint32), np.full(len(missing), step, np.uint32))
            local.base.append(pulled)
        return local.table.pull(unique, create=False)

    def apply(self, table: str, unique: np.ndarray, grad: np.ndarray, step: int) -> None:
        """One optimizer step on the local copy."""
        self.local[table].table.push(unique, grad, step=step)

    def sync_if_due(self, step: int) -> None:
        """At the first step of each new period of ``interval`` steps, push every change and drop the copy."""
        period = (step - 1) // self.interval
        if period != self.period:
            self.sync(step)
            self.period = period

    def sync(self, step: int) -> None:
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

"""``CopiedRows``: one server's read-only copies of a table's hot rows (``sharding/plan.py``, ``Replicas``).

A refresh writes hot rows (all of them, in as many requests as the transport splits it into),
each with the step of the pull that read them from their own servers. A pull of step s is
answered only while every row it asks for was written at most ``staleness`` steps before s;
otherwise it gets no rows at all (shape (0, dim)) and the worker reads those ids from their own
servers: a copy is never served past its bound, and a server that missed a refresh (it
restarted, a checkpoint was loaded) only costs the worker that second request. The copies are
values only: the optimizer state stays with the row, so any optimizer may replicate.
"""

import threading

import numpy as np

from cardinal.ps import validate
from cardinal.sharding.plan import Replicas


class CopiedRows:
    def __init__(self, table: str, spec: Replicas, dim: int):
        self.table, self.spec, self.dim = table, spec, dim
        self.rows = np.zeros((len(spec.ids), dim), np.float32)
        self.steps = np.full(len(spec.ids), -1, np.int64)  # each copy's refresh step; -1: none yet
        self.reads = self.stale = self.refreshed = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.steps.nbytes

    def read(self, ids: np.ndarray, step: int) -> np.ndarray:
        """The copies of ``ids`` (each one of the hot ids), or (0, dim) when any is older than the bound."""
        self._check(ids, "read")
        validate.check_step(step)
        at = np.searchsorted(self.spec.array, ids)
        with self._lock:
            made = self.steps[at]
            if len(ids) and ((made < 0).any() or step - int(made.min()) > self.spec.staleness):
                self.stale += len(ids)
                return np.empty((0, self.dim), np.float32)
            self.reads += len(ids)
            return self.rows[at]

    def write(self, ids: np.ndarray, rows: np.ndarray, step: int) -> None:
        """A refresh of ``ids`` with their rows as read at ``step``; a copy made at a later step
        stays (a late refresh, resent or from a slower worker, never replaces newer copies)."""
        self._check(ids, "write")
        validate.check_step(step)
        validate.check_grads(rows, len(ids), self.dim, self.table)
        at = np.searchsorted(self.spec.array, ids)
        with self._lock:
            newer = self.steps[at] <= step
            self.rows[at[newer]] = rows[newer]
            self.steps[at[newer]] = step
            self.refreshed += int(newer.sum())

    def forget(self) -> None:
        """Serve nothing until the next refresh (the rows were replaced, by a checkpoint's)."""
        with self._lock:
            self.steps[:] = -1

    def stats(self) -> dict:
        """``as_of``: the oldest copy's refresh step (None while any copy has none)."""
        with self._lock:
            oldest = int(self.steps.min())
            return {"table": self.table, "dim": self.dim, "rows": len(self.spec.ids), "staleness": self.spec.staleness,
                    "as_of": oldest if oldest >= 0 else None, "bytes": self.nbytes, "reads": self.reads,
                    "stale": self.stale, "refreshed": self.refreshed}

    def _check(self, ids: np.ndarray, what: str) -> None:
        validate.check_ids(ids)
        strange = np.flatnonzero(~self.spec.contains(ids)) if len(ids) else []
        if len(strange):
            raise ValueError(f"id {int(ids[strange[0]])} is not one of table {self.table!r}'s copied hot rows: "
                             f"a {what} of its copies names only those (sharding/plan.py, replicas)")

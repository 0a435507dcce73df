"""``CopiedRows``: one server's read-only copies of a table's hot rows (``plan.py``, ``Replicas``).

A refresh writes every hot row at once, with the step of the pull that read them from their
own servers; a pull of step s is answered only while that step is within ``staleness`` of s.
Older copies answer no rows at all (shape (0, dim)), and the worker reads those ids from their
own servers: a copy is never served past its bound, and a server that missed a refresh (it
restarted, a checkpoint was loaded) only costs the worker that second request. The copies are
values only: the optimizer state stays with the row, so any optimizer may replicate.
"""

import threading

import numpy as np

from cardinal.ps import validate
from cardinal.ps.plan import Replicas


class CopiedRows:
    def __init__(self, table: str, spec: Replicas, dim: int):
        self.table, self.spec, self.dim = table, spec, dim
        self.rows = np.zeros((len(spec.ids), dim), np.float32)
        self.as_of: int | None = None  # the step of the last refresh; None before the first
        self.reads = self.stale = self.refreshes = 0
        self._lock = threading.Lock()

    def read(self, ids: np.ndarray, step: int) -> np.ndarray:
        """The copies of ``ids`` (each one of the hot ids), or (0, dim) when older than the bound."""
        self._check(ids, "read")
        validate.check_step(step)
        with self._lock:
            if self.as_of is None or step - self.as_of > self.spec.staleness:
                self.stale += len(ids)
                return np.empty((0, self.dim), np.float32)
            self.reads += len(ids)
            return self.rows[np.searchsorted(self.spec.array, ids)]

    def write(self, ids: np.ndarray, rows: np.ndarray, step: int) -> None:
        """A refresh: every hot id once, in any order, with its row as read at ``step``."""
        self._check(ids, "write")
        validate.check_step(step)
        validate.check_grads(rows, len(ids), self.dim, self.table)
        if len(ids) != len(self.spec.ids) or len(np.unique(ids)) != len(ids):
            raise ValueError(f"a refresh of {self.table!r}'s copies writes each of its {len(self.spec.ids)} hot ids "
                             f"once, got {len(ids)} ids")
        at = np.searchsorted(self.spec.array, ids)
        with self._lock:
            if self.as_of is not None and step < self.as_of:
                return  # a late refresh (resent, or from a slower worker) never replaces newer copies
            self.rows[at] = rows
            self.as_of = int(step)
            self.refreshes += 1

    def forget(self) -> None:
        """Serve nothing until the next refresh (the rows were replaced, by a checkpoint's)."""
        with self._lock:
            self.as_of = None

    def stats(self) -> dict:
        with self._lock:
            return {"table": self.table, "dim": self.dim, "rows": len(self.spec.ids), "staleness": self.spec.staleness,
                    "as_of": self.as_of, "reads": self.reads, "stale": self.stale, "refreshes": self.refreshes}

    def _check(self, ids: np.ndarray, what: str) -> None:
        validate.check_ids(ids)
        strange = np.flatnonzero(~self.spec.contains(ids)) if len(ids) else []
        if len(strange):
            raise ValueError(f"id {int(ids[strange[0]])} is not one of table {self.table!r}'s copied hot rows: "
                             f"a {what} of its copies names only those (ps/plan.py, replicas)")

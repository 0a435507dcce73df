"""``RowSource``: where an ``EmbeddingCollection`` gets its rows and sends their gradients.

The module de-duplicates ids, lays out bags and builds the autograd graph; everything about
where rows live is behind these four calls, one strategy per file:

    h = source.pull("items", unique, create=True, step=7)    # Handle: (U, dim) float32 on wait()
    source.push("items", unique, grad_rows, step=7)           # handed over; may apply later
    source.settle(6)      # every push of steps <= 6 applied (None: every push so far)
    source.flush(7)       # everything held locally reaches the servers, then settle(None)

``PSSource``: the parameter servers, pushes sent from a thread with a bounded window in
flight. ``GeoReplica``: a worker-side replica that trains rows locally and pushes their
changes every k steps (GEO-SGD). A cache of hot rows would wrap ``PSSource`` the same way.

A pull with ``create=False`` is a lookup: it creates no row and changes nothing (eval).
"""

from abc import ABC, abstractmethod

import numpy as np

from cardinal.ps.transport.base import Handle


class RowSource(ABC):
    @abstractmethod
    def pull(self, table: str, ids: np.ndarray, *, create: bool, step: int) -> Handle:
        """Rows of ``ids`` (unique, int64) as seen at ``step``; ``wait()`` gives (len(ids), dim) float32."""

    @abstractmethod
    def push(self, table: str, ids: np.ndarray, grads: np.ndarray, *, step: int,
             counts: np.ndarray | None = None) -> None:
        """Gradient rows (len(ids), dim) float32 of ``step``; may return before they are applied.
        ``counts`` (len(ids),) int32 >= 1: how many updates each row's gradient sums (a cache's
        pending updates, ``optim/base.py``); None: one each."""

    @abstractmethod
    def settle(self, up_to_step: int | None) -> None:
        """Return once every push of steps <= ``up_to_step`` (all, when None) is applied; raises
        the first push error."""

    @abstractmethod
    def flush(self, step: int) -> None:
        """Send everything held locally (recorded at ``step``) and settle every push."""

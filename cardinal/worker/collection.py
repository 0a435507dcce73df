"""``EmbeddingCollection``: parameter-server embeddings as a PyTorch module.

    emb = EmbeddingCollection(client, {"user": "users", "item": "items", "tag": "items"},
                              pooling="sum")
    pooled = emb(batch.sparse)          # {"user": (B, dim), "item": (B, dim), "tag": (B, dim)}
    loss(model(pooled)).backward()      # pushes one gradient row per unique id to the servers

Used like ``nn.EmbeddingBag``: per field, ids come as a ``Bag`` (values + offsets; multi-hot
and empty bags allowed), several fields may share a table. For each table the module
de-duplicates the ids of all its fields (unique + inverse), pulls one row per unique id,
and pools over a leaf tensor of those rows (``pooling.py``, one call per table):

    ids      [7, 3, 7 | 9, 3]          (two fields of one table)
    unique   [7, 3, 9]   -> pull ->    rows (3, dim), requires_grad
    inverse  [0, 1, 0 | 2, 1]  -> bag_pool(rows, inverse, offsets) -> pooled

Backward gives ``rows.grad`` (one row per unique id, summed over its uses); a hook hands it
to a push thread, which routes and sends it with at most ``max_in_flight`` pushes
unacknowledged. Call ``flush()`` to wait for every push to be applied (before a checkpoint).

Consistency, for the rows a pull of step t sees of this worker's own pushes:
  - ``staleness=None`` (sync): every earlier push is applied first;
  - ``staleness=k`` (async): every push of steps <= t - 1 - k is applied first; with k = 1,
    ``prefetch(next_sparse)`` sends the next batch's pulls while this one trains, so rows
    used by two consecutive batches lag by one step.
Both hold over any transport, since they wait for acknowledgements, not for queue order.
In eval mode (``.eval()``) pulls never create rows (unknown ids read as zeros) and nothing
is pushed.
"""

import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cardinal.data.batch import Bag
from cardinal.embedding import unique_inverse
from cardinal.ps.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle
from cardinal.worker.geo import GeoCache
from cardinal.worker.pooling import bag_pool

POOLINGS = ("sum", "mean", "none")


@dataclass
class _Lookup:
    """One table's part of a batch: what was pulled and how to pool it."""

    fields: list[str]      # the table's fields, in the order their bags were concatenated
    unique: np.ndarray     # (U,) int64
    inverse: np.ndarray    # (nnz of all those fields,) int64: positions in unique
    offsets: np.ndarray    # (n_fields * B + 1,) int64: the bags of every field, one after another
    handle: Handle | None  # the pull, (U, dim) float32 when waited on; None: the GEO cache serves it


class EmbeddingCollection(nn.Module):
    def __init__(self, client: PSClient, features: dict[str, str], pooling: str = "sum",
                 staleness: int | None = 1, max_in_flight: int = 4, timeout: float = DEFAULT_TIMEOUT,
                 geo: GeoCache | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if staleness is not None and staleness < 0:
            raise ValueError(f"staleness must be None (sync) or >= 0, got {staleness}")
        self.staleness = staleness
        self.geo = geo  # GEO-SGD: rows train here, their changes go to the servers every k steps
        if not features:
            raise ValueError("an EmbeddingCollection needs at least one feature")
        self.client, self.features, self.pooling = client, dict(features), pooling
        self.tables = sorted(set(self.features.values()))
        self._fields: dict[str, list[str]] = {t: [] for t in self.tables}  # table -> its fields, in order
        for f, t in self.features.items():
            self._fields[t].append(f)
        self._column = {f: self._fields[t].index(f) for f, t in self.features.items()}
        self.max_in_flight, self.timeout = max_in_flight, timeout
        self.step = 0  # recorded with pulls and pushes as the rows' last step
        self._prefetched: tuple[int, dict[str, _Lookup]] | None = None
        self._pushes: list[tuple[int, Handle]] = []  # (step, push) sent, not yet acknowledged
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="cardinal-push")
        self._sending: list[Future] = []        # handed to the push thread, not yet sent
        self.timings: dict[str, float] = defaultdict(float)  # seconds: dedup, pull_wait, push

    def _lookup(self, sparse: dict[str, Bag], step: int) -> dict[str, _Lookup]:
        # sync: every earlier push is applied before this pull; async: all but the last k steps'
        self._settle(None if self.staleness is None else step - 1 - self.staleness)
        if self.geo is not None and self.training:
            self.geo.sync_if_due(step)
        missing = [f for f in self.features if f not in sparse]
        if missing:
            raise ValueError(f"batch has no sparse field {missing[0]!r}; it has {sorted(sparse)}")
        out = {}
        for table, fields in self._fields.items():
            start_time = time.perf_counter()
            values = np.concatenate([sparse[f].values for f in fields])
            unique, inverse = unique_inverse(values)
            offsets, base = [], 0
            for f in fields:
                offsets.append(sparse[f].offsets[:-1] + base)
                base += len(sparse[f].values)
            offsets = np.concatenate([*offsets, [base]])
            self.timings["dedup"] += time.perf_counter() - start_time
            handle = None if self.geo is not None and self.training else \
                self.client.pull(table, unique, create=self.training, step=step)
            out[table] = _Lookup(fields, unique, inverse, offsets, handle)
        return out

    def prefetch(self, sparse: dict[str, Bag], step: int | None = None) -> None:
        """Send the pulls of the batch that ``forward`` will be called with next (recorded
        as seen at ``step``, by default the current one)."""
        self._prefetched = (id(sparse), self._lookup(sparse, self.step if step is None else step))

    def forward(self, sparse: dict[str, Bag]) -> dict[str, torch.Tensor]:
        """Per field: (B, dim) pooled, or (nnz, dim) per-id vectors with ``pooling="none"``."""
        blocks = self._pooled(sparse)
        if self.pooling == "none":
            return {f: blocks[f] for f in self.features}
        return {f: blocks[t][:, self._column[f]] for f, t in self.features.items()}

    def stacked(self, sparse: dict[str, Bag]) -> torch.Tensor:
        """(B, n_features, dim) in feature order: the input of models over all fields (one dim)."""
        if self.pooling == "none":
            raise ValueError("stacked() needs pooling 'sum' or 'mean'")
        blocks = self._pooled(sparse)
        if len(self.tables) == 1:
            return blocks[self.tables[0]]  # already in feature order, no copy
        return torch.stack([blocks[t][:, self._column[f]] for f, t in self.features.items()], 1)

    def _pooled(self, sparse) -> dict[str, torch.Tensor]:
        """table -> (B, fields of that table, dim), or field -> vectors for pooling "none"."""
        if self._prefetched is not None and self._prefetched[0] == id(sparse):
            lookups = self._prefetched[1]
        else:
            lookups = self._lookup(sparse, self.step)
        self._prefetched = None
        out = {}
        for table, lk in lookups.items():
            start_time = time.perf_counter()
            pulled = self.geo.rows(table, lk.unique, self.step) if lk.handle is None else lk.handle.wait(self.timeout)
            rows = torch.from_numpy(pulled)
            self.timings["pull_wait"] += time.perf_counter() - start_time
            if self.training and torch.is_grad_enabled():
                rows.requires_grad_(True)
                rows.register_hook(self._pusher(table, lk.unique))
            if self.pooling == "none":
                vectors = F.embedding(torch.from_numpy(lk.inverse), rows)
                batch = (len(lk.offsets) - 1) // len(lk.fields)
                starts = lk.offsets[::batch] if batch else np.zeros(len(lk.fields) + 1, np.int64)
                for i, field in enumerate(lk.fields):
                    out[field] = vectors[starts[i]:starts[i + 1]]
            else:  # one pooling call per table: backward builds one (U, dim) gradient, not one per field
                out[table] = bag_pool(rows, lk.inverse, lk.offsets, len(lk.fields), self.pooling)
        return out

    def _pusher(self, table: str, unique: np.ndarray):
        step = self.step

        def push(grad: torch.Tensor) -> None:
            g = np.ascontiguousarray(grad.detach().numpy(), dtype=np.float32)
            if self.geo is not None:
                self.geo.apply(table, unique, g, step)
                return
            self._sending.append(self._sender.submit(self._send, table, unique, g, step))
        return push

    def _send(self, table, unique, grad, step) -> None:
        """On the push thread: route and send one push, keeping at most max_in_flight unacknowledged."""
        while len(self._pushes) >= self.max_in_flight:
            self._pushes.pop(0)[1].wait(self.timeout)
        self._pushes.append((step, self.client.push(table, unique, grad, step=step)))

    def _settle(self, up_to_step: int | None) -> None:
        """Send every push handed over so far, and wait until those of steps <= ``up_to_step``
        (all of them when None) are applied."""
        start_time = time.perf_counter()
        while self._sending:
            self._sending.pop(0).result(self.timeout)
        while self._pushes and (up_to_step is None or self._pushes[0][0] <= up_to_step):
            self._pushes.pop(0)[1].wait(self.timeout)
        self.timings["push"] += time.perf_counter() - start_time

    def flush(self) -> None:
        """Wait for every push so far to be applied (raises the first push error); in GEO
        mode, push every local change first."""
        if self.geo is not None:
            self.geo.sync(self.step)
        self._settle(None)

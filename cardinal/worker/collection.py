"""``EmbeddingCollection``: parameter-server embeddings as a PyTorch module.

    emb = EmbeddingCollection(client, {"user": "users", "item": "items", "tag": "items"},
                              pooling="sum")
    pooled = emb(batch.sparse)          # {"user": (B, dim), "item": (B, dim), "tag": (B, dim)}
    loss(model(pooled)).backward()      # pushes one gradient row per unique id to the servers

Used like ``nn.EmbeddingBag``: per field, ids come as a ``Bag`` (values + offsets; multi-hot
and empty bags allowed), several fields may share a table. For each table the module
de-duplicates the ids of all its fields (unique + inverse), pulls one row per unique id,
and pools with ``F.embedding_bag`` over a leaf tensor of those rows:

    ids      [7, 3, 7 | 9, 3]          (two fields of one table)
    unique   [7, 3, 9]   -> pull ->    rows (3, dim), requires_grad
    inverse  [0, 1, 0 | 2, 1]  -> embedding_bag(inverse, rows, offsets) -> pooled

Backward gives ``rows.grad`` (one row per unique id, summed over its uses); a hook pushes
it at once, asynchronously, with at most ``max_in_flight`` pushes outstanding (the oldest is
waited on first). Call ``flush()`` to wait for every push, e.g. before a checkpoint.

Prefetch: ``prefetch(next_sparse)`` sends the next batch's pulls while this one trains.
Those pulls were sent before this batch's push, so rows used by both batches lag by one
step (staleness <= 1). Without prefetch every pull sees every earlier push. In eval mode
(``.eval()``) pulls never create rows (unknown ids read as zeros) and nothing is pushed.
"""

import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cardinal.data.batch import Bag
from cardinal.embedding import unique_inverse
from cardinal.ps.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle

POOLINGS = ("sum", "mean", "none")


@dataclass
class _Lookup:
    """One table's part of a batch: what was pulled and how to pool it."""

    unique: np.ndarray   # (U,) int64
    inverse: np.ndarray  # (nnz over the table's fields,) int64
    bounds: list         # per field: (start, stop) in inverse, offsets
    handle: Handle       # the pull, (U, dim) float32 when waited on


class EmbeddingCollection(nn.Module):
    def __init__(self, client: PSClient, features: dict[str, str], pooling: str = "sum",
                 max_in_flight: int = 4, timeout: float = DEFAULT_TIMEOUT):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if not features:
            raise ValueError("an EmbeddingCollection needs at least one feature")
        self.client, self.features, self.pooling = client, dict(features), pooling
        self.tables = sorted(set(self.features.values()))
        self.max_in_flight, self.timeout = max_in_flight, timeout
        self.step = 0  # recorded with pulls and pushes as the rows' last step
        self._prefetched: tuple[int, dict[str, _Lookup]] | None = None
        self._pushes: list[Handle] = []
        self.timings: dict[str, float] = defaultdict(float)  # seconds: dedup, pull_wait, push

    def _lookup(self, sparse: dict[str, Bag], step: int) -> dict[str, _Lookup]:
        missing = [f for f in self.features if f not in sparse]
        if missing:
            raise ValueError(f"batch has no sparse field {missing[0]!r}; it has {sorted(sparse)}")
        out = {}
        for table in self.tables:
            fields = [f for f in self.features if self.features[f] == table]
            start_time = time.perf_counter()
            values = np.concatenate([sparse[f].values for f in fields])
            unique, inverse = unique_inverse(values)
            self.timings["dedup"] += time.perf_counter() - start_time
            bounds, start = [], 0
            for f in fields:
                stop = start + len(sparse[f].values)
                bounds.append((f, start, stop, sparse[f].offsets))
                start = stop
            handle = self.client.pull(table, unique, create=self.training, step=step)
            out[table] = _Lookup(unique, inverse, bounds, handle)
        return out

    def prefetch(self, sparse: dict[str, Bag], step: int | None = None) -> None:
        """Send the pulls of the batch that ``forward`` will be called with next (recorded
        as seen at ``step``, by default the current one)."""
        self._prefetched = (id(sparse), self._lookup(sparse, self.step if step is None else step))

    def forward(self, sparse: dict[str, Bag]) -> dict[str, torch.Tensor]:
        if self._prefetched is not None and self._prefetched[0] == id(sparse):
            lookups = self._prefetched[1]
        else:
            lookups = self._lookup(sparse, self.step)
        self._prefetched = None
        out = {}
        for table, lk in lookups.items():
            start_time = time.perf_counter()
            rows = torch.from_numpy(lk.handle.wait(self.timeout))
            self.timings["pull_wait"] += time.perf_counter() - start_time
            if self.training and torch.is_grad_enabled():
                rows.requires_grad_(True)
                rows.register_hook(self._pusher(table, lk.unique))
            for field, start, stop, offsets in lk.bounds:
                idx = torch.from_numpy(lk.inverse[start:stop])
                if self.pooling == "none":
                    out[field] = F.embedding(idx, rows)
                else:
                    out[field] = F.embedding_bag(idx, rows, torch.from_numpy(offsets), mode=self.pooling,
                                                 include_last_offset=True)
        return {f: out[f] for f in self.features}

    def _pusher(self, table: str, unique: np.ndarray):
        step = self.step

        def push(grad: torch.Tensor) -> None:
            start_time = time.perf_counter()
            g = np.ascontiguousarray(grad.detach().numpy(), dtype=np.float32)
            while len(self._pushes) >= self.max_in_flight:
                self._pushes.pop(0).wait(self.timeout)
            self._pushes.append(self.client.push(table, unique, g, step=step))
            self.timings["push"] += time.perf_counter() - start_time
        return push

    def flush(self) -> None:
        """Wait for every push sent so far (raises the first push error)."""
        start_time = time.perf_counter()
        while self._pushes:
            self._pushes.pop(0).wait(self.timeout)
        self.timings["push"] += time.perf_counter() - start_time

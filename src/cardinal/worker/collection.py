"""``EmbeddingCollection``: parameter-server embeddings as a PyTorch module.

    emb = EmbeddingCollection(client, {"user": "users", "item": "items", "tag": "items"},
                              pooling="sum")
    pooled = emb(batch.sparse)          # {"user": (B, dim), "item": (B, dim), "tag": (B, dim)}
    emb.stacked(batch.sparse)           # (B, 3, dim); tables of several dims: emb.split(...)
    loss(model(pooled)).backward()      # pushes one gradient row per unique id to the servers

Used like ``nn.EmbeddingBag``: per field, ids come as a ``Bag`` (values + offsets; multi-hot
and empty bags allowed), several fields may share a table. For each table the module
de-duplicates the ids of all its fields (unique + inverse), pulls one row per unique id from
its row source, and pools over a leaf tensor of those rows (a ``Pooling`` strategy, one call
per table):

    ids      [7, 3, 7 | 9, 3]          (two fields of one table)
    unique   [7, 3, 9]   -> pull ->    rows (3, dim), requires_grad
    inverse  [0, 1, 0 | 2, 1]  -> pool(rows, inverse, offsets) -> pooled

Backward gives ``rows.grad`` (one row per unique id, summed over its uses); a hook hands it
to the row source's ``push``, clipped per id first when a ``CowClip`` is given (``clip.py``).
Call ``flush()`` to wait for every push to be applied (before a checkpoint). The module keeps
dedup, layout and autograd; where rows live is the source's business (``sources/``):
``PSSource`` (the servers, a bounded window of pushes in flight; built for you when a
``PSClient`` is given) or ``GeoReplica`` (GEO-SGD, rows trained on the worker).

Consistency, for the rows a pull of step t sees of this worker's own pushes: before pulling,
the module settles the source up to a step:
  - ``staleness=None`` (sync): every earlier push is applied first;
  - ``staleness=k`` (async): every push of steps <= t - 1 - k is applied first; with k = 1,
    ``prefetch(next_sparse)`` sends the next batch's pulls while this one trains, so rows
    used by two consecutive batches lag by one step.
Both hold over any transport, since the source waits for acknowledgements, not queue order.
In eval mode (``.eval()``) pulls never create rows (unknown ids read as zeros) and nothing
is pushed.

On a device (``staging``, a ``DeviceRows``; ``worker/device.py``): dedup stays here on the CPU;
the unique rows, the inverse index and the offsets are staged onto the device, pooling runs
there (``TorchPooling``), and each row's gradient comes back to the host as float32 for the
push. ``stage_ahead()`` (called by the trainer once a step's backward is queued) waits for the
prefetched pulls and starts their copies, so the next batch crosses while this step computes.
A row source may hand back rows already on the device (a torch.Tensor): they are used as is.
"""

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cardinal.data.batch import Bag
from cardinal.ps.client.client import PSClient
from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Handle
from cardinal.worker.clip import CowClip
from cardinal.worker.device import DeviceRows, Staged, to_host
from cardinal.worker.layouts import Layouts, layout
from cardinal.worker.pooling import CompiledPooling, Pooling, TorchPooling
from cardinal.worker.sources import PSSource, RowSource

POOLINGS = ("sum", "mean", "none")


@dataclass
class _Lookup:
    """One table's part of a batch: what was pulled and how to pool it."""

    fields: list[str]      # the table's fields, in the order their bags were concatenated
    unique: np.ndarray     # (U,) int64
    inverse: np.ndarray    # (nnz of all those fields,) int64: positions in unique
    offsets: np.ndarray    # (n_fields * B + 1,) int64: the bags of every field, one after another
    handle: Handle         # the pull, (U, dim) float32 when waited on
    on_device: dict[str, Staged] | None = None  # inverse, offsets (and rows, once staged) on the device
    pulled: Any = None     # the waited pull: (U, dim) np.ndarray, or a tensor a row source keeps on the device


class EmbeddingCollection(nn.Module):
    """``rows``: a ``PSClient`` (a ``PSSource`` over it is built, with ``max_in_flight``
    pushes unacknowledged, 4 by default) or any ``RowSource``. ``pooler``: how bags are
    pooled (``CompiledPooling`` by default). ``clip``: per-id gradient clipping (``CowClip``)
    before each push, none by default. ``staging``: the device the rows go to (a ``DeviceRows``;
    pooling is then ``TorchPooling``), none (the CPU, no copies) by default. ``timings`` holds
    seconds spent in dedup, pull_wait, h2d (staging copies) and push (settling pushes).
    ``buckets``: the hashing trick, each table's ids folded into that many rows by a hash
    (``hashing.fold``; ids sharing a bucket share a row), 0 (the default) for none: what a user
    short of memory would do without Cardinal's row formats, kept to measure them against.
    ``layouts``: de-duplicated layouts shared with other collections over the same batches
    (``layouts.py``; the `lr` baseline's reuses the model's), none (each lookup its own) by default."""

    def __init__(self, rows: PSClient | RowSource, features: dict[str, str], pooling: str = "sum",
                 staleness: int | None = 1, max_in_flight: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                 pooler: Pooling | None = None, clip: CowClip | None = None, staging: DeviceRows | None = None,
                 buckets: int = 0, layouts: Layouts | None = None):
        super().__init__()
        if buckets < 0:
            raise ValueError(f"buckets must be >= 0 (0: no hashing trick), got {buckets}")
        self.buckets = buckets
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if staleness is not None and staleness < 0:
            raise ValueError(f"staleness must be None (sync) or >= 0, got {staleness}")
        if not features:
            raise ValueError("an EmbeddingCollection needs at least one feature")
        if isinstance(rows, PSClient):
            self.source: RowSource = PSSource(rows, 4 if max_in_flight is None else max_in_flight, timeout)
        elif isinstance(rows, RowSource):
            if max_in_flight is not None:
                raise TypeError("max_in_flight belongs to the row source: pass it to PSSource(client, "
                                "max_in_flight), or pass a PSClient instead of a RowSource")
            self.source = rows
        else:
            raise TypeError(f"rows must be a PSClient or a RowSource, got {type(rows).__name__}")
        self.staleness, self.timeout = staleness, timeout
        self.features, self.pooling = dict(features), pooling
        self.staging, self.layouts = staging, layouts
        self.pooler = (CompiledPooling() if staging is None else TorchPooling()) if pooler is None else pooler
        if staging is not None and isinstance(self.pooler, CompiledPooling):
            raise ValueError("rows staged on a device are pooled by torch ops: pass pooler=TorchPooling() or none")
        self.clip = clip
        self.tables = sorted(set(self.features.values()))
        self._fields: dict[str, list[str]] = {t: [] for t in self.tables}  # table -> its fields, in order
        for f, t in self.features.items():
            self._fields[t].append(f)
        self._column = {f: self._fields[t].index(f) for f, t in self.features.items()}
        self.step = 0  # recorded with pulls and pushes as the rows' last step
        self._prefetched: tuple[int, dict[str, _Lookup]] | None = None
        self.timings: dict[str, float] = defaultdict(float)  # seconds: dedup, pull_wait, push

    def _lookup(self, sparse: dict[str, Bag], step: int) -> dict[str, _Lookup]:
        missing = [f for f in self.features if f not in sparse]
        if missing:
            raise ValueError(f"batch has no sparse field {missing[0]!r}; it has {sorted(sparse)}")
        # sync: every earlier push is applied before this pull; async: all but the last k steps'
        self._settle(None if self.staleness is None else step - 1 - self.staleness)
        out = {}
        for table, fields in self._fields.items():
            if self.layouts is not None:  # shared with another collection over the same batches
                unique, inverse, offsets = self.layouts.get(sparse, fields, self.buckets, self.timings)
            else:
                start_time = time.perf_counter()
                unique, inverse, offsets = layout(sparse, fields, self.buckets)
                self.timings["dedup"] += time.perf_counter() - start_time
            handle = self.source.pull(table, unique, create=self.training, step=step)
            if self.training and hasattr(self.source, "record_uses"):  # a cache's hit rate over accesses
                self.source.record_uses(table, inverse)
            out[table] = _Lookup(fields, unique, inverse, offsets, handle)
            if self.staging is not None:
                start_time = time.perf_counter()
                index = torch.int32 if offsets[-1] < 2**31 else torch.int64  # half the bytes; one type for both
                out[table].on_device = {"inverse": self.staging.stage(f"inverse:{table}", inverse, index),
                                        "offsets": self.staging.stage(f"offsets:{table}", offsets, index)}
                self.timings["h2d"] += time.perf_counter() - start_time
        return out

    def prefetch(self, sparse: dict[str, Bag], step: int | None = None) -> None:
        """Send the pulls of the batch that ``forward`` will be called with next (recorded
        as seen at ``step``, by default the current one)."""
        self._prefetched = (id(sparse), self._lookup(sparse, self.step if step is None else step))

    def pulling(self, sparse: dict[str, Bag]) -> bool:
        """Whether this batch's pulls are sent already (``prefetch``), for ``forward`` to take."""
        return self._prefetched is not None and self._prefetched[0] == id(sparse)

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

    def split(self, sparse: dict[str, Bag], dims: dict[str, int],
              wide: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tables of several widths (``embedding.dims``), table t's rows dims[t] values [+ 1 weight with
        ``wide``]: (B, sum of the features' dims) the pooled values side by side in feature order (what
        ``models/projection.py`` takes), and (B, n_features) the pooled weights (None without ``wide``)."""
        if self.pooling == "none":
            raise ValueError("split() needs pooling 'sum' or 'mean'")
        blocks = self._pooled(sparse)
        for t, block in blocks.items():
            assert block.shape[-1] == dims[t] + wide, f"table {t!r}: rows of {block.shape[-1]}, not {dims[t] + wide}"
        fields = [(blocks[t][:, self._column[f]], dims[t]) for f, t in self.features.items()]  # (B, width)
        values = torch.cat([v[:, :d] for v, d in fields], 1)
        return values, (torch.stack([v[:, d] for v, d in fields], 1) if wide else None)

    def _pooled(self, sparse) -> dict[str, torch.Tensor]:
        """table -> (B, fields of that table, dim), or field -> vectors for pooling "none"."""
        if self.pulling(sparse):
            lookups = self._prefetched[1]
        else:
            lookups = self._lookup(sparse, self.step)
        self._prefetched = None
        out = {}
        for table, lk in lookups.items():
            rows = self._rows(table, lk)
            if self.training and torch.is_grad_enabled():
                rows.requires_grad_(True)
                rows.register_hook(self._pusher(table, lk, lk.pulled))
            inverse, offsets = lk.inverse, lk.offsets  # numpy on the CPU path, device tensors when staged
            if lk.on_device is not None:
                inverse, offsets = lk.on_device["inverse"].get(), lk.on_device["offsets"].get()
            if self.pooling == "none":
                vectors = F.embedding(torch.as_tensor(inverse), rows)
                batch = (len(lk.offsets) - 1) // len(lk.fields)
                starts = lk.offsets[::batch] if batch else np.zeros(len(lk.fields) + 1, np.int64)
                for i, field in enumerate(lk.fields):
                    out[field] = vectors[starts[i]:starts[i + 1]]
            else:  # one pooling call per table: backward builds one (U, dim) gradient, not one per field
                out[table] = self.pooler.pool(rows, inverse, offsets, len(lk.fields), self.pooling == "mean")
        return out

    def _rows(self, table: str, lk: _Lookup) -> torch.Tensor:
        """The table's pulled rows as a tensor (on the device when staging), waited on once."""
        if lk.pulled is None:
            start_time = time.perf_counter()
            lk.pulled = lk.handle.wait(self.timeout)
            self.timings["pull_wait"] += time.perf_counter() - start_time
            if lk.on_device is not None:
                start_time = time.perf_counter()
                lk.on_device["rows"] = self.staging.stage(f"rows:{table}", lk.pulled)
                self.timings["h2d"] += time.perf_counter() - start_time
        if lk.on_device is not None:
            return lk.on_device["rows"].get()
        return lk.pulled if isinstance(lk.pulled, torch.Tensor) else torch.from_numpy(lk.pulled)

    def stage_ahead(self) -> None:
        """Wait for the prefetched pulls and start their copies to the device, so they cross while
        the current step's queued work runs; nothing without staging or a prefetch."""
        if self.staging is None or self._prefetched is None:
            return
        for table, lk in self._prefetched[1].items():
            if lk.pulled is None:
                self._rows(table, lk)

    def metrics(self) -> dict:
        """Host-to-device bytes staged so far (0 on the CPU path)."""
        return {"h2d_bytes": self.staging.h2d_bytes if self.staging is not None else 0}

    def _pusher(self, table: str, lk: _Lookup, pulled: np.ndarray | torch.Tensor):
        step, clip, unique = self.step, self.clip, lk.unique

        def push(grad: torch.Tensor) -> None:  # from the device: one float32 row per unique id, to the host
            grads = to_host(grad)
            if clip is not None:
                rows = pulled if isinstance(pulled, np.ndarray) else pulled.detach().cpu().numpy()
                grads = clip(grads, rows, np.bincount(lk.inverse, minlength=len(unique)))
            self.source.push(table, unique, grads, step=step)
        return push

    def _settle(self, up_to_step: int | None) -> None:
        start_time = time.perf_counter()
        self.source.settle(up_to_step)
        self.timings["push"] += time.perf_counter() - start_time

    def flush(self) -> None:
        """Wait for every push so far to be applied (raises the first push error); in GEO
        mode, push every change of the replica first."""
        start_time = time.perf_counter()
        self.source.flush(self.step)
        self.timings["push"] += time.perf_counter() - start_time

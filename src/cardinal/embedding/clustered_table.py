"""Saec as the training table: after the clustering, an id reads and trains its cluster's vector.

A server clusters its part of a table once (``SaecTable.cluster``, run by the table's schedule after
its first push at or past ``SaecSpec.at``: ``after_push.py``) and from then on answers through the
frozen map:

    map (per id)      id -> slot (int32), count, last step      ids    a  b  c  d  e (new)
    cluster rows      slot -> [values | optimizer state]        slot   0  0  1  0  2 = default of e's field
                      (an ``EmbeddingTable`` keyed by slot)     rows   0: centroid, 1: centroid, 2: fresh

- a pull of id x returns the values of x's cluster row; a push's gradient rows are mapped to
  slots and pushed to the cluster rows, where duplicates are summed (in order of appearance) and
  the sparse optimizer runs once per cluster row, with its state per cluster. So a push of ids
  a and b of one cluster equals a push of their summed gradient to that cluster;
- the map is frozen: no id changes cluster. An id first seen after the clustering (a training
  pull, or a push) joins its field's *default cluster*: one row per field and shard, made when
  the field's first new id arrives as the table makes a row for a new id (values uniform in
  +-init_scale from (seed, slot), fresh optimizer state), and trained by every new id of the field.
  New ids share what the field's unseen tail has in common, as the hashing trick's buckets
  would, instead of each training a row from nothing. A lookup-only pull (``create=False``:
  evaluation, serving) of an id never seen reads zeros, as before; an admission filter, when the
  table has one, still decides which new ids may join (the others read zeros, their gradients
  are dropped);
- a cluster row starts as its centroid (``clustered.cluster_fields``: count-weighted k-means in
  each field) and the *sum* of its members' optimizer state; its count is their sum and its last
  step their latest. The sum is the state of a row its members had shared all along: their
  gradients summed at each step, uncorrelated, add their squares, so Adagrad's accumulator of the
  shared row is about the sum of theirs (Adam's moments too; its step count then bias-corrects
  nothing, as for any row trained a while). With their mean instead, a cluster of 20 took its
  first steps ~sqrt(20) times too long: measured on 300k generated rows, dim 64, clustered at 80%
  of the steps, eval AUC 0.6343 (mean) against 0.6436 (sum) and 0.6444 unclustered;

Why server-side: nothing on the wire or on workers changes, so it works the same over every
transport and with any number of workers; each shard clusters its own rows, and ids route to
shards by id, so a cluster lives on exactly one shard. What it costs: per id 20 bytes (id, slot,
count, last step) and its slot in the hash index, instead of a row; the rows are ~1/ratio as many.
"""

import functools
import operator
import threading
from collections.abc import Callable

import numpy as np

from cardinal.compression.clustered import cluster_fields
from cardinal.embedding import row_kernels as RK
from cardinal.embedding.dedup import unique_inverse
from cardinal.embedding.deletion_log import DeletionLog
from cardinal.embedding.id_map import IdMap
from cardinal.embedding.protocol import Admit, check_out
from cardinal.embedding.storage import Columns
from cardinal.embedding.table import EmbeddingTable
from cardinal.embedding.table_views import combine_digests
from cardinal.embedding.table_config import SaecSpec

MIN_CLUSTERS = 16  # a field keeps at least this many clusters (its rows, if fewer): the savings are in large fields
CHECKPOINT_KEY = "saec"  # a manifest entry holding it is a clustered table's (checkpoint/clustered.py)


class SaecTable:
    """A table after Saec: a ``Table`` (``protocol.py``) over a frozen map and the cluster rows (see
    the module docstring). ``clusters``: slots [0, n_clustered) are the clustering's, the rest each
    field's default (``defaults``: field -> slot). No disk tier: rows leaving RAM are map entries,
    deleted; and saved only in full checkpoints, in files of its own (``checkpoint/clustered.py``)."""

    tiered = False

    def __init__(self, config, rows: EmbeddingTable, idmap: IdMap, n_clustered: int, defaults: dict[int, int],
                 shift: int, admission=None):
        assert rows.admission is None and rows.cold is None and config.chunks == 1
        self.config, self.dim, self.optimizer = config, config.dim, rows.optimizer
        self.rows, self.map = rows, idmap
        self.n_clustered, self.defaults, self.shift = n_clustered, dict(defaults), shift
        self.format, self.portable_width = rows.format, rows.portable_width
        self.admission = admission
        self.lock = threading.RLock()
        self.created = self.refused = self.dropped = 0  # ids given an entry, refused by the filter, dropped
        self.evicted: dict[str, int] = {}
        self.deleted = DeletionLog()  # empty: a clustered table saves only full checkpoints, which need no log

    @property
    def storage(self):
        """The map's rows: what eviction scores and deletes (an id evicted forgets its cluster)."""
        return self.map.storage

    def __len__(self) -> int:
        """Ids the table answers for (the map's entries), as a table's rows count its ids."""
        return len(self.map)

    @property
    def clusters(self) -> int:
        """Cluster rows (vectors) held, the default ones included."""
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        return self.map.nbytes + self.rows.nbytes + (self.admission.nbytes if self.admission else 0)

    @property
    def row_bytes(self) -> int:
        """What evicting every map entry would free (the cluster rows stay)."""
        return self.map.storage.nbytes

    def stats(self) -> dict:
        """A Stats reply's entry, as an ``EmbeddingTable``'s: rows are ids; ``clusters``: its cluster rows."""
        return {"rows": len(self), "bytes": self.nbytes, "dim": self.dim, "optimizer": self.optimizer.name,
                "admission": self.admission.name if self.admission else "none",
                "admission_bytes": self.admission.nbytes if self.admission else 0,
                "created": self.created, "refused": self.refused, "dropped": self.dropped,
                "evicted": dict(self.evicted), "ram_rows": len(self.map), "disk_rows": 0, "disk_bytes": 0,
                "faulted": 0, "demoted": 0, "requested": 0, "disk_io": (0, 0), "clusters": self.clusters}

    def close(self) -> None:
        """Nothing: it holds nothing outside RAM."""

    # --- making one ---------------------------------------------------------------------------

    @classmethod
    def cluster(cls, table: EmbeddingTable, spec: SaecSpec, step: int, min_clusters: int = MIN_CLUSTERS) -> "SaecTable":
        """``table``'s rows (every tier) clustered field by field; the caller holds its lock and
        replaces it by the result (``table`` itself is left as it was)."""
        if table.config.chunks != 1:
            raise ValueError(f"table {table.config.name!r}: Saec clusters whole rows; chunked rows "
                             "(compression.fiited.chunks > 1) cannot be clustered")
        dim = table.dim
        saved = table.export()
        ids, counts = saved["ids"], saved["count"]
        work = table.format.portable_form.working(saved["data"], np.arange(len(ids), dtype=np.int64), dim)
        assign, vectors = cluster_fields(ids, work[:, :dim], counts, spec.shift, spec.ratio,
                                         min_clusters=min_clusters)
        k = len(vectors)
        rows = np.empty((k, work.shape[1]), np.float32)
        rows[:, :dim] = vectors
        for j in range(dim, work.shape[1]):  # each state word: the sum of its members' (see the module docstring)
            rows[:, j] = np.bincount(assign, work[:, j].astype(np.float64), k)
        total = np.minimum(np.bincount(assign, counts.astype(np.float64), k), np.iinfo(np.uint32).max)
        last = np.zeros(k, np.uint32)
        np.maximum.at(last, assign, saved["last_step"])
        slots = np.arange(k, dtype=np.int64)
        cluster_rows = EmbeddingTable(table.config, table.optimizer, capacity=max(k, 16))
        portable = rows if cluster_rows.format.exact else cluster_rows.format.from_working(rows, slots, step, dim)
        cluster_rows.import_rows(slots, portable, total.astype(np.uint32), last)
        idmap = IdMap(max(len(ids), 16))
        idmap.insert(ids, assign, counts, saved["last_step"])
        return cls(table.config, cluster_rows, idmap, k, {}, spec.shift, table.admission)

    # --- requests -----------------------------------------------------------------------------

    def pull(self, ids: np.ndarray, *, create: bool = True, step: int = 0, admit: Admit | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Each id's cluster vector (n, dim) float32 (into ``out`` when given). ``create=True``
        (training): ids without an entry join their field's default cluster (as the admission
        filter allows) and every sighting is counted; ``create=False``: nothing changes and ids
        without an entry read zeros."""
        if out is None:
            out = np.zeros((len(ids), self.dim), np.float32)
        else:
            check_out(out, len(ids), self.dim).fill(0)
        with self.lock:
            rows = self.map.find(ids)
            if create and (rows < 0).any():
                new = unique_inverse(ids[rows < 0])[0]
                decision = self.admission.decide(new, int(step)) if self.admission is not None else None
                joining = new if decision is None else new[decision.admitted]
                release = admit(len(joining), self) if admit is not None else None
                try:
                    self._join(joining, step)
                    self.created += len(joining)  # ids given an entry by training pulls
                finally:
                    if release is not None:
                        release()
                if decision is not None:
                    decision.commit()
                    self.refused += len(new) - len(joining)
                rows = self.map.find(ids)
            hit = np.flatnonzero(rows >= 0)
            if len(hit):
                out[hit] = self.rows.pull(self.map.slots(rows[hit]), create=create, step=step)
            if create:
                cols = self.map.columns()
                RK.touch(cols.count, cols.last_step, rows, np.uint32(step), True)
        return out

    def push(self, ids: np.ndarray, grads: np.ndarray, *, step: int = 0, kind: str = "grad",
             admit: Admit | None = None, lr_scale: float = 1.0, counts: np.ndarray | None = None) -> None:
        """Each id's gradient row (or GEO delta) goes to its cluster row: rows of one cluster are summed
        in order of appearance, then the optimizer runs once per cluster (``EmbeddingTable.push``, with
        its all-or-nothing refusal of a non-finite result). Ids without an entry join their field's
        default cluster, or, with an admission filter, are dropped; they join only once the push
        went through."""
        with self.lock:
            rows = self.map.find(ids)
            new = np.empty(0, np.int64)
            if (rows < 0).any():
                if self.admission is not None:  # not admitted: no entry, the gradient is dropped
                    self.dropped += len(unique_inverse(ids[rows < 0])[0])
                    keep = np.flatnonzero(rows >= 0)
                    ids, grads, rows = ids[keep], grads[keep], rows[keep]
                    counts = None if counts is None else counts[keep]
                else:
                    new = unique_inverse(ids[rows < 0])[0]
            if len(ids) == 0:
                return
            slots = np.empty(len(ids), np.int64)
            slots[rows >= 0] = self.map.slots(rows[rows >= 0])
            fields = ids[rows < 0] >> np.int64(self.shift)
            defaults = dict(self.defaults)
            for f in np.unique(fields):  # a field's first new id: its default slot, made by the push below
                defaults.setdefault(int(f), self.n_clustered + len(defaults))
            slots[rows < 0] = [defaults[int(f)] for f in fields]
            release = admit(len(new), self) if admit is not None and len(new) else None
            try:
                self.rows.push(slots, grads, step=step, kind=kind, lr_scale=lr_scale, counts=counts)
                self.defaults = defaults
                if len(new):
                    self.map.insert(new, [defaults[int(f)] for f in new >> np.int64(self.shift)])
            finally:
                if release is not None:
                    release()
            cols = self.map.columns()
            RK.touch(cols.count, cols.last_step, self.map.find(ids), np.uint32(step), False)

    def _join(self, ids: np.ndarray, step: int) -> None:
        """New map entries for ``ids`` (unique, absent), each in its field's default cluster (made
        here, as a new row of the cluster table, the first time) (lock held)."""
        if len(ids) == 0:
            return
        fields = ids >> np.int64(self.shift)
        for f in np.unique(fields):
            if int(f) not in self.defaults:
                slot = self.n_clustered + len(self.defaults)
                self.rows.pull(np.array([slot], np.int64), step=step)  # a fresh row, as for a new id
                self.defaults[int(f)] = slot
        self.map.insert(ids, [self.defaults[int(f)] for f in fields])

    def has(self, ids: np.ndarray) -> np.ndarray:
        with self.lock:
            return self.map.find(ids) >= 0

    # --- deletion: an id forgets its cluster (its cluster row stays) --------------------------

    def delete(self, ids: np.ndarray, log: bool = True) -> int:
        with self.lock:
            rows = self.map.find(ids)
            return self.map.delete(rows[rows >= 0])

    def evict(self, select: Callable[[Columns, int], np.ndarray], reason: str) -> int:
        with self.lock:
            n = self.map.delete(np.unique(np.asarray(select(self.map.columns(), len(self.map)), np.int64)))
            self.evicted[reason] = self.evicted.get(reason, 0) + n
            return n

    def values(self, data: np.ndarray) -> np.ndarray:
        """(n, dim): the cluster vectors of map rows' words ``data`` (n, 1) (eviction's scoring)."""
        return self.rows.pull(data[:, 0].view(np.int32).astype(np.int64), create=False)

    def after_push(self, step: int, replace) -> bool:
        """Nothing: the map is frozen, and the table is never clustered again."""
        return False

    def import_rows(self, ids, data, count, last_step) -> None:
        raise ValueError("a clustered table (Saec) loads from its own checkpoint files, not from rows")

    # --- whole-table views ----------------------------------------------------------------------

    def state(self) -> dict[str, np.ndarray]:
        """What a checkpoint holds: the map (ids, slot, count, last_step), the cluster rows (their
        slots, portable data, count, last_step) and the default slots' fields, in slot order."""
        with self.lock:
            n, cols = len(self.map), self.map.columns()
            rows = self.rows.export()
            order = np.argsort(rows["ids"], kind="stable")
            fields = sorted(self.defaults, key=self.defaults.get)
            return {"ids": cols.ids[:n].copy(), "slot": cols.data[:n, 0].view(np.int32).copy(),
                    "count": cols.count[:n].copy(), "last_step": cols.last_step[:n].copy(),
                    "cluster_slot": rows["ids"][order], "cluster_data": rows["data"][order],
                    "cluster_count": rows["count"][order], "cluster_last_step": rows["last_step"][order],
                    "default_field": np.array(fields, np.int64)}

    def checkpoint_files(self) -> tuple[dict[str, np.ndarray], dict]:
        """Its own files (``state``, lock held) and its manifest entry's "saec" (``checkpoint/clustered.py``)."""
        return self.state(), {CHECKPOINT_KEY: {"shift": self.shift, "clusters": self.n_clustered}}

    @classmethod
    def from_state(cls, config, optimizer, state: dict, n_clustered: int, shift: int, admission=None) -> "SaecTable":
        """The table ``state`` describes (checked by the caller: ``checkpoint/clustered.py``'s ``read``); a
        checkpoint's table as the store loads it: its fresh table's config, optimizer and admission filter."""
        k = len(state["cluster_slot"])
        cluster_rows = EmbeddingTable(config, optimizer, capacity=max(k, 16))
        cluster_rows.import_rows(state["cluster_slot"], state["cluster_data"], state["cluster_count"],
                                 state["cluster_last_step"])
        idmap = IdMap(max(len(state["ids"]), 16))
        idmap.insert(state["ids"], state["slot"], state["count"], state["last_step"])
        defaults = {int(f): n_clustered + i for i, f in enumerate(state["default_field"])}
        return cls(config, cluster_rows, idmap, n_clustered, defaults, shift, admission)

    def export(self, since: int | None = None) -> dict[str, np.ndarray]:
        """Every id as a table's row would be: ids, its cluster's portable row, its own count and last
        step (the unclustered view whole-table readers expect); ``since``: ids touched after it."""
        with self.lock:
            n, cols = len(self.map), self.map.columns()
            keep = np.arange(n) if since is None else np.flatnonzero(cols.last_step[:n] > since)
            rows = self.rows.export()
            at = np.zeros(int(rows["ids"].max()) + 1 if len(rows["ids"]) else 0, np.int64)
            at[rows["ids"]] = np.arange(len(rows["ids"]))
            slots = cols.data[keep, 0].view(np.int32)
            return {"ids": cols.ids[keep], "data": rows["data"][at[slots]], "count": cols.count[keep],
                    "last_step": cols.last_step[keep]}

    def delta_refused(self) -> str:
        return f"holds the clustered (Saec) table {self.config.name!r}, which only full checkpoints save"

    def snapshot(self, since: int | None = None) -> dict:
        """A full checkpoint's extras (as ``EmbeddingTable.snapshot``); no delta of a clustered table."""
        if since is not None:
            raise ValueError(f"table {self.config.name!r} is clustered (Saec): its checkpoints are full ones")
        with self.lock:
            admission = None if self.admission is None else (self.admission.describe(), self.admission.state())
            return {"rows": None, "deleted": np.empty(0, np.int64), "admission": admission}

    def digest_parts(self) -> tuple[int, int]:
        with self.lock:
            n, cols = len(self.map), self.map.columns()
            parts = [RK.digest_rows(cols.ids, cols.data.view(np.int32), cols.count, cols.last_step, n),
                     self.rows.digest_parts()]
        return sum(int(t) for t, _ in parts) % 2**64, functools.reduce(operator.xor, (int(x) for _, x in parts))

    def digest(self) -> str:
        return combine_digests([self.digest_parts()])

    def check(self) -> None:
        """The map's index, the cluster rows' invariants, and every id's slot a live cluster row."""
        with self.lock:
            self.map.check()
            self.rows.check()
            if self.admission is not None:
                self.admission.check()
            slots = self.map.slots(np.arange(len(self.map)))
            assert self.rows.has(np.unique(slots)).all(), "an id's slot has no cluster row"
            assert sorted(self.defaults.values()) == list(range(self.n_clustered, self.n_clustered + len(self.defaults))), \
                "default slots are not numbered after the clustering's"
            assert len(self.rows) == self.n_clustered + len(self.defaults), "cluster rows and slots disagree"

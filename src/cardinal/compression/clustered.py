"""Saec on a table: each field's rows clustered, one vector per cluster in place of a row per id.

    part = cluster_table(table, shift=32, ratio=20)    # one shard's rows, every tier: a server's job
    clustered = ClusteredTable.combine([part, ...])    # every shard's
    clustered.lookup(ids)     # (n, dim) float32: each id's cluster vector; zeros for an id never seen
    clustered.vectors         # (k, dim) float32: about 1/ratio as many as the rows

An id's field is its bits from ``shift`` up (the readers put it there: criteo 32, movielens 40),
so no cluster mixes fields, as in the paper. Each field of ``n`` rows gets ceil(n / ratio)
clusters from ``saec.cluster``, and at least ``min_clusters`` (a field of 20 genres keeps them
apart: the savings are in the large fields), weighted by the times each id was pulled for training (the
table's count): the well-trained frequent ids seed and shape the clusters, the tail joins the
nearest. Frequency-aware (``own`` > 0): that share of a field's clusters go to its most frequent
ids, one each, exact; the tail shares the rest (at ratio 20, own 0.5: the top 2.5% of ids keep
their rows, the others share a vector with about 38 more). Off by default here: training's and
export's Saec cluster plainly until a benchmark's table says otherwise (benchmarks/compression.py).
An unseen id reads zeros, as it does in training's evaluation. What serving keeps is
``nbytes``: the sorted ids (8 bytes each), their cluster numbers (4) and the vectors.
"""

from dataclasses import dataclass

import numpy as np

from cardinal.compression.saec import cluster


@dataclass(frozen=True)
class ClusteredTable:
    ids: np.ndarray      # (n,) int64, sorted
    cluster: np.ndarray  # (n,) int32: each id's row of ``vectors``
    vectors: np.ndarray  # (k, dim) float32

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        out = np.zeros((len(ids), self.vectors.shape[1]), np.float32)
        if len(self.ids) == 0:
            return out
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        hit = self.ids[pos] == ids
        out[hit] = self.vectors[self.cluster[pos[hit]]]
        return out

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.cluster.nbytes + self.vectors.nbytes

    @staticmethod
    def combine(parts: list["ClusteredTable"]) -> "ClusteredTable":
        """The clusters of several shards (disjoint ids) as one table; no vector is shared across parts."""
        offsets = np.cumsum([0] + [len(p.vectors) for p in parts[:-1]])
        ids = np.concatenate([p.ids for p in parts])
        clusters = np.concatenate([p.cluster + np.int32(o) for p, o in zip(parts, offsets)])
        order = np.argsort(ids, kind="stable")
        return ClusteredTable(ids[order], clusters[order], np.concatenate([p.vectors for p in parts]))


def cluster_table(table, shift: int, ratio: float, rounds: int = 3, min_clusters: int = 16,
                  own: float = 0.0) -> ClusteredTable:
    """Cluster every field of ``table`` (an ``EmbeddingTable``: its rows in RAM and on disk)."""
    check_ratio(ratio)
    rows = table.export()
    ids, counts = rows["ids"], rows["count"]
    values = table.pull(ids, create=False)  # decoded, whatever the format and tier
    assign, vectors = cluster_fields(ids, values, counts, shift, ratio, rounds, min_clusters, own)
    order = np.argsort(ids, kind="stable")
    return ClusteredTable(ids[order], assign[order], vectors)


def check_ratio(ratio: float) -> None:
    if not ratio >= 1:
        raise ValueError(f"ratio must be >= 1 (rows per cluster), got {ratio!r}")


def cluster_fields(ids: np.ndarray, values: np.ndarray, counts: np.ndarray, shift: int, ratio: float,
                   rounds: int = 3, min_clusters: int = 16, own: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Each field's rows clustered on their own: (assign (n,) int32 in the order of ``ids``, vectors
    (k, dim) float32); fields in increasing order, each one's clusters numbered after the last's.

    ids,     # (n,) int64, unique
    values,  # (n, dim) float32
    counts,  # (n,) integers: the weights
    own: the share of each field's clusters that are its most frequent ids' own (0: none)
    """
    check_ratio(ratio)
    if not 0 <= own < 1:
        raise ValueError(f"own must be in [0, 1) (a share of the clusters), got {own!r}")
    fields = ids >> np.int64(shift)
    assign = np.empty(len(ids), np.int32)
    vectors, k0 = [], 0
    for f in np.unique(fields):
        mine = np.flatnonzero(fields == f)
        k = max(int(np.ceil(len(mine) / ratio)), min_clusters)
        got = cluster(values[mine], counts[mine], k, rounds=rounds, own=int(own * min(k, len(mine) - 1)))
        assign[mine] = got.assign + np.int32(k0)
        vectors.append(got.centroids)
        k0 += len(got.centroids)
    if not vectors:
        return assign, np.empty((0, values.shape[1]), np.float32)
    return assign, np.concatenate(vectors)

"""Saec applied to a table (compression/clustered.py): per field clusters, lookups, shards combined."""

import numpy as np
import pytest

from cardinal.compression import cluster
from cardinal.compression.clustered import ClusteredTable, cluster_table
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer


def planted(n_per_field=(600, 300), blobs=6, dim=4, seed=0):
    """A table whose fields' rows sit around ``blobs`` well-separated centres each, counts Zipf."""
    rng = np.random.default_rng(seed)
    table = EmbeddingTable(TableConfig("t", dim, init_scale=0.0), make_optimizer({"name": "sgd", "lr": 1.0}))
    for f, n in enumerate(n_per_field, start=1):
        ids = (np.int64(f) << 32) | rng.choice(2**31, n, replace=False).astype(np.int64)
        centre = rng.normal(size=(blobs, dim)).astype(np.float32) * 10
        target = centre[rng.integers(0, blobs, n)] + rng.normal(size=(n, dim)).astype(np.float32) * 0.01
        for _ in range(3):  # a sighting or more per id: counts that differ
            table.pull(ids[: n // (1 + _)], step=1)
        table.push(ids, -target, step=1)  # sgd, lr 1, rows start at 0: values = target
    return table


def test_each_field_gets_its_own_clusters_and_lookups_read_them():
    table = planted()
    got = cluster_table(table, shift=32, ratio=50, min_clusters=1)
    assert len(got.vectors) == 12 + 6  # ceil(600 / 50) + ceil(300 / 50)
    assert len(cluster_table(table, shift=32, ratio=50, min_clusters=10).vectors) == 12 + 10  # small fields keep 10
    e = table.export()
    fields = e["ids"] >> 32
    by_field = {f: set(got.cluster[np.searchsorted(got.ids, e["ids"][fields == f])]) for f in (1, 2)}
    assert not by_field[1] & by_field[2]  # no cluster mixes fields
    values = table.pull(e["ids"], create=False)
    near = got.lookup(e["ids"])
    assert np.median(np.abs(near - values).max(axis=1)) < 0.1  # most ids sit by their cluster's vector
    first = e["ids"][fields == 1]  # the same as clustering the field alone
    alone = cluster(table.pull(first, create=False), e["count"][fields == 1], 12)
    assert np.array_equal(got.lookup(first), alone.centroids[alone.assign])
    assert not got.lookup(np.array([3 << 32, 12345], np.int64)).any()  # unseen ids read zeros
    assert got.nbytes == 900 * 12 + 18 * 4 * 4


def test_shards_combine_into_one_table():
    a, b = planted(seed=1), planted(seed=2)
    pa, pb = cluster_table(a, 32, 20, min_clusters=1), cluster_table(b, 32, 20, min_clusters=1)
    both = ClusteredTable.combine([pa, pb])
    assert len(both.vectors) == len(pa.vectors) + len(pb.vectors)
    for part, table in ((pa, a), (pb, b)):
        ids = table.export()["ids"]
        assert np.array_equal(both.lookup(ids), part.lookup(ids))


def test_bad_ratio_and_an_empty_table():
    table = EmbeddingTable(TableConfig("t", 3), make_optimizer({"name": "sgd"}))
    assert len(cluster_table(table, 32, 10).vectors) == 0
    with pytest.raises(ValueError, match="ratio must be >= 1"):
        cluster_table(table, 32, 0.5)

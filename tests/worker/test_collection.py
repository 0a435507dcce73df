"""EmbeddingCollection: pooling, gradient pushes, prefetch semantics, eval mode."""

import numpy as np
import pytest
import torch

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.worker import EmbeddingCollection
from cardinal.worker.sources import GeoReplica
from helpers.bags import bag

CONFIG = StoreConfig((TableConfig("a", 4, init_scale=0.5), TableConfig("b", 3, init_scale=0.5)), {"name": "sgd", "lr": 1.0})


SPARSE = {"x": bag([[1, 2], [], [2, 2, 3]]), "y": bag([[3], [4], []]), "z": bag([[9], [9], [10]])}
FEATURES = {"x": "a", "y": "a", "z": "b"}


def rows_of(client, table, ids):
    return client.pull(table, np.array(ids, np.int64), create=False).wait()


@pytest.mark.parametrize("pooling", ["sum", "mean", "none"])
def test_pooling_matches_a_manual_lookup(pooling):
    client = connect(CONFIG, 3)
    out = EmbeddingCollection(client, FEATURES, pooling)(SPARSE)
    for field, table in FEATURES.items():
        b = SPARSE[field]
        vectors = rows_of(client, table, b.values)
        if pooling == "none":
            np.testing.assert_allclose(out[field].detach().numpy(), vectors)
            continue
        for i in range(3):
            part = vectors[b.offsets[i]:b.offsets[i + 1]]
            want = np.zeros(vectors.shape[1]) if len(part) == 0 else (part.sum(0) if pooling == "sum" else part.mean(0))
            np.testing.assert_allclose(out[field][i].detach().numpy(), want, rtol=1e-6, atol=1e-7)


def test_backward_pushes_one_summed_gradient_row_per_unique_id():
    client = connect(CONFIG, 2)
    emb = EmbeddingCollection(client, FEATURES, "sum")
    out = emb(SPARSE)
    before = {t: rows_of(client, t, ids) for t, ids in (("a", [1, 2, 3, 4]), ("b", [9, 10]))}
    weights = {"x": 1.0, "y": 10.0, "z": 100.0}
    sum(weights[f] * out[f].sum() for f in out).backward()
    emb.flush()
    # d loss / d row(id) = sum over its uses of the field weight; SGD lr=1 subtracts exactly that
    uses = {("a", 1): 1, ("a", 2): 3, ("a", 3): 1 + 10, ("a", 4): 10, ("b", 9): 200, ("b", 10): 100}
    for (t, i), g in uses.items():
        ids = [1, 2, 3, 4] if t == "a" else [9, 10]
        after = rows_of(client, t, [i])[0]
        np.testing.assert_allclose(after, before[t][ids.index(i)] - g, rtol=1e-5)
    stats = client.stats()
    assert sum(s["tables"]["a"]["rows"] for s in stats) == 4  # nothing else created


def test_prefetched_pulls_lag_by_one_push_and_match_otherwise():
    seq = [{"x": bag([[1]]), "y": bag([[5]]), "z": bag([[7]])},
           {"x": bag([[1]]), "y": bag([[6]]), "z": bag([[8]])}]

    def run(prefetch: bool):
        client = connect(CONFIG, 2)
        emb = EmbeddingCollection(client, FEATURES, "sum")
        outs = []
        for k, sparse in enumerate(seq):
            out = emb(sparse)
            if prefetch and k + 1 < len(seq):
                emb.prefetch(seq[k + 1])
            outs.append({f: v.detach().clone() for f, v in out.items()})
            sum(v.sum() for v in out.values()).backward()
        emb.flush()
        return outs

    plain, ahead = run(False), run(True)
    # id 1 is in both batches: with prefetch the second batch sees it before the first push
    assert not torch.equal(plain[1]["x"], ahead[1]["x"])
    torch.testing.assert_close(ahead[1]["x"], plain[0]["x"])
    torch.testing.assert_close(plain[1]["y"], ahead[1]["y"])  # ids seen once: identical


def test_eval_mode_creates_nothing_and_pushes_nothing():
    client = connect(CONFIG, 2)
    trained = EmbeddingCollection(client, FEATURES, "sum")
    sum(v.sum() for v in trained({"x": bag([[1]]), "y": bag([[4]]), "z": bag([[9]])}).values()).backward()
    trained.flush()  # rows a:1, a:4, b:9 exist and were trained once
    everything = (("a", [1, 2, 3, 4]), ("b", [9, 10]))
    before = {t: rows_of(client, t, ids) for t, ids in everything}
    digests = {t: client.digest(t) for t in ("a", "b")}

    emb = EmbeddingCollection(client, FEATURES, "sum").eval()
    weight = torch.ones((), requires_grad=True)  # something to differentiate, so backward really runs
    out = emb(SPARSE)
    sum((weight * v).sum() for v in out.values()).backward()
    emb.flush()
    assert weight.grad is not None
    np.testing.assert_array_equal(out["z"][0].detach().numpy(), before["b"][0])  # known id: its row
    assert (out["z"][2] == 0).all()  # unknown id 10: zeros
    for t, ids in everything:  # nothing pushed: every row bitwise as it was
        np.testing.assert_array_equal(rows_of(client, t, ids), before[t])
    assert {t: client.digest(t) for t in ("a", "b")} == digests
    rows = {t: sum(s["tables"][t]["rows"] for s in client.stats()) for t in ("a", "b")}
    assert rows == {"a": 2, "b": 1}  # nothing created in either table


def test_configuration_errors_are_named():
    client = connect(CONFIG, 1)
    with pytest.raises(ValueError, match="pooling"):
        EmbeddingCollection(client, FEATURES, "max")
    with pytest.raises(ValueError, match="no sparse field 'z'"):
        EmbeddingCollection(client, FEATURES)({"x": SPARSE["x"], "y": SPARSE["y"]})


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_compiled_pooling_matches_embedding_bag_forward_and_backward(mode, rng):
    from cardinal.worker.pooling import bag_pool

    rows = torch.randn(50, 6, requires_grad=True)
    sizes = rng.integers(0, 5, 40)  # 4 fields x 10 examples, field-major
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    inverse = rng.integers(0, 50, offsets[-1]).astype(np.int64)
    ours = bag_pool(rows, inverse, offsets, 4, mode)
    theirs = torch.nn.functional.embedding_bag(torch.from_numpy(inverse), rows, torch.from_numpy(offsets),
                                               mode=mode, include_last_offset=True).view(4, 10, 6).transpose(0, 1)
    torch.testing.assert_close(ours, theirs)
    weights = torch.randn(10, 4, 6)
    g_ours, = torch.autograd.grad((ours * weights).sum(), rows)
    g_theirs, = torch.autograd.grad((theirs * weights).sum(), rows)
    torch.testing.assert_close(g_ours, g_theirs)


def test_geo_with_interval_one_and_sgd_matches_sync_sgd():
    seq = [{"x": bag([[1, 2]]), "y": bag([[2]]), "z": bag([[7]])},
           {"x": bag([[2, 3]]), "y": bag([[1]]), "z": bag([[7, 8]])},
           {"x": bag([[1]]), "y": bag([[3]]), "z": bag([[8]])}]

    def run(geo: bool):
        client = connect(CONFIG, 2)
        rows = GeoReplica(client, {"name": "sgd", "lr": 1.0}, 1, 20) if geo else client
        emb = EmbeddingCollection(rows, FEATURES, "sum", None)
        for step, sparse in enumerate(seq, 1):
            emb.step = step
            out = emb(sparse)
            sum((i + 1) * v.sum() for i, v in enumerate(out.values())).backward()
        emb.flush()
        return {t: rows_of(client, t, ids) for t, ids in (("a", [1, 2, 3]), ("b", [7, 8]))}

    sync, geo = run(False), run(True)
    for t in sync:
        np.testing.assert_allclose(geo[t], sync[t], rtol=1e-6, atol=1e-6)


def test_geo_pushes_changes_only_at_the_end_of_each_interval():
    client = connect(CONFIG, 2)
    emb = EmbeddingCollection(GeoReplica(client, {"name": "sgd", "lr": 1.0}, 3, 20), FEATURES, "sum", None)
    sparse = {"x": bag([[1]]), "y": bag([[2]]), "z": bag([[7]])}
    start = client.pull("a", np.array([1], np.int64)).wait()  # the row as the servers create it
    for step in (1, 2, 3):
        emb.step = step
        emb(sparse)["x"].sum().backward()
        np.testing.assert_array_equal(rows_of(client, "a", [1]), start)  # still only on the worker
    emb.step = 4
    emb(sparse)  # a new interval begins: the three steps' change reaches the servers
    np.testing.assert_allclose(rows_of(client, "a", [1]), start - 3.0, rtol=1e-6)


def test_hash_buckets_fold_ids_into_shared_rows():
    from cardinal.embedding.hashing import fold

    ids = np.arange(-5000, 5000, dtype=np.int64)
    buckets = np.empty_like(ids)
    fold(ids, 7, buckets)
    assert buckets.min() >= 0 and buckets.max() < 7 and np.bincount(buckets).min() > 1300  # spread evenly
    client = connect(CONFIG, 2)
    emb = EmbeddingCollection(client, FEATURES, "none", buckets=3)
    out = emb(SPARSE)
    for field, table in FEATURES.items():  # each id reads the row of its bucket
        folded = np.empty_like(SPARSE[field].values)
        fold(SPARSE[field].values, 3, folded)
        np.testing.assert_array_equal(out[field].detach().numpy(), rows_of(client, table, folded))
    sum(o.sum() for o in out.values()).backward()
    emb.flush()
    assert sum(s["tables"]["a"]["rows"] for s in client.stats()) <= 3  # only buckets were ever made
    with pytest.raises(ValueError, match="buckets must be >= 0"):
        EmbeddingCollection(client, FEATURES, buckets=-1)

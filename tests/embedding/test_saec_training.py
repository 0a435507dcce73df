"""Saec as the training table (embedding/clustered_table.py): a store clusters a table at a
step, then every id reads and trains its cluster's row; checkpoints, recipes and a run end to end."""

import json

import numpy as np
import pytest

from cardinal.checkpoint import layout, write
from cardinal.compression.clustered import cluster_fields
from cardinal.embedding.clustered_table import SaecTable
from cardinal.embedding.table_config import SaecSpec
from cardinal.embedding import TableConfig
from cardinal.embedding.hashing import init_rows
from cardinal.optim import make_optimizer, reference
from cardinal.ps import ShardStore, StoreConfig
from cardinal.recipe import load
from cardinal.recipe.admission import AdmissionConfig
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

DIM = 4
OPT = {"name": "rowwise_adagrad", "lr": 0.1}
FIELDS = (1, 2)


def ids_of(n=200):
    """``n`` ids in each of two fields (field << 32 | value)."""
    return np.concatenate([(np.int64(f) << 32) | np.arange(n, dtype=np.int64) * 7 for f in FIELDS])


def make_store(at=3, ratio=5.0, admission=None, opt=OPT, storage="fp32", shard=0, n_shards=1):
    cfg = StoreConfig((TableConfig("emb", DIM, storage=storage), TableConfig("other", 2)), opt,
                      {"emb": admission} if admission else {}, saec={"emb": SaecSpec(ratio, at, 32)})
    return ShardStore(cfg, shard, n_shards)


def train(store, ids, steps, seed=0):
    """Pull and push every id at each of ``steps`` (gradients drawn from ``seed``), uneven counts."""
    rng = np.random.default_rng(seed)
    for step in steps:
        some = ids[: len(ids) // (1 + step % 3)]
        store.pull("emb", some, step=step)
        store.push("emb", some, rng.normal(size=(len(some), DIM)).astype(np.float32), step=step)


def clustered_store(**kw):
    s = make_store(**kw)
    ids = ids_of()
    train(s, ids, (1, 2))
    before = s.tables["emb"].export()
    train(s, ids, (3,))  # the push of step 3 clusters
    assert isinstance(s.tables["emb"], SaecTable)
    return s, ids, before


def test_the_store_clusters_at_its_step_and_a_pull_reads_each_ids_cluster_vector():
    s = make_store(at=3)
    ids = ids_of()
    train(s, ids, (1, 2))
    assert not isinstance(s.tables["emb"], SaecTable)  # not before the step
    table = s.tables["emb"]
    train(s, ids, (3,))
    assert not isinstance(s.tables["other"], SaecTable)  # only the tables named
    # the clustering of the rows as they were after the push of step 3, computed independently
    rows = table.export()
    values = table.pull(rows["ids"], create=False)
    assign, vectors = cluster_fields(rows["ids"], values, rows["count"], 32, 5.0)
    got = s.pull("emb", rows["ids"], create=False)
    np.testing.assert_array_equal(got, vectors[assign])  # every id of a cluster reads the cluster's vector
    assert len(vectors) == 2 * 40 and s.stats()["tables"]["emb"]["clusters"] == 80
    assert len(np.unique(got, axis=0)) == 80
    assert s.stats()["tables"]["emb"]["rows"] == 400
    s.check()


def test_a_clustered_table_holds_fewer_bytes():
    s = ShardStore(StoreConfig((TableConfig("emb", 32),), OPT, saec={"emb": SaecSpec(20.0, 3)}))
    ids = np.concatenate([(np.int64(f) << 32) | np.arange(20_000, dtype=np.int64) for f in FIELDS])
    s.pull("emb", ids, step=1)
    unclustered = s.stats()["tables"]["emb"]["bytes"]
    s.push("emb", ids, np.zeros((len(ids), 32), np.float32), step=3)
    clustered = s.stats()["tables"]["emb"]["bytes"]
    assert s.stats()["tables"]["emb"]["clusters"] == 2000
    assert clustered < unclustered / 3  # dim 32: a row was 33 words and an id's metadata; now 20 bytes
    assert s.tables["emb"].map.storage.nbytes == 40_000 * 20  # id, slot, count, last step


def working_rows(table):
    """slot -> [values | state] of a SaecTable's cluster rows (fp32: the stored words)."""
    e = table.rows.export()
    out = np.empty_like(e["data"])
    out[e["ids"]] = e["data"]
    return out


def test_a_push_to_ids_of_one_cluster_is_their_summed_gradient_on_the_cluster_row():
    s, ids, _ = clustered_store()
    t = s.tables["emb"]
    slots = t.map.slots(t.map.find(ids))
    a, b = ids[slots == slots[0]][:2]  # two ids of one cluster
    c = ids[slots != slots[0]][0]      # and one of another
    rng = np.random.default_rng(5)
    g = rng.normal(size=(3, DIM)).astype(np.float32)
    twin, _, _ = clustered_store()
    s.push("emb", np.array([a, c, b]), g, step=4)
    twin.push("emb", np.array([a, c]), np.stack([g[0] + g[2], g[1]]), step=4)
    both = np.array([a, b, c])
    np.testing.assert_array_equal(s.pull("emb", both, create=False), twin.pull("emb", both, create=False))
    assert s.stats(digest=True)["tables"]["emb"]["digest_parts"][1] != 0


@pytest.mark.parametrize("opt", [OPT, {"name": "adagrad", "lr": 0.05}, {"name": "adam", "lr": 0.01},
                                 {"name": "sgd", "lr": 0.1}])
def test_pushes_match_a_dense_numpy_optimizer_on_the_cluster_rows(opt):
    """A slow reference: every cluster row as a dense array, each push's gradients summed per
    cluster in numpy and applied row by row with the optimizer's formulas (optim/reference.py)."""
    s, ids, _ = clustered_store(opt=opt)
    t = s.tables["emb"]
    dense = working_rows(t).copy()
    cfg = make_optimizer(opt).config
    rng = np.random.default_rng(1)
    for step in (4, 5, 6):
        pick = rng.choice(ids, 150)  # duplicates too
        g = rng.normal(size=(len(pick), DIM)).astype(np.float32)
        s.push("emb", pick, g, step=step)
        slots = t.map.slots(t.map.find(pick))
        for slot in np.unique(slots):
            summed = np.zeros(DIM, np.float32)
            for row in g[slots == slot]:  # in order of appearance, as the table sums
                summed += row
            reference.update_row(opt["name"], cfg, dense[slot], summed, DIM)
    np.testing.assert_allclose(working_rows(t), dense, rtol=2e-5, atol=1e-6)
    got = s.pull("emb", ids, create=False)
    np.testing.assert_allclose(got, dense[t.map.slots(t.map.find(ids)), :DIM], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("opt", [OPT, {"name": "adam", "lr": 0.01}])
def test_cluster_rows_start_with_their_members_summed_state_count_and_latest_step(opt):
    s = make_store(at=3, opt=opt)
    ids = ids_of()
    train(s, ids, (1, 2))
    old = s.tables["emb"]
    train(s, ids, (3,))
    t = s.tables["emb"]
    was = old.export()  # the rows the clustering read (the old table is left as it was)
    slots = t.map.slots(t.map.find(was["ids"]))
    rows = t.rows.export()
    at = np.argsort(rows["ids"])
    for slot in range(t.n_clustered):
        mine = slots == slot
        np.testing.assert_allclose(rows["data"][at[slot], DIM:], was["data"][mine, DIM:].astype(np.float64).sum(0),
                                   rtol=1e-6)
        assert rows["count"][at[slot]] == was["count"][mine].sum()
        assert rows["last_step"][at[slot]] == was["last_step"][mine].max()
    assert (rows["data"][:, DIM:] > 0).any()


def test_ids_first_seen_after_the_clustering_join_their_fields_default_row():
    s, ids, _ = clustered_store()
    t = s.tables["emb"]
    k = t.n_clustered
    new = np.array([(1 << 32) | 999_999, (1 << 32) | 888_888, (3 << 32) | 5], np.int64)
    digest = s.stats(digest=True)["tables"]["emb"]["digest_parts"]
    assert not s.pull("emb", new, create=False).any()  # evaluation: zeros, nothing changes
    assert s.stats(digest=True)["tables"]["emb"]["digest_parts"] == digest
    got = s.pull("emb", new, step=4)  # training: each field's default row, made as a new id's row
    fresh = np.zeros((2, DIM + 1), np.float32)
    init_rows(np.array([k, k + 1], np.int64), fresh, 0, 2, DIM, np.int64(0), np.float32(0.01))
    np.testing.assert_array_equal(got, fresh[[0, 0, 1], :DIM])
    assert t.defaults == {1: k, 3: k + 1} and len(t) == len(ids) + 3
    s.push("emb", new[:1], np.ones((1, DIM), np.float32), step=4)  # trains the field's default row...
    after = s.pull("emb", new, create=False)
    assert np.array_equal(after[0], after[1]) and not np.array_equal(after[0], got[0])  # ...for both its ids
    np.testing.assert_array_equal(after[2], got[2])
    never = np.array([(1 << 32) | 777_777], np.int64)
    assert not s.pull("emb", never, create=False).any()  # an id never seen still reads zeros
    s.push("emb", np.array([(2 << 32) | 1_000_001], np.int64), np.ones((1, DIM), np.float32), step=5)
    assert t.defaults[2] == k + 2 and s.tables["emb"].has(np.array([(2 << 32) | 1_000_001])).all()  # a push joins
    s.check()


def test_with_an_admission_filter_new_ids_join_only_when_admitted():
    s, ids, _ = clustered_store(admission=AdmissionConfig(policy="count", threshold=2))
    new = np.array([(1 << 32) | 999_999], np.int64)
    assert not s.pull("emb", new, step=4).any()  # first sighting: not admitted, zeros
    s.push("emb", new, np.ones((1, DIM), np.float32), step=4)  # dropped
    assert s.stats()["tables"]["emb"]["dropped"] == 1 and s.stats()["tables"]["emb"]["refused"] == 1
    assert not s.tables["emb"].has(new).any()
    assert s.pull("emb", new, step=5).any()  # second: joins the default row
    s.check()


def save(s, root, step):
    s.save(root, step)
    write.commit(layout.step_dir(root, step), step, s.n_shards)
    return layout.step_dir(root, step)


@pytest.mark.parametrize("storage", ["fp32", "int8"])
def test_a_checkpoint_round_trip_reads_back_bitwise_and_trains_on_the_same(tmp_path, storage):
    s, ids, _ = clustered_store(storage=storage)
    new = np.array([(1 << 32) | 999_999, (3 << 32) | 5], np.int64)
    s.pull("emb", new, step=4)
    s.push("emb", new, np.ones((2, DIM), np.float32), step=4)
    path = save(s, tmp_path, 4)
    loaded = make_store(storage=storage)
    loaded.load(str(path))
    every = np.concatenate([ids, new, [(1 << 32) | 12345]])
    assert isinstance(loaded.tables["emb"], SaecTable)
    np.testing.assert_array_equal(loaded.pull("emb", every, create=False), s.pull("emb", every, create=False))
    for store in (s, loaded):  # the optimizer state came back too: the same pushes give the same rows
        train(store, every, (5, 6), seed=9)
    np.testing.assert_array_equal(loaded.pull("emb", every, create=False), s.pull("emb", every, create=False))
    for name in ("emb", "other"):
        assert loaded.stats(digest=True)["tables"][name]["digest_parts"] == s.stats(digest=True)["tables"][name]["digest_parts"]
    loaded.check()


def test_a_saved_shard_not_yet_clustered_loads_and_clusters_at_its_step(tmp_path):
    s = make_store(at=3)
    ids = ids_of()
    train(s, ids, (1, 2))
    path = save(s, tmp_path, 2)
    loaded = make_store(at=3)
    loaded.load(str(path))
    for store in (s, loaded):
        train(store, ids, (3, 4), seed=3)
    assert isinstance(loaded.tables["emb"], SaecTable)
    np.testing.assert_array_equal(loaded.pull("emb", ids, create=False), s.pull("emb", ids, create=False))


def test_an_edited_file_another_shard_count_and_a_delta_are_refused(tmp_path):
    s, ids, _ = clustered_store()
    path = save(s, tmp_path, 4)
    with pytest.raises(ValueError, match=r"loads only into 1 shards, not 2: set ps.shards = 1"):
        make_store(n_shards=2).load(str(path))
    with pytest.raises(ValueError, match="only full checkpoints save"):
        s.save(tmp_path, 5, base=4)
    data = path / "shard-00000-of-00001" / "emb.cluster_data.npy"
    raw = bytearray(data.read_bytes())
    raw[-3] ^= 0x40
    data.write_bytes(bytes(raw))
    target = make_store()
    before = target.stats(digest=True)
    with pytest.raises(ValueError, match="emb.cluster_data.npy"):
        target.load(str(path))
    assert target.stats(digest=True) == before  # a refused load changes nothing


@pytest.mark.parametrize("sets, match", [
    (["compression.saec.ratio=0.5", "compression.saec.at=3"], "saec.ratio must be 0"),
    (["compression.saec.ratio=20"], "needs compression.saec.at >= 1"),
    (["compression.saec.at=5"], "saec.at = 5 applies only with"),
    (["compression.saec.ratio=20", "compression.saec.at=5", "compression.fiited.chunks=2"], "Saec clusters whole rows"),
    (["compression.saec.ratio=20", "compression.saec.at=5", "compression.hash_buckets=100"], "hash_buckets"),
    (["compression.saec.ratio=20", "compression.saec.at=5", 'consistency.mode="geo"'], "GEO replica"),
    (["compression.saec.ratio=20", "compression.saec.at=5", "checkpoint.full_every=2"], "full_every = 1"),
    (["compression.saec.ratio=20", "compression.saec.at=5", "cache.bytes=1000000"], "cache.bytes = 0"),
    (["compression.saec.ratio=20", "compression.saec.at=5", 'sparse_optimizer.name="ftrl"'], "ftrl"),
    (['compression.saec.ratio="x"'], "saec.ratio must be float"),
])
def test_recipe_errors_name_the_key(sets, match):
    with pytest.raises(ValueError, match=match):
        load("criteo_synthetic", sets)


def test_the_store_config_checks_its_specs():
    with pytest.raises(ValueError, match="saec names table 'nope'"):
        StoreConfig((TableConfig("emb", 4),), saec={"nope": SaecSpec(2, 1)})
    with pytest.raises(ValueError, match="saec ratio must be a number >= 1"):
        SaecSpec(0.5, 1)
    with pytest.raises(ValueError, match="saec at must be"):
        SaecSpec(2, 0)


def test_the_recipe_clusters_the_model_tables_only_with_each_formats_field_bits(tmp_path):
    from cardinal.train import tables

    r = tiny_recipe(tmp_path, "compression.saec.ratio=20", "compression.saec.at=5")
    spec = tables.store_config(r).saec
    assert set(spec) == {"emb"} and spec["emb"] == SaecSpec(20.0, 5, 32)  # lr_emb, the baseline's, stays whole
    ml = load("movielens", ["compression.saec.ratio=20", "compression.saec.at=5", "embedding.shared=true",
                            "embedding.field_tables={}", "ps.memory.admission.tables={}"])  # one shared table
    assert tables.store_config(ml).saec["emb"].shift == 40


def run(tmp_path, name, *sets):
    r = tiny_recipe(tmp_path, "ps.shards=2", "train.epochs=2", "compression.saec.ratio=4", *sets)
    trainer = Trainer(r, tmp_path / name, progress=False)
    return trainer, trainer.fit()


@pytest.mark.slow
def test_a_run_clusters_mid_run_trains_on_and_evaluates(tmp_path):
    trainer, summary = run(tmp_path, "a", "compression.saec.at=12")
    assert summary["steps"] == 24 and np.isfinite(summary["eval_auc"]) and 0 < summary["eval_auc"] < 1
    stats = trainer.client.stats()
    assert all(isinstance(st.tables["emb"], SaecTable) for st in trainer.client.transport.stores)
    assert all(not isinstance(st.tables["lr_emb"], SaecTable) for st in trainer.client.transport.stores)
    clusters = sum(s["tables"]["emb"]["clusters"] for s in stats)
    assert 0 < clusters < sum(s["tables"]["emb"]["rows"] for s in stats) / 2
    last = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last.get("ps_emb_clusters") == clusters or summary.get("ps_emb_clusters") == clusters
    trainer.close()


def test_a_resume_cannot_change_the_clustering(tmp_path):
    from cardinal.train import resume

    r = tiny_recipe(tmp_path, "compression.saec.ratio=4", "compression.saec.at=5")
    (tmp_path / "recipe.json").write_text(json.dumps(r.to_dict()))
    for key in ("compression.saec.at=6", "compression.saec.ratio=8"):
        with pytest.raises(ValueError, match=f"--resume cannot change {key.split('=')[0]}"):
            resume.resumed_recipe(tmp_path, [key])
    assert resume.resumed_recipe(tmp_path, ["train.steps=30"]).compression.saec.at == 5


def test_over_grpc_the_clustered_tables_are_bitwise_the_embedded_ones(tmp_path):
    from cardinal.ps import connect
    from helpers.cluster import Cluster

    cfg = StoreConfig((TableConfig("emb", DIM),), OPT, saec={"emb": SaecSpec(5.0, 3, 32)})
    remote = Cluster(cfg, 2, tmp_path / "ps")
    try:
        local = connect(cfg, 2)
        ids = ids_of()
        later = np.array([(1 << 32) | 999_999, (3 << 32) | 5], np.int64)
        for client in (remote.client, local):
            rng = np.random.default_rng(2)
            for step in range(1, 6):
                some = np.concatenate([ids[: len(ids) // (1 + step % 3)], later if step > 3 else later[:0]])
                client.pull("emb", some, step=step).wait()
                client.push("emb", some, rng.normal(size=(len(some), DIM)).astype(np.float32), step=step).wait()
        assert all(isinstance(s.tables["emb"], SaecTable) for s in remote.stores)
        every = np.concatenate([ids, later, [(1 << 32) | 12345]])
        np.testing.assert_array_equal(remote.client.pull("emb", every, create=False).wait(),
                                      local.pull("emb", every, create=False).wait())
        assert remote.client.digest("emb") == local.digest("emb")
    finally:
        remote.stop()

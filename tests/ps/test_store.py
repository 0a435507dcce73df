"""Tables and shard stores: creation, metadata, validation that changes nothing, shard-count independence."""

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer
from cardinal.ps import ShardStore, StoreConfig, connect
from cardinal.sharding.routing import route
from helpers.ids import ID_KINDS, adversarial_ids

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adam", "lr": 0.01})


def train(client, rng, steps=5, n=300, id_range=2000):
    for step in range(1, steps + 1):
        for table, dim in (("user", 8), ("item", 4)):
            ids = rng.integers(-id_range, id_range, n).astype(np.int64)
            client.pull(table, ids, step=step).wait()
            client.push(table, ids, rng.standard_normal((n, dim)).astype(np.float32), step=step).wait()


@pytest.mark.parametrize("kind", ID_KINDS)
def test_rows_depend_only_on_seed_and_id(kind, rng):
    ids = adversarial_ids(kind, 500, rng)
    a = EmbeddingTable(TableConfig("t", 6, seed=9), make_optimizer({"name": "sgd"}))
    b = EmbeddingTable(TableConfig("t", 6, seed=9), make_optimizer({"name": "sgd"}))
    rows_a = a.pull(ids)
    rows_b = b.pull(ids[::-1].copy())[::-1]  # other arrival order
    np.testing.assert_array_equal(rows_a, rows_b)
    sharded = connect(StoreConfig((TableConfig("t", 6, seed=9),), {"name": "sgd"}), 3).pull("t", ids).wait()
    np.testing.assert_array_equal(rows_a, sharded)
    a.check()


def test_lookup_only_pull_never_inserts_and_gives_zeros():
    table = EmbeddingTable(TableConfig("t", 4), make_optimizer({"name": "sgd"}))
    table.pull(np.array([1, 2], np.int64), step=1)
    digest = table.digest()
    rows = table.pull(np.array([2, 3], np.int64), create=False, step=5)
    assert len(table) == 2 and table.digest() == digest
    assert (rows[1] == 0).all() and (rows[0] != 0).any()


def test_metadata_counts_sightings_and_last_step():
    table = EmbeddingTable(TableConfig("t", 2), make_optimizer({"name": "sgd"}))
    table.pull(np.array([7, 7, 8], np.int64), step=3)
    table.push(np.array([8], np.int64), np.ones((1, 2), np.float32), step=9)
    meta = table.export()
    by_id = dict(zip(meta["ids"].tolist(), zip(meta["count"].tolist(), meta["last_step"].tolist())))
    assert by_id == {7: (2, 3), 8: (1, 9)}


@pytest.mark.parametrize("concurrent, lanes", [(False, None), (True, 1), (True, 3), (True, 4)])
def test_tables_are_bitwise_equal_for_one_and_four_shards(rng, concurrent, lanes):
    one, four = connect(CONFIG, 1), connect(CONFIG, 4, concurrent=concurrent, lanes=lanes)
    train(one, np.random.default_rng(5))
    train(four, np.random.default_rng(5))
    for table in ("user", "item"):
        assert one.digest(table) == four.digest(table)
    for store in four.transport.stores:
        store.check()


def test_digest_sees_every_part_of_a_row():
    table = EmbeddingTable(TableConfig("t", 2), make_optimizer({"name": "adam"}))
    table.pull(np.array([1, 2], np.int64), step=1)
    seen = {table.digest()}
    table.pull(np.array([1], np.int64), step=1)  # metadata only: count
    seen.add(table.digest())
    table.pull(np.array([1], np.int64), step=2)  # metadata only: last step
    seen.add(table.digest())
    table.push(np.array([2], np.int64), np.ones((1, 2), np.float32), step=2)  # values and state
    seen.add(table.digest())
    assert len(seen) == 4


def _bad_requests(store):
    good_ids = np.array([1, 2, 3], np.int64)
    g = np.ones((3, 8), np.float32)
    nan = g.copy()
    nan[1, 3] = np.nan
    inf = g.copy()
    inf[2, 0] = np.inf
    return {
        "unknown table": (lambda: store.push("nope", good_ids, g), "unknown table 'nope'"),
        "wrong dim": (lambda: store.push("user", good_ids, np.ones((3, 5), np.float32)), r"\(3, 8\)"),
        "length mismatch": (lambda: store.push("user", good_ids, np.ones((2, 8), np.float32)), "len\\(ids\\)"),
        "nan gradient": (lambda: store.push("user", good_ids, nan), "NaN or Inf.*row 1"),
        "inf gradient": (lambda: store.push("user", good_ids, inf), "NaN or Inf.*row 2"),
        "int32 ids": (lambda: store.push("user", good_ids.astype(np.int32), g), "int64"),
        "float64 grads": (lambda: store.push("user", good_ids, g.astype(np.float64)), "float32"),
        "list ids": (lambda: store.pull("user", [1, 2, 3]), "numpy int64 array"),
        "2-d ids": (lambda: store.pull("user", good_ids.reshape(3, 1)), "one-dimensional"),
        "negative step": (lambda: store.pull("user", good_ids, step=-1), "step"),
        "unknown push kind": (lambda: store.push("user", good_ids, g, kind="sum"), "kind"),
    }


@pytest.mark.parametrize("case", list(_bad_requests(None)))
def test_bad_requests_are_named_and_change_nothing(case, rng):
    store = ShardStore(CONFIG)
    store.pull("user", rng.integers(0, 100, 50).astype(np.int64), step=1)
    before = {t: store.tables[t].digest() for t in store.tables}
    call, message = _bad_requests(store)[case]
    with pytest.raises(ValueError, match=message):
        call()
    assert {t: store.tables[t].digest() for t in store.tables} == before
    store.check()


def test_a_shard_refuses_ids_of_another_shard():
    store = ShardStore(CONFIG, shard=0, n_shards=2)
    ids = np.arange(20, dtype=np.int64)
    foreign = ids[route(ids, 2) == 1]
    with pytest.raises(ValueError, match="belongs to another shard"):
        store.pull("user", foreign)
    assert len(store.tables["user"]) == 0


def test_a_push_with_one_bad_row_reaches_no_shard(rng):
    client = connect(CONFIG, 4)
    ids = np.arange(40, dtype=np.int64)
    client.pull("user", ids, step=1).wait()
    before = client.digest("user")
    grads = np.ones((40, 8), np.float32)
    grads[-1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        client.push("user", ids, grads, step=2).wait()
    assert client.digest("user") == before


def test_stats_and_health():
    client = connect(CONFIG, 2)
    client.pull("user", np.arange(100, dtype=np.int64), step=1).wait()
    stats = client.stats()
    assert sum(s["tables"]["user"]["rows"] for s in stats) == 100
    health = client.health()
    assert [h["shard"] for h in health] == [0, 1] and all(h["status"] == "serving" for h in health)
    assert health[0]["incarnation"] != health[1]["incarnation"]


def test_a_delta_push_adds_to_the_values_and_leaves_optimizer_state_alone():
    store = ShardStore(CONFIG)
    ids = np.array([4, 4, 9], np.int64)
    before = store.pull("user", ids, create=True)
    state_before = store.tables["user"].export()["data"][:, 8:].copy()
    delta = np.arange(24, dtype=np.float32).reshape(3, 8)
    store.push("user", ids, delta, kind="delta")
    after = store.pull("user", ids, create=False)
    np.testing.assert_allclose(after[2], before[2] + delta[2])
    np.testing.assert_allclose(after[0], before[0] + delta[0] + delta[1])  # duplicates summed
    np.testing.assert_array_equal(store.tables["user"].export()["data"][:, 8:], state_before)

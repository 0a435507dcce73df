"""Deleting rows: the index forgets them, the live rows stay dense and keep their values, and
a row created afterwards starts as it would in a fresh table."""

import numpy as np
import pytest
from helpers.ids import ID_KINDS, adversarial_ids
from hypothesis import given
from hypothesis import strategies as st

from cardinal import parallel
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.key_counts import KeyCounts
from cardinal.optim import make_optimizer


def table(dim=4, optimizer="adagrad"):
    return EmbeddingTable(TableConfig("t", dim, init_scale=0.5, seed=3), make_optimizer({"name": optimizer}))


def rows_of(t: EmbeddingTable) -> dict[int, tuple]:
    """id -> (values and state, count, last step), read back through export."""
    e = t.export()
    return {int(i): (d.tobytes(), int(c), int(s)) for i, d, c, s in zip(e["ids"], e["data"], e["count"], e["last_step"])}


@pytest.mark.parametrize("kind", ID_KINDS)
def test_deleted_ids_are_gone_and_the_rest_read_back_unchanged(kind):
    rng = np.random.default_rng(0)
    ids = np.unique(adversarial_ids(kind, 20_000, rng))
    t = table()
    t.pull(ids, step=1)
    t.push(ids, rng.normal(size=(len(ids), 4)).astype(np.float32), step=2)
    before = rows_of(t)
    dead = ids[rng.random(len(ids)) < 0.4]
    assert t.delete(dead) == len(dead)
    t.check()
    assert len(t) == len(ids) - len(dead)
    assert not t.has(dead).any()
    alive = np.setdiff1d(ids, dead)
    assert t.has(alive).all()
    assert rows_of(t) == {i: before[i] for i in alive.tolist()}
    assert np.array_equal(t.pull(alive, create=False), np.stack([np.frombuffer(before[i][0], np.float32)[:4]
                                                                for i in alive.tolist()]) if len(alive) else
                          np.empty((0, 4), np.float32))
    assert t.delete(dead) == 0  # gone already: nothing to delete


def test_a_row_created_after_deletions_starts_as_in_a_fresh_table():
    rng = np.random.default_rng(1)
    old = rng.integers(-2**63, 2**63 - 1, 5000, dtype=np.int64)
    t = table()
    t.pull(old, step=1)
    t.push(old, rng.normal(size=(len(old), 4)).astype(np.float32), step=1)  # optimizer state, counts, steps set
    t.delete(old[37:])  # the new size falls inside a page: the rows past it are zeroed, not released
    new = rng.integers(-2**63, 2**63 - 1, 3000, dtype=np.int64)
    t.pull(new, step=5)
    fresh = table()
    fresh.pull(new, step=5)
    got = rows_of(t)
    assert {i: got[i] for i in new.tolist()} == rows_of(fresh)


@given(st.lists(st.tuples(st.sampled_from(["add", "delete"]), st.lists(st.integers(-50, 50), max_size=40)),
                max_size=25))
def test_any_sequence_of_inserts_and_deletes_agrees_with_a_dict(ops):
    t = table(dim=2, optimizer="sgd")
    live: set[int] = set()
    for op, keys in ops:
        ids = np.array(keys, np.int64)
        if op == "add":
            t.pull(ids, step=1)
            live |= set(keys)
        else:
            assert t.delete(np.unique(ids)) == len(live & set(keys))
            live -= set(keys)
        t.check()
        assert len(t) == len(live)
        probe = np.arange(-50, 51, dtype=np.int64)
        assert t.has(probe).tolist() == [int(i) in live for i in probe]


def test_deletion_does_not_depend_on_the_thread_count():
    rng = np.random.default_rng(2)
    ids = rng.integers(-2**63, 2**63 - 1, 200_000, dtype=np.int64)
    dead = ids[::3]
    results = []
    try:
        for threads in (1, 2, 4):
            parallel.set_threads(threads)
            t = table()
            t.pull(ids, step=1)
            t.delete(dead)
            t.check()
            e = t.export()
            results.append((e["ids"].tobytes(), e["data"].tobytes(), t.digest()))
    finally:
        parallel.set_threads(parallel.available_cores())
    assert results[0] == results[1] == results[2]  # the same rows in the same places


def test_deleting_rows_returns_their_memory():
    t = table(dim=64)
    ids = np.arange(400_000, dtype=np.int64)
    t.pull(ids, step=1)
    full = t.storage.nbytes
    t.delete(ids[1000:])
    assert t.storage.nbytes == full * 1000 // 400_000
    t.check()


def test_key_counts_set_get_remove():
    k = KeyCounts()
    k.set(np.array([5, -7, 9], np.int64), np.array([1, 2, 3], np.uint32))
    k.set(np.array([9, 11], np.int64), np.array([4, 5], np.uint32))
    k.remove(np.array([-7, 100], np.int64))
    k.check()
    assert k.get(np.array([5, -7, 9, 11, 100], np.int64)).tolist() == [1, 0, 4, 5, 0]
    ids, counts = k.items()
    assert dict(zip(ids.tolist(), counts.tolist())) == {5: 1, 9: 4, 11: 5}


def test_a_push_of_new_ids_past_the_arenas_capacity_grows_them():
    t = table()  # room for 1024 rows
    t.pull(np.arange(1000, dtype=np.int64), step=1)
    ids = np.arange(500, 5000, dtype=np.int64)  # 4,000 new: the arenas grow inside the push
    t.push(ids, np.ones((len(ids), 4), np.float32), step=2)
    assert len(t) == 5000
    t.check()

"""Lazy L2 on the servers (optim/l2.py): against the numpy reference, only on touched rows, under
the non-finite guard and exactly-once pushes, and the compiled variant without it when off."""

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.reference import init_row
from cardinal.embedding.table import NonFiniteUpdate
from cardinal.optim import make_optimizer
from cardinal.optim.l2 import variants
from cardinal.optim.reference import initial_state, update_row
from cardinal.ps import ShardStore, StoreConfig
from cardinal.recipe import load

WITH_L2 = ("sgd", "adagrad", "rowwise_adagrad", "adam")
DIM = 4


def table_with(name: str, l2: float, lr: float = 0.1) -> EmbeddingTable:
    return EmbeddingTable(TableConfig("t", DIM, init_scale=0.5, seed=3), make_optimizer({"name": name, "lr": lr, "l2": l2}))


@pytest.mark.parametrize("name", WITH_L2)
def test_l2_matches_reference_and_changes_rows(name, rng):
    """Rows pushed with l2 = 0.5 follow the reference (g += l2 * w, then the update) and differ from l2 = 0."""
    ids = np.array([5, -2, 5, 9], np.int64)
    pushes = [rng.standard_normal((4, DIM)).astype(np.float32) for _ in range(4)]
    table, plain = table_with(name, 0.5), table_with(name, 0.0)
    for step, g in enumerate(pushes, 1):
        table.push(ids, g, step=step)
        plain.push(ids, g, step=step)
    cfg = table.optimizer.config
    ref = {k: np.concatenate([init_row(3, k, DIM, 0.5), initial_state(name, cfg, DIM)]) for k in (5, -2, 9)}
    for g in pushes:
        summed = {5: g[0] + g[2], -2: g[1].copy(), 9: g[3].copy()}
        for k, gk in summed.items():
            update_row(name, cfg, ref[k], gk, DIM)
    got = table.export()
    for k, row in zip(got["ids"].tolist(), got["data"]):
        np.testing.assert_allclose(row, ref[k], rtol=2e-5, atol=1e-5)  # adam: its constants in float64 here
    unique = np.array([5, -2, 9], np.int64)
    assert not np.allclose(table.pull(unique, create=False), plain.pull(unique, create=False), rtol=1e-3)


def test_sgd_l2_is_bitwise_the_reference(rng):
    """SGD's kernel and reference do the same float32 operations in the same order: equal bits."""
    ids = np.arange(-6, 6, dtype=np.int64)
    table = table_with("sgd", 0.3)
    ref = {k: init_row(3, k, DIM, 0.5) for k in ids.tolist()}
    for step in range(1, 6):
        g = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        table.push(ids, g, step=step)
        for k, gk in zip(ids.tolist(), g):
            update_row("sgd", table.optimizer.config, ref[k], gk, DIM)
    assert table.pull(ids, create=False).tobytes() == np.stack([ref[k] for k in ids.tolist()]).tobytes()


@pytest.mark.parametrize("name", WITH_L2)
def test_l2_touches_only_pushed_rows_once_per_push(name):
    """A row absent from pushes keeps its bits (no decay for steps it was not seen); a row pushed
    with zero gradients shrinks, once per push, as the reference says."""
    table = table_with(name, 0.5)
    table.push(np.array([1, 2], np.int64), np.ones((2, DIM), np.float32), step=1)
    before = table.export()
    row1, row2 = (before["data"][before["ids"] == k][0].copy() for k in (1, 2))
    zero = np.zeros((1, DIM), np.float32)
    for step in range(2, 6):
        table.push(np.array([1, 1], np.int64), np.zeros((2, DIM), np.float32), step=step)  # duplicates: one push
        update_row(name, table.optimizer.config, row1, zero[0], DIM)
    after = table.export()
    assert after["data"][after["ids"] == 2][0].tobytes() == row2.tobytes()
    np.testing.assert_allclose(after["data"][after["ids"] == 1][0], row1, rtol=2e-5, atol=1e-5)
    assert not np.allclose(row1, before["data"][before["ids"] == 1][0], rtol=1e-3)  # the reference moved it


def test_l2_off_runs_the_variant_compiled_without_it():
    built = []

    def factory(with_l2):
        built.append(with_l2)
        return f"kernel with_l2={with_l2}"
    pick = variants(factory)
    assert built == [False, True]
    assert pick(0.0) == "kernel with_l2=False" and pick(1e-9) == "kernel with_l2=True"


def test_l2_push_that_would_overflow_is_refused_and_changes_nothing():
    """The non-finite guard covers the L2 term: l2 * w overflowing float32 is refused whole."""
    store = ShardStore(StoreConfig((TableConfig("t", DIM, init_scale=0.5, seed=3),),
                                   {"name": "sgd", "lr": 10.0, "l2": 1e38}))
    ids = np.arange(8, dtype=np.int64)
    store.pull("t", ids, step=1)
    digest, rows = store.tables["t"].digest(), store.pull("t", ids, create=False)
    with pytest.raises(NonFiniteUpdate):
        store.push("t", ids, np.zeros((8, DIM), np.float32), step=1)
    assert store.tables["t"].digest() == digest
    assert store.pull("t", ids, create=False).tobytes() == rows.tobytes()
    store.check()


def test_l2_push_resent_is_applied_once():
    store = ShardStore(StoreConfig((TableConfig("t", DIM, init_scale=0.5, seed=3),), {"name": "sgd", "l2": 0.5}))
    once = ShardStore(StoreConfig((TableConfig("t", DIM, init_scale=0.5, seed=3),), {"name": "sgd", "l2": 0.5}))
    ids, g = np.arange(6, dtype=np.int64), np.zeros((6, DIM), np.float32)
    for _ in range(3):
        store.push("t", ids, g, step=1, request_id="c1-7")
    once.push("t", ids, g, step=1, request_id="c1-7")
    assert store.pull("t", ids, create=False).tobytes() == once.pull("t", ids, create=False).tobytes()
    assert store.tables["t"].digest() == once.tables["t"].digest()


def test_recipe_takes_l2_and_names_weight_decay():
    recipe = load(None, ["sparse_optimizer.name=\"adam\"", "sparse_optimizer.l2=1e-6"])
    assert make_optimizer(recipe.sparse_optimizer).config.l2 == 1e-6
    with pytest.raises(ValueError, match="call weight decay 'l2'"):
        load(None, ["sparse_optimizer.weight_decay=1e-6"])
    with pytest.raises(ValueError, match="l2 must be >= 0"):
        load(None, ["sparse_optimizer.l2=-1.0"])

"""The chunked format's push updates the chunk pool in place (``chunk_kernels.update_in_place``): bit
for bit what decoding the rows into a copy, updating it and storing it back gives (the path it
replaced), for every optimizer, counted or not, on rows holding fewer chunks, over several tiles;
and a refused block finds the same first row and leaves the same backup (the table restores
every row from it, so the rows after the refused tile are neither observed nor updated)."""

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.formats import chunk_kernels as K
from cardinal.optim import OPTIMIZERS, make_optimizer

DIM, N = 10, 3 * K.TILE + 5


def _table(name):
    table = EmbeddingTable(TableConfig("t", DIM, chunks=4, chunk_tail=2, chunk_target=0.4),
                           make_optimizer({"name": name, "l2": 0.01} if name != "ftrl" else {"name": name}))
    ids = np.arange(N, dtype=np.int64)
    rng = np.random.default_rng(1)
    table.pull(ids, step=1)
    table.push(ids, (rng.normal(size=(N, DIM)) * rng.random((N, 1)) ** 3).astype(np.float32), step=1)
    table.adjust_dims()  # rows keep 1 to 4 chunks
    return table, table.index.find(table.storage.columns().ids, ids[rng.permutation(N)])


def _gather_update_scatter(f, words, pool, rows, grads, update, backup):
    """The path before: the block decoded, its backup made from the copy, observed, updated, checked, stored."""
    bits = words.view(np.int32)
    work = np.empty((len(rows), backup.shape[1] - 2 * f.C), np.float32)
    K.gather(words, bits, pool, rows, *f._args(), True, work)
    w = work.shape[1]
    backup[:, :w], backup[:, w:w + f.C], backup[:, w + f.C:] = work, words[rows, f.C:2 * f.C], bits[rows, :f.C] != 0
    K.observe(words, bits, rows, grads, f.C, f.s)
    update(work, np.arange(len(rows), dtype=np.int64), grads, slice(None))
    bad = K.first_nonfinite_held(work, bits, rows, *f._args())
    if bad < 0:
        K.scatter(work, words, bits, pool, rows, *f._args())
    return bad


@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_in_place_push_is_the_gather_update_scatter_path_bit_for_bit(name, counted):
    table, rows = _table(name)
    f, data = table.format, table.storage.columns().data
    held = (data.view(np.int32)[rows, :f.C] != 0).sum(axis=1)
    assert held.min() < f.C and held.max() > 1, "rows hold different numbers of chunks"
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 4, N).astype(np.int32) if counted else None
    update = table.optimizer.update(DIM, counts)
    for trial in range(3):
        grads = rng.normal(size=(N, DIM)).astype(np.float32)
        if trial == 2:
            grads[2 * K.TILE + 3] = 1e30  # its state overflows: the block is refused, in the third tile
        words, pool = data.copy(), f.pool.arena.array.copy()
        want_grads, want_backup = grads.copy(), np.empty((N, table.portable_width), np.float32)
        want = _gather_update_scatter(f, words, pool, rows, want_grads, update, want_backup)
        backup = np.empty_like(want_backup)
        got = f.push_block(data, rows, grads, update, slice(None), backup, DIM, None, 2)
        assert got == want == (2 * K.TILE + 3 if trial == 2 and name != "sgd" else -1)  # SGD: no state to overflow
        assert np.array_equal(backup.view(np.int32), want_backup.view(np.int32))
        seen = N if got < 0 else (got // K.TILE + 1) * K.TILE  # refused: the rows after its tile are not observed
        assert np.array_equal(grads[:seen].view(np.int32), want_grads[:seen].view(np.int32))
        if got < 0:
            assert np.array_equal(data.view(np.int32), words.view(np.int32))
            assert np.array_equal(f.pool.arena.array.view(np.int32), pool.view(np.int32))
    assert np.isfinite(want_backup).all()


def test_a_refused_in_place_push_restores_every_row():
    table, rows = _table("rowwise_adagrad")
    ids = table.storage.columns().ids[rows]
    before = table.pull(ids, create=False)
    grads = np.ones((N, DIM), np.float32)
    grads[-1] = 1e30
    with pytest.raises(Exception, match="NaN or Inf"):
        table.push(ids, grads, step=2)
    assert np.array_equal(table.pull(ids, create=False), before)
    assert table.check() is None

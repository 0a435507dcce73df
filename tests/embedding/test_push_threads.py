"""A push's update on the kernel threads: each takes a range of the rows, and the split never
shows. The same bits for any thread count; a refused push restores every range and names the
first bad id in order, whichever thread met it."""

import numpy as np
import pytest

from cardinal import parallel
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.table import NonFiniteUpdate
from cardinal.optim import make_optimizer

N = 3 * parallel.MIN_PER_THREAD + 500  # three ranges at three threads


@pytest.fixture(autouse=True)
def thread_budget():
    before = parallel.threads()
    yield
    parallel.set_threads(before)


def pushed(threads: int, grads: np.ndarray, counts=None) -> EmbeddingTable:
    parallel.set_threads(threads)
    table = EmbeddingTable(TableConfig("t", 4), make_optimizer({"name": "adam"}))
    ids = np.arange(N, dtype=np.int64) * 7919
    table.pull(ids, step=1)
    table.push(ids, grads, step=2, counts=counts)
    return table


@pytest.mark.parametrize("counted", [False, True])
def test_a_push_gives_the_same_bits_for_any_thread_count(counted):
    rng = np.random.default_rng(3)
    grads = rng.normal(size=(N, 4)).astype(np.float32)
    counts = rng.integers(1, 4, N).astype(np.int32) if counted else None
    want = pushed(1, grads, counts).digest_parts()
    for threads in (2, 3):
        assert pushed(threads, grads, counts).digest_parts() == want, threads


@pytest.mark.parametrize("bad_at", [[N - 1], [2 * N // 3 + 9, N // 3 + 5], [N // 3 + 5, 7]])
def test_a_refused_push_restores_every_range_and_names_the_first_bad_id(bad_at):
    parallel.set_threads(3)
    table = EmbeddingTable(TableConfig("t", 4), make_optimizer({"name": "adam"}))
    ids = np.arange(N, dtype=np.int64) * 7919
    table.pull(ids, step=1)
    before = table.digest_parts()
    grads = np.full((N, 4), 0.1, np.float32)
    grads[bad_at, 1] = np.inf
    with pytest.raises(NonFiniteUpdate, match=f"id {ids[min(bad_at)]} "):
        table.push(ids, grads, step=2)
    assert table.digest_parts() == before
    table.check()

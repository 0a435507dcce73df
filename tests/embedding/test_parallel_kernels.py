"""The worker's kernels on the kernel threads give the same bits for any thread count.

Dedup and pooling split work over ``cardinal/parallel.py``'s threads; the split must never
show in the result: every thread count gives what one thread gives, and one thread gives
today's order (a numpy reference that adds in increasing position). The size cut-offs
(``PARALLEL_MIN``) are lowered so that small hypothesis inputs take the threaded paths.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardinal import parallel
from cardinal.embedding import dedup, reference
from cardinal.worker.pooling import compiled

THREADS = (1, 2, 3, 8)


@pytest.fixture(autouse=True)
def split_everything(monkeypatch):
    """Threaded paths from the smallest input; the thread budget restored afterwards."""
    before = parallel.threads()
    monkeypatch.setattr(dedup, "PARALLEL_MIN", 1)
    monkeypatch.setattr(dedup, "MIN_THREADS", 2)
    monkeypatch.setattr(compiled, "PARALLEL_MIN", 1)
    yield
    parallel.set_threads(before)


def dedup_with(threads: int, ids: np.ndarray):
    parallel.set_threads(threads)
    return dedup.unique_inverse(ids)


ids_lists = st.one_of(
    st.lists(st.integers(-2**63, 2**63 - 1), max_size=300),
    st.lists(st.integers(-5, 5), max_size=300),                       # many duplicates
    st.integers(0, 300).map(lambda n: [42] * n),                       # all one id
).map(lambda xs: np.array(xs, np.int64))


@given(ids=ids_lists)
def test_dedup_is_the_same_for_any_thread_count(ids):
    want_unique, want_inverse = reference.unique_inverse(ids)
    for threads in THREADS:
        unique, inverse = dedup_with(threads, ids)
        assert unique.tobytes() == np.asarray(want_unique, np.int64).tobytes(), threads
        assert inverse.tobytes() == np.asarray(want_inverse, np.int64).tobytes(), threads


def test_dedup_of_a_criteo_batch_at_the_real_cut_off(monkeypatch, rng):
    monkeypatch.undo()  # the module's own cut-offs: a 4096 x 26 batch is split from 4 threads
    calls = []
    threaded = dedup._unique_inverse_parallel
    monkeypatch.setattr(dedup, "_unique_inverse_parallel", lambda *a: calls.append(a[-1]) or threaded(*a))
    ranks = rng.zipf(1.1, (26, 4096)) % 100_000
    ids = (ranks + (np.arange(1, 27)[:, None] << 32)).astype(np.int64).ravel()
    want = reference.unique_inverse(ids)
    for threads in THREADS:
        unique, inverse = dedup_with(threads, ids)
        assert bool(calls) == (threads >= dedup.MIN_THREADS), threads  # the threaded path ran, from 4 threads
        calls.clear()
        np.testing.assert_array_equal(unique, want[0])
        np.testing.assert_array_equal(inverse, want[1])


def reference_pool(rows, inverse, offsets, n_fields, mean, grad_out):
    """Today's order in numpy float32: bags in turn, uses in increasing position."""
    n_bags, dim = len(offsets) - 1, rows.shape[1]
    batch = n_bags // n_fields if n_fields else 0
    out = np.zeros((n_bags, dim), np.float32)
    grad_rows = np.zeros_like(rows)
    for b in range(n_bags):
        o = (b % batch) * n_fields + b // batch
        lo, hi = offsets[b], offsets[b + 1]
        scale = np.float32(1) / np.float32(hi - lo) if mean and hi > lo else np.float32(1)
        for k in range(lo, hi):
            out[o] += rows[inverse[k]]
            grad_rows[inverse[k]] += grad_out[o] * scale
        if mean and hi > lo:
            out[o] *= scale
    return out, grad_rows


@st.composite
def bags(draw):
    """(rows, inverse, offsets, n_fields, grad_out): empty bags, one bag, all uses of one row."""
    batch, n_fields = draw(st.integers(0, 12)), draw(st.integers(1, 4))
    n_rows = draw(st.integers(1, 20))
    sizes = draw(st.lists(st.integers(0, 6), min_size=batch * n_fields, max_size=batch * n_fields))
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    one_row = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    inverse = np.zeros(offsets[-1], np.int64) if one_row else rng.integers(0, n_rows, offsets[-1]).astype(np.int64)
    rows = rng.standard_normal((n_rows, 5)).astype(np.float32)
    grad_out = rng.standard_normal((batch * n_fields, 5)).astype(np.float32)
    if draw(st.booleans()):  # signed zeros: 0 + -0.0 is +0.0, which the kernels must give too
        rows[rng.random(rows.shape) < 0.5] = -0.0
        grad_out[rng.random(grad_out.shape) < 0.5] = -0.0
    return rows, inverse, offsets, n_fields, grad_out


@given(case=bags(), mean=st.booleans())
def test_pooling_is_the_same_for_any_thread_count_and_as_one_thread_today(case, mean):
    rows, inverse, offsets, n_fields, grad_out = case
    want_out, want_grad = reference_pool(rows, inverse, offsets, n_fields, mean, grad_out)
    for threads in THREADS:
        parallel.set_threads(threads)
        out = compiled.forward(rows, inverse, offsets, n_fields, mean)
        grad_rows = compiled.backward(grad_out, inverse, offsets, n_fields, mean, len(rows))
        assert out.tobytes() == want_out.tobytes(), threads
        assert grad_rows.tobytes() == want_grad.tobytes(), threads


def test_one_bag_holding_every_use_of_one_row():
    rows = np.arange(10, dtype=np.float32).reshape(2, 5)
    inverse, offsets = np.ones(50_000, np.int64), np.array([0, 50_000], np.int64)
    grad_out = np.full((1, 5), 0.1, np.float32)
    want_out, want_grad = reference_pool(rows, inverse, offsets, 1, True, grad_out)
    for threads in THREADS:
        parallel.set_threads(threads)
        assert compiled.forward(rows, inverse, offsets, 1, True).tobytes() == want_out.tobytes()
        assert compiled.backward(grad_out, inverse, offsets, 1, True, 2).tobytes() == want_grad.tobytes()

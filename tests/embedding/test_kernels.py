"""Compiled kernels against the slow references, on adversarial ids."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cardinal.embedding import dedup, reference
from cardinal.embedding.arena import Arena
from cardinal.embedding.hashing import init_rows
from cardinal.embedding.index import IdIndex
from cardinal.sharding.routing import route, split
from helpers.ids import ID_KINDS, INT64_MAX, INT64_MIN, adversarial_ids

int64s = st.integers(INT64_MIN, INT64_MAX)
id_arrays = st.one_of(
    hnp.arrays(np.int64, st.integers(0, 300), elements=int64s),
    hnp.arrays(np.int64, st.integers(0, 300), elements=st.sampled_from([INT64_MIN, INT64_MAX, 0, -1, 1])),
    hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 20).map(lambda k: k << 40)),
)


class Indexed:
    """An IdIndex with its row -> id array, as a table drives it."""

    def __init__(self):
        self.index, self.ids, self.n = IdIndex(), Arena(np.int64, capacity=16), 0

    def find_or_insert(self, keys):
        self.ids.reserve(self.n + len(keys))
        rows, self.n = self.index.find_or_insert(self.ids.array, self.n, keys)
        return rows

    def find(self, keys):
        return self.index.find(self.ids.array, keys)


def reference_insert(state: dict, keys) -> np.ndarray:
    return np.array([state.setdefault(int(k), len(state)) for k in keys], np.int64)


@given(batches=st.lists(id_arrays, min_size=1, max_size=4), probes=id_arrays)
def test_index_matches_dict(batches, probes):
    idx, ref = Indexed(), {}
    for keys in batches:
        np.testing.assert_array_equal(idx.find_or_insert(keys), reference_insert(ref, keys))
    expected = np.array([ref.get(int(k), -1) for k in probes], np.int64)
    np.testing.assert_array_equal(idx.find(probes), expected)
    idx.index.check(idx.ids.array, idx.n)


@pytest.mark.parametrize("kind", ID_KINDS)
def test_index_grows_through_many_sub_table_growths(kind, rng):
    idx, ref = Indexed(), {}
    for _ in range(6):
        keys = adversarial_ids(kind, 40_000, rng)
        np.testing.assert_array_equal(idx.find_or_insert(keys), reference_insert(ref, keys))
    if kind in ("sequential", "low_bits", "random"):
        assert idx.index.grow_count > 0
    idx.index.check(idx.ids.array, idx.n)
    assert len(idx.index) == len(ref)


def test_find_never_inserts(rng):
    idx = Indexed()
    idx.find_or_insert(np.arange(10, dtype=np.int64))
    assert (idx.find(np.arange(10, 20, dtype=np.int64)) == -1).all()
    assert len(idx.index) == 10


@given(ids=id_arrays)
def test_unique_inverse_matches_reference(ids):
    unique, inverse = dedup.unique_inverse(ids)
    ref_unique, ref_inverse = reference.unique_inverse(ids)
    np.testing.assert_array_equal(unique, ref_unique)
    np.testing.assert_array_equal(inverse, ref_inverse)
    np.testing.assert_array_equal(unique[inverse], ids)


@given(ids=id_arrays, seed=st.integers(0, 2**31))
def test_segment_sum_matches_reference_bitwise(ids, seed):
    values = np.random.default_rng(seed).standard_normal((len(ids), 3)).astype(np.float32)
    unique, inverse = dedup.unique_inverse(ids)
    got = dedup.segment_sum(values, inverse, len(unique))
    np.testing.assert_array_equal(got, reference.segment_sum(values, inverse, len(unique)))


@given(ids=id_arrays, n_shards=st.integers(1, 9))
def test_routing_matches_reference_and_splits_stably(ids, n_shards):
    np.testing.assert_array_equal(route(ids, n_shards), [reference.fmix64_route(int(k), n_shards) for k in ids])
    order, offsets = split(ids, n_shards)
    assert sorted(order.tolist()) == list(range(len(ids)))
    for s in range(n_shards):
        part = order[offsets[s]:offsets[s + 1]]
        assert (np.diff(part) > 0).all()  # original order kept within a shard
        assert (route(ids[part], n_shards) == s).all()


def test_routing_balances_sequential_ids():
    counts = np.bincount(route(np.arange(400_000, dtype=np.int64), 8), minlength=8)
    assert counts.min() > 0.97 * counts.mean()


@given(ids=id_arrays, seed=st.integers(0, 2**40), dim=st.integers(1, 9), first=st.integers(0, 5))
def test_init_rows_matches_reference(ids, seed, dim, first):
    """A column piece from value ``first`` on holds those values of the whole row."""
    data = np.zeros((len(ids), dim + 2), np.float32)
    init_rows(ids, data, 0, len(ids), dim, np.int64(seed), np.float32(0.05), first)
    for r, key in enumerate(ids):
        np.testing.assert_array_equal(data[r, :dim], reference.init_row(seed, key, first + dim, 0.05)[first:])
    assert (data[:, dim:] == 0).all()  # optimizer state untouched


def test_kernels_are_deterministic(rng):
    ids = adversarial_ids("random", 5000, rng)
    ids = np.concatenate([ids, ids[:2000]])
    a, b = Indexed(), Indexed()
    np.testing.assert_array_equal(a.find_or_insert(ids), b.find_or_insert(ids))
    values = rng.standard_normal((len(ids), 4)).astype(np.float32)
    u, inv = dedup.unique_inverse(ids)
    assert dedup.segment_sum(values, inv, len(u)).tobytes() == dedup.segment_sum(values, inv, len(u)).tobytes()


def test_arena_grows_without_losing_contents_and_releases_pages():
    arena = Arena(np.float32, (3,), capacity=4)
    arena.array[:4] = np.arange(12, dtype=np.float32).reshape(4, 3)
    arena.reserve(100_000)
    assert arena.capacity >= 100_000
    np.testing.assert_array_equal(arena.array[:4].ravel(), np.arange(12))
    arena.array[:] = 1
    arena.release(0, arena.capacity)
    assert arena.array[arena.capacity // 2, 0] == 0  # whole released pages read as zero
    view = arena.array
    with pytest.raises(BufferError):  # a stale view blocks growth instead of dangling
        arena.reserve(10 * arena.capacity)
    assert arena.array is not None and arena.array[0, 0] == 0
    del view
    arena.reserve(10 * arena.capacity)

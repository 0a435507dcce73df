"""The staged probes of ``index_kernels.find`` and the fused find-and-copy of ``index_kernels.find_copy``,
against a dict; the prefetched inserts of ``index_kernels.insert_new`` against one key at a time.

Every key here shares one sub-table and one 7-bit tag, so nearly every probe walks past
other keys' matching tags (false hits the ids confirm must reject, the first candidate of a
run often the wrong one); other keys fall in other sub-tables. Threads take position ranges
[lo, hi), as ``parallel.over_rows`` splits work, ranges shorter than the probe pipeline too.
"""

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.index import IdIndex
from cardinal.embedding.index_kernels import N_SUB, RING, SUB_BITS, find_copy, insert_new
from cardinal.optim import make_optimizer

M = np.uint64(0xFFFFFFFFFFFFFFFF)


def index_hash(keys: np.ndarray) -> np.ndarray:
    """splitmix64 over an array (numpy wraps uint64 products, as the kernel does)."""
    z = keys.view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def same_tag_keys(n: int, sub: int, rng) -> np.ndarray:
    """n distinct keys whose index hash puts them all in sub-table ``sub`` with one tag."""
    found = []
    while sum(map(len, found)) < n:
        keys = rng.integers(-2**63, 2**63 - 1, 1 << 22, dtype=np.int64, endpoint=True)
        h = index_hash(keys)
        same = (h >> np.uint64(64 - SUB_BITS) == sub) & ((h >> np.uint64(50)) & np.uint64(0x7F) == 5)
        found.append(keys[same])
    return np.unique(np.concatenate(found))[:n]


def table_with(keys, dim=3) -> EmbeddingTable:
    table = EmbeddingTable(TableConfig("t", dim, init_scale=0.5), make_optimizer({"name": "sgd"}))
    table.pull(keys, step=1)
    return table


@pytest.fixture(scope="module")
def colliding():
    rng = np.random.default_rng(7)
    stored = same_tag_keys(300, 3, rng)
    others = rng.integers(-2**40, 2**40, 200)  # other sub-tables, so a thread range skips keys
    absent = same_tag_keys(360, 3, np.random.default_rng(8))
    absent = absent[~np.isin(absent, stored)][:60]
    return np.concatenate([stored, others]), absent


def test_find_confirms_candidates_past_false_tag_hits(colliding):
    stored, absent = colliding
    table = table_with(stored)
    ref = {int(k): r for r, k in enumerate(table.export()["ids"])}
    probes = np.random.default_rng(1).permutation(np.concatenate([stored, absent, stored[:5]]))
    assert len(probes) > 4 * RING
    expected = np.array([ref.get(int(k), -1) for k in probes], np.int64)
    np.testing.assert_array_equal(table.index.find(table.storage.columns().ids, probes), expected)


@pytest.mark.parametrize("split", [1, 2, 5])
def test_find_copy_in_position_ranges_matches_dict(colliding, split):
    stored, absent = colliding
    table = table_with(stored)
    export = table.export()
    ref = {int(k): r for r, k in enumerate(export["ids"])}
    probes = np.random.default_rng(2).permutation(np.concatenate([stored, absent]))
    cols, ix = table.storage.columns(), table.index
    rows = np.full(len(probes), -7, np.int64)
    out = np.full((len(probes), table.dim), np.nan, np.float32)
    for p in range(split):  # as parallel.over_rows hands ranges to threads
        lo, hi = len(probes) * p // split, len(probes) * (p + 1) // split
        find_copy(ix.tags.array, ix.slots.array, ix.sub_off, ix.sub_cap, cols.ids, probes, rows, lo, hi, cols.data,
                  out, table.dim)
    expected = np.array([ref.get(int(k), -1) for k in probes], np.int64)
    np.testing.assert_array_equal(rows, expected)
    want = np.where(expected[:, None] >= 0, export["data"][expected, :table.dim], 0).astype(np.float32)
    assert want.tobytes() == out.tobytes()
    np.testing.assert_array_equal(cols.count[:len(ref)], export["count"])  # a lookup changes nothing
    assert (cols.last_step[:len(ref)] == export["last_step"]).all()


def insert_one_at_a_time(tags, slots, sub_off, sub_cap, keys, rows) -> None:
    """Linear probing from the definition: each key, in order, takes the first empty slot from its home."""
    for key, row, h in zip(keys, rows, index_hash(keys)):
        h = int(h)
        sub, tag, cap = h >> (64 - SUB_BITS), ((h >> 50) & 0x7F) + 1, int(sub_cap[h >> (64 - SUB_BITS)])
        s = h & (cap - 1)
        while tags[sub_off[sub] + s]:
            s = (s + 1) & (cap - 1)
        tags[sub_off[sub] + s], slots[sub_off[sub] + s] = tag, row


@pytest.mark.parametrize("split", [1, 2, 5])
def test_insert_places_keys_as_one_at_a_time(colliding, split):
    """Keys hashed ahead and their homes prefetched still go in in order: the same slots, bit for bit."""
    stored, absent = colliding
    keys = np.random.default_rng(3).permutation(np.concatenate([stored, absent]))
    rows = np.arange(len(keys), dtype=np.int64)
    assert len(keys) > 4 * RING
    index = IdIndex()
    index.make_room(keys, keys)  # (ids is read only to rehash, and the index is empty)
    tags, slots = index.tags.array.copy(), index.slots.array.copy()
    insert_one_at_a_time(tags, slots, index.sub_off, index.sub_cap, keys, rows)
    for p in range(split):  # as parallel.over_slots hands sub-tables to threads
        insert_new(index.tags.array, index.slots.array, index.sub_off, index.sub_cap, index.sub_size, keys, rows,
                   N_SUB * p // split, N_SUB * (p + 1) // split)
    np.testing.assert_array_equal(index.tags.array, tags)
    np.testing.assert_array_equal(index.slots.array, slots)
    assert index.sub_size.sum() == len(keys)

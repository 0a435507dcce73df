"""Compiled kernels of the collisionless id -> row hash index (see ``index.py``).

Layout, for one table with P sub-tables (P = 4 here, 64 in the code):

    keys   h = index_hash(id)      sub-table p = top SUB_BITS of h, home slot = low bits of h
    tags   uint8 arena   [ ..sub0.. | ..sub1.. | ..sub2.. | ..sub3.. | (freed) | sub1' ]
    slots  int32 arena     same offsets: the row of the id whose tag sits there
    ids    int64 (rows,)   the id of each row; a probe confirms a tag hit against it

A tag is 7 bits of the hash plus one (0 marks an empty slot), so a probe walks a run of
bytes and only touches ``ids`` on a 1-in-128 false hit or the real one. Linear probing;
deletion shifts the entries after a removed one back (``remove``), so no tombstones build up.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash

SUB_BITS = 6
N_SUB = 1 << SUB_BITS


@nb.njit(inline="always")
def _split(h):
    sub = np.int64(h >> U64(64 - SUB_BITS))
    tag = np.uint8(((h >> U64(50)) & U64(0x7F)) + U64(1))
    return sub, tag


@nb.njit(nogil=True, cache=True)
def sub_counts(keys, counts):
    """counts[p] += number of keys that fall in sub-table p.

    keys,    # (n,) int64
    counts,  # (N_SUB,) int64
    """
    for i in range(keys.shape[0]):
        sub, _ = _split(index_hash(keys[i]))
        counts[sub] += 1


@nb.njit(inline="always")
def probe(tags, slots, ids, sub_off, sub_cap, key):
    """(row of key, or -1; sub-table of key)."""
    h = index_hash(key)
    sub, tag = _split(h)
    off = sub_off[sub]
    mask = U64(sub_cap[sub] - 1)
    s = h & mask
    while True:
        pos = off + np.int64(s)
        t = tags[pos]
        if t == 0:
            return -1, sub
        if t == tag:
            r = slots[pos]
            if ids[r] == key:
                return np.int64(r), sub
        s = (s + U64(1)) & mask


@nb.njit(nogil=True, cache=True)
def find(tags, slots, sub_off, sub_cap, ids, keys, out, lo, hi):
    """out[i] = row of keys[i], or -1 when absent, for the keys in sub-tables [lo, hi).

    tags, slots,       # (arena,) uint8, int32
    sub_off, sub_cap,  # (N_SUB,) int64: region start and (power-of-two) size
    ids,               # (rows,) int64
    keys, out,         # (n,) int64, (n,) int64: entries of other sub-tables are left alone

    A plain loop: the core's out-of-order window already overlaps a few keys' probes, and
    software prefetching of the home tag and slot a dozen keys ahead (or a deeper pipeline
    through the candidate's id) measured slower on the 2-core EPYC, by 1.5-3x on the
    benchmark's batches: the extra hash and bookkeeping per key cost more than they hid.
    """
    for i in range(keys.shape[0]):
        key = keys[i]
        if is_mine(index_hash(key), lo, hi):
            out[i], _ = probe(tags, slots, ids, sub_off, sub_cap, key)


@nb.njit(inline="always")
def is_mine(h, lo, hi):
    """Is the key of hash h in sub-tables [lo, hi) (this thread's share)?"""
    sub = np.int64(h >> U64(64 - SUB_BITS))
    return lo <= sub < hi


@nb.njit(nogil=True, cache=True)
def insert_new(tags, slots, sub_off, sub_cap, sub_size, keys, rows, lo, hi):
    """Insert keys[i] -> rows[i] for the keys in sub-tables [lo, hi).

    The keys must be absent and unique, and ``make_room`` must have run: no id is compared,
    each key just takes the first empty slot from its home.
    """
    for i in range(keys.shape[0]):
        h = index_hash(keys[i])
        sub, tag = _split(h)
        if not lo <= sub < hi:
            continue
        off = sub_off[sub]
        mask = U64(sub_cap[sub] - 1)
        s = h & mask
        while tags[off + np.int64(s)] != 0:
            s = (s + U64(1)) & mask
        tags[off + np.int64(s)] = tag
        slots[off + np.int64(s)] = rows[i]
        sub_size[sub] += 1


@nb.njit(inline="always")
def _slot_of(tags, slots, ids, off, mask, h, tag, key):
    """The slot (within its sub-table) of a key that must be present."""
    s = h & mask
    while True:
        pos = off + np.int64(s)
        assert tags[pos] != 0  # the key must be present
        if tags[pos] == tag and ids[slots[pos]] == key:
            return s
        s = (s + U64(1)) & mask


@nb.njit(nogil=True, cache=True)
def remove(tags, slots, sub_off, sub_cap, sub_size, ids, keys, lo, hi):
    """Remove keys[i] for the keys in sub-tables [lo, hi) (present and unique).

    Backward-shift deletion: after emptying a key's slot, each later entry of the probe run
    moves back into the hole when the hole lies on its way from its home slot, so every
    remaining key is still found by a probe that stops at the first empty slot.
    ids,   # (rows,) int64: read through the slots, so rows must not have moved yet
    keys,  # (n,) int64
    """
    for i in range(keys.shape[0]):
        h = index_hash(keys[i])
        sub, tag = _split(h)
        if not lo <= sub < hi:
            continue
        off, mask = sub_off[sub], U64(sub_cap[sub] - 1)
        hole = _slot_of(tags, slots, ids, off, mask, h, tag, keys[i])
        j = hole
        while True:
            j = (j + U64(1)) & mask
            pj = off + np.int64(j)
            if tags[pj] == 0:
                break
            home = index_hash(ids[slots[pj]]) & mask
            if ((j - home) & mask) >= ((j - hole) & mask):  # the hole is on j's path from its home
                tags[off + np.int64(hole)] = tags[pj]
                slots[off + np.int64(hole)] = slots[pj]
                hole = j
        tags[off + np.int64(hole)] = 0
        sub_size[sub] -= 1


@nb.njit(nogil=True, cache=True)
def relink(tags, slots, sub_off, sub_cap, ids, keys, rows, lo, hi):
    """Point present keys[i] at rows[i] instead, for the keys in sub-tables [lo, hi): a row moved.

    ids,         # (rows,) int64: read through the slots, so rows must not have moved yet
    keys, rows,  # (n,) int64
    """
    for i in range(keys.shape[0]):
        h = index_hash(keys[i])
        sub, tag = _split(h)
        if not lo <= sub < hi:
            continue
        off, mask = sub_off[sub], U64(sub_cap[sub] - 1)
        slots[off + np.int64(_slot_of(tags, slots, ids, off, mask, h, tag, keys[i]))] = rows[i]


@nb.njit(nogil=True, cache=True)
def rehash(tags, slots, old_off, old_cap, new_off, new_cap, ids):
    """Move one sub-table's entries from its old region into a fresh (zeroed) bigger one."""
    mask = U64(new_cap - 1)
    for k in range(old_off, old_off + old_cap):
        tag = tags[k]
        if tag == 0:
            continue
        r = slots[k]
        s = index_hash(ids[r]) & mask
        while tags[new_off + np.int64(s)] != 0:
            s = (s + U64(1)) & mask
        tags[new_off + np.int64(s)] = tag
        slots[new_off + np.int64(s)] = r


@nb.njit(nogil=True, cache=True)
def count_live(tags, sub_off, sub_cap, sub_size):
    """Occupied slots per sub-table, for ``check()``: sub_size[p] = count."""
    for p in range(sub_off.shape[0]):
        c = 0
        for k in range(sub_off[p], sub_off[p] + sub_cap[p]):
            if tags[k] != 0:
                c += 1
        sub_size[p] = c

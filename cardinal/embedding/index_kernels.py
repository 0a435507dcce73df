"""Compiled kernels of the collisionless id -> row hash index (see ``index.py``).

Layout, for one table with P sub-tables (P = 4 here, 64 in the code):

    keys   h = index_hash(id)      sub-table p = top SUB_BITS of h, home slot = low bits of h
    tags   uint8 arena   [ ..sub0.. | ..sub1.. | ..sub2.. | ..sub3.. | (freed) | sub1' ]
    slots  int32 arena     same offsets: the row of the id whose tag sits there
    ids    int64 (rows,)   the id of each row; a probe confirms a tag hit against it

A tag is 7 bits of the hash plus one (0 marks an empty slot), so a probe walks a run of
bytes and only touches ``ids`` on a 1-in-128 false hit or the real one. Linear probing,
no deletion (eviction rebuilds a sub-table).
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash
from cardinal.embedding.prefetch import prefetch

SUB_BITS = 6
N_SUB = 1 << SUB_BITS
AHEAD = 16  # keys between pipeline stages: enough misses in flight to fill a core's line buffers
RING = 64  # hashes kept between stages: > 2 * AHEAD, a power of two
NOT_MINE = np.int64(-2)  # a key of another thread's sub-tables


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

    A three-stage pipeline, so that many keys' cache misses are in flight at once instead of
    one key's chain (tag -> slot -> id) at a time: key i + 2 * AHEAD has its home tag and slot
    prefetched (``stage_home``); key i + AHEAD walks its tags and takes the first matching
    slot's row as a candidate, prefetching that row's id (``stage_candidate``); key i confirms
    the candidate against ``ids`` (``stage_confirm``).
    """
    n = keys.shape[0]
    hashes = np.empty(RING, np.uint64)
    for i in range(-2 * AHEAD, n):
        stage_home(tags, slots, sub_off, sub_cap, keys, hashes, i + 2 * AHEAD, n)
        b = i + AHEAD
        if 0 <= b < n:
            r = stage_candidate(tags, slots, sub_off, sub_cap, hashes, b, lo, hi)
            if r != NOT_MINE:
                out[b] = r
                if r >= 0:
                    prefetch(ids, r)
        if i >= 0 and is_mine(hashes[i % RING], lo, hi):
            out[i] = stage_confirm(tags, slots, ids, sub_off, sub_cap, keys[i], out[i])


@nb.njit(inline="always")
def is_mine(h, lo, hi):
    sub = np.int64(h >> U64(64 - SUB_BITS))
    return lo <= sub < hi


@nb.njit(inline="always")
def stage_home(tags, slots, sub_off, sub_cap, keys, hashes, a, n):
    """Hash keys[a] (kept in ``hashes``) and prefetch its home tag and slot."""
    if a < n:
        h = index_hash(keys[a])
        hashes[a % RING] = h
        sub = np.int64(h >> U64(64 - SUB_BITS))
        pos = sub_off[sub] + np.int64(h & U64(sub_cap[sub] - 1))
        prefetch(tags, pos)
        prefetch(slots, pos)


@nb.njit(inline="always")
def stage_candidate(tags, slots, sub_off, sub_cap, hashes, b, lo, hi):
    """The row of the first slot from key b's home whose tag matches, -1 at an empty slot
    (absent), or NOT_MINE for a key of another thread's sub-tables."""
    h = hashes[b % RING]
    sub, tag = _split(h)
    if not lo <= sub < hi:
        return NOT_MINE
    off = sub_off[sub]
    mask = U64(sub_cap[sub] - 1)
    s = h & mask
    while True:
        t = tags[off + np.int64(s)]
        if t == 0:
            return np.int64(-1)
        if t == tag:
            return np.int64(slots[off + np.int64(s)])
        s = (s + U64(1)) & mask


@nb.njit(inline="always")
def stage_confirm(tags, slots, ids, sub_off, sub_cap, key, r):
    """The candidate row r if it holds key; after a false tag hit (1 in 128 per slot walked)
    a full probe."""
    if r >= 0 and ids[r] != key:
        r, _ = probe(tags, slots, ids, sub_off, sub_cap, key)
    return r


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

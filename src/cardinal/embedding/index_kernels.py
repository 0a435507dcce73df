"""Compiled kernels of the collisionless id -> row hash index (see ``index.py``).

Layout, for one table with P sub-tables (P = 4 here, 64 in the code):

    keys   h = index_hash(id)      sub-table p = top SUB_BITS of h, home slot = low bits of h
    tags   uint8 arena   [ ..sub0.. | ..sub1.. | ..sub2.. | ..sub3.. | (freed) | sub1' ]
    slots  int32 arena     same offsets: the row of the id whose tag sits there
    ids    int64 (rows,)   the id of each row; a probe confirms a tag hit against it

A tag is 7 bits of the hash plus one (0 marks an empty slot), so a probe walks a run of
bytes and only touches ``ids`` on a 1-in-128 false hit or the real one. Linear probing;
deletion shifts the entries after a removed one back (``remove``), so no tombstones build up.
Lookups (``find_copy``) run as a pipeline over a batch's keys, so that many keys' misses
(tag, slot, id, row) are in flight at once: 2-3x over one probe at a time on a 2-core EPYC.
Inserts (``insert_new``) hash and prefetch AHEAD keys ahead in the same way, and a growing
sub-table's rehash prefetches the ids it reads REHASH_AHEAD slots ahead.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash
from cardinal.embedding.prefetch import prefetch, prefetch_at
from cardinal.embedding.row_kernels import copy_row

SUB_BITS = 6
N_SUB = 1 << SUB_BITS
AHEAD = 16  # keys between the stages of the probe pipeline (``find_copy``)
RING = 4 * AHEAD  # a power of two above 2 * AHEAD: the stages' state, by position
REHASH_AHEAD = 64  # slots between an id's prefetch and its use when a sub-table grows


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
def find_copy(tags, slots, sub_off, sub_cap, ids, keys, rows, lo, hi, data, out, dim):
    """rows[i] = row of keys[i], or -1 when absent, for positions [lo, hi); with dim > 0 also
    out[i] = data[rows[i], :dim], zeros for an absent key (a pull's fast path, one pass).

    tags, slots,       # (arena,) uint8, int32
    sub_off, sub_cap,  # (N_SUB,) int64: region start and (power-of-two) size
    ids,               # (rows,) int64
    keys, rows,        # (n,) int64, (n,) int64: positions outside [lo, hi) are left alone
    data, out,         # (R, >= dim) and (n, >= dim) float32; (1, 0) and (0, 0) arrays when dim == 0

    A pipeline of three stages, AHEAD keys apart, so the misses of about 2 * AHEAD keys are in
    flight at once rather than one key's chain (tag, slot, id, row) at a time. At iteration i:
    stage one hashes key i + 2 * AHEAD (the hash kept: no key is hashed twice) and prefetches
    its home tag and slot; stage two walks the run of key i + AHEAD (its lines now arrived) to
    the first slot whose tag matches and prefetches that candidate's id and row (nearly always
    its row); stage three confirms key i against its candidate's id (a full probe after a false
    tag hit, 1 in 128 per slot passed) and copies its row. Threads take position ranges: each
    writes only its own rows[i] and out[i], so no line is shared.
    """
    hs = np.empty(RING, np.uint64)
    cand = np.empty(RING, np.int64)
    for i in range(lo - 2 * AHEAD, hi):
        a = i + 2 * AHEAD
        if a < hi:
            h = index_hash(keys[a])
            hs[a & (RING - 1)] = h
            sub = np.int64(h >> U64(64 - SUB_BITS))
            pos = sub_off[sub] + np.int64(h & U64(sub_cap[sub] - 1))
            prefetch(tags, pos)
            prefetch(slots, pos)
        m = i + AHEAD
        if m >= lo and m < hi:
            h = hs[m & (RING - 1)]
            sub, tag = _split(h)
            off = sub_off[sub]
            mask = U64(sub_cap[sub] - 1)
            s = h & mask
            c = np.int64(-1)
            while True:
                pos = off + np.int64(s)
                t = tags[pos]
                if t == 0:
                    break
                if t == tag:
                    c = np.int64(slots[pos])
                    prefetch(ids, c)
                    for j in range(0, dim, 16):  # the row's values (not its state): lines of 16 floats
                        prefetch_at(data, c, j)
                    if dim:
                        prefetch_at(data, c, dim - 1)
                    break
                s = (s + U64(1)) & mask
            cand[m & (RING - 1)] = c
        if i < lo:
            continue
        key = keys[i]
        r = cand[i & (RING - 1)]
        if r >= 0 and ids[r] != key:
            r = probe(tags, slots, ids, sub_off, sub_cap, key)[0]
        rows[i] = r
        copy_row(data, r, out, i, dim)


NO_DATA = np.empty((1, 0), np.float32)  # find_copy's data and out when only rows are wanted
NO_OUT = np.empty((0, 0), np.float32)


def find(tags, slots, sub_off, sub_cap, ids, keys, out, lo, hi):
    """out[i] = row of keys[i], or -1 when absent, for positions [lo, hi) (``find_copy``)."""
    find_copy(tags, slots, sub_off, sub_cap, ids, keys, out, lo, hi, NO_DATA, NO_OUT, 0)


@nb.njit(nogil=True, cache=True)
def insert_new(tags, slots, sub_off, sub_cap, sub_size, keys, rows, lo, hi):
    """Insert keys[i] -> rows[i] for the keys in sub-tables [lo, hi).

    The keys must be absent and unique, and ``make_room`` must have run: no id is compared,
    each key just takes the first empty slot from its home. Each key is hashed AHEAD keys
    before its insert and its home tag and slot prefetched, so the misses of AHEAD keys are
    in flight rather than one key's at a time; keys go in in the same order as without it.
    """
    n = keys.shape[0]
    hs = np.empty(RING, np.uint64)
    for i in range(-AHEAD, n):
        a = i + AHEAD
        if a < n:
            h = index_hash(keys[a])
            hs[a & (RING - 1)] = h
            sub = np.int64(h >> U64(64 - SUB_BITS))
            if lo <= sub < hi:
                pos = sub_off[sub] + np.int64(h & U64(sub_cap[sub] - 1))
                prefetch(tags, pos)
                prefetch(slots, pos)
        if i < 0:
            continue
        h = hs[i & (RING - 1)]
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
    """Move one sub-table's entries from its old region into a fresh (zeroed) bigger one.

    The old region is read in order; the ids its rows point at (to find each entry's new home)
    are read at random, so each is prefetched REHASH_AHEAD slots before it is needed."""
    mask = U64(new_cap - 1)
    end = old_off + old_cap
    for k in range(old_off, end):
        if k + REHASH_AHEAD < end and tags[k + REHASH_AHEAD] != 0:
            prefetch(ids, slots[k + REHASH_AHEAD])
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

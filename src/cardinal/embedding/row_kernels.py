"""Compiled kernels over a table's rows: gathers, metadata touches and the digest.

Row storage (one row per id, row numbers from the index):

    data   float32 (rows, dim + state)   [ v0 v1 ... v{dim-1} | optimizer state ... ]
    count  uint32  (rows,)               times the id was pulled for training
    step   uint32  (rows,)               the last step that pulled or pushed it
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash
from cardinal.embedding.prefetch import prefetch_row

AHEAD = 12  # rows whose lines are prefetched ahead of the one copied


@nb.njit(inline="always")
def copy_row(data, r, out, i, dim):
    """out[i, :dim] = data[r, :dim], or zeros where r < 0 (an id not in the table)."""
    if r < 0:
        for j in range(dim):
            out[i, j] = 0.0
    else:
        for j in range(dim):
            out[i, j] = data[r, j]


@nb.njit(nogil=True, cache=True)
def gather(data, rows, dim, out):
    """out[i] = data[rows[i], :dim], or zeros where rows[i] < 0 (an id not in the table).

    data,  # (R, dim + state) float32
    rows,  # (n,) int64
    out,   # (n, dim) float32
    """
    for i in range(rows.shape[0]):
        copy_row(data, rows[i], out, i, dim)


@nb.njit(nogil=True, cache=True)
def add_values(data, rows, deltas, dim):
    """data[rows[i], :dim] += deltas[i]: a GEO-SGD delta, no optimizer (an optimizer kernel's
    arguments, ``optim/base.py``).

    deltas,  # (u, dim) float32, rows unique
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(dim):
            data[r, j] += deltas[i, j]


@nb.njit(nogil=True, cache=True)
def touch(count, last_step, rows, step, seen):
    """Metadata of a pull (``seen=True``: count += 1) or a push (``seen=False``); rows < 0
    (ids an admission filter held back) are skipped."""
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        if seen and count[r] < np.uint32(0xFFFFFFFF):
            count[r] += np.uint32(1)
        last_step[r] = step


@nb.njit(nogil=True, cache=True)
def distinct_rows(rows, marks):
    """True when every rows[i] >= 0 and no row repeats: a push whose ids need no de-duplication.

    rows,   # (n,) int64
    marks,  # (>= max row / 64 + 1,) uint64, all zero: a bit per row (rows are dense: in cache), all zero after
    """
    n = rows.shape[0]
    marked = n
    for i in range(n):
        r = rows[i]
        if r < 0 or marks[r >> 6] & (U64(1) << U64(r & 63)):
            marked = i
            break
        marks[r >> 6] |= U64(1) << U64(r & 63)
    for i in range(marked):
        marks[rows[i] >> 6] = U64(0)
    return marked == n


@nb.njit(nogil=True, cache=True)
def digest_rows(ids, data_bits, count, last_step, n):
    """Order-independent 128-bit digest of rows [0, n): (sum, xor) of a per-row hash.

    Equivalent to hashing the rows sorted by id, without the sort, and additive: the digest
    of a sharded table is the combination of its shards' digests, whatever the shard count.
    data_bits,  # (R, width) int32: the float32 rows viewed as their bit patterns
    """
    words = data_bits.shape[1]
    total = U64(0)
    xored = U64(0)
    for r in range(n):
        h = index_hash(ids[r])
        for j in range(words):
            bits = U64(np.int64(data_bits[r, j]) & np.int64(0xFFFFFFFF))
            h = index_hash(h ^ bits)
        h = index_hash(h ^ U64(count[r]))
        h = index_hash(h ^ (U64(last_step[r]) << U64(32)))
        total += h
        xored ^= index_hash(h ^ U64(0x5851F42D4C957F2D))
    return total, xored


@nb.njit(nogil=True, cache=True)
def copy_rows(data, rows, lo, hi, out):
    """out[i] = data[rows[i]] (values and optimizer state) for i in [lo, hi): a backup.

    data,  # (R, width) float32
    rows,  # (u,) int64, unique
    out,   # (>= hi, width) float32
    """
    for i in range(lo, hi):
        if i + AHEAD < hi:  # this pass takes the block's misses: keep many in flight
            prefetch_row(data, rows[i + AHEAD])
        r = rows[i]
        for j in range(data.shape[1]):
            out[i, j] = data[r, j]


@nb.njit(nogil=True, cache=True)
def restore_rows(data, rows, hi, backup):
    """data[rows[i]] = backup[i] for i in [0, hi): undo an update."""
    for i in range(hi):
        r = rows[i]
        for j in range(data.shape[1]):
            data[r, j] = backup[i, j]


@nb.njit(nogil=True, cache=True)
def first_nonfinite(data_bits, rows, lo, hi):
    """The first i in [lo, hi) whose row data[rows[i]] holds NaN or Inf, or -1.

    data_bits,  # (R, width) int32: the float32 rows viewed as their bit patterns; a value is
                # NaN or Inf when its exponent bits are all ones (an integer test that vectorizes)
    """
    exponent = np.int32(0x7F800000)
    for i in range(lo, hi):
        r = rows[i]
        bad = 0
        for j in range(data_bits.shape[1]):
            bad |= (data_bits[r, j] & exponent) == exponent
        if bad:
            return i
    return -1

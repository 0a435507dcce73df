"""Compiled kernels of the chunked row format (``chunked.py``): rows to and from the chunk pool.

Names used throughout: C chunks of s columns, then t tail columns (never freed), so a row has
dim = C s + t values; the optimizer's state is a blocks of dim per-element words then b scalars.

    working row  [ values (dim) | state block 1 (dim) ... block a (dim) | scalars (b) ]
    row words    [ handle (C) | utility (C) | tail: values (t), block 1 (t) ... block a (t) | scalars (b) ]
    chunk        [ values (s) | block 1 (s) ... block a (s) ]         (a pool row, (1 + a) s words)

Column j of block e (e = 0: the values) is working column e dim + j: for j in chunk k it is
word e s + (j - k s) of that chunk, for a tail column word 2C + e t + (j - C s) of the row.
A handle is an int32 in the row's words: 0 for no chunk (the columns read as zeros), h + 1 for
pool row h. Every kernel here walks rows in order and allocates nothing: the same bits for any
thread count.
"""

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import overload

FLOAT32_MAX = np.float32(3.4028235e38)


AHEAD = 64  # rows whose chunks ``gather`` touches ahead of copying them


@nb.njit(nogil=True, cache=True)
def _touch(bits, pool, rows, C, lo, hi):
    """Read the first and last word of the chunks of rows[lo:hi]: loads that do not wait on each
    other, so the memory serves them together (a row's C chunks lie anywhere in the pool)."""
    acc = np.float32(0.0)
    last = pool.shape[1] - 1
    for i in range(lo, hi):
        r = rows[i]
        if r >= 0:
            for k in range(C):
                h = bits[r, k]
                if h != 0:
                    acc += pool[h - 1, 0] + pool[h - 1, last]
    return acc


@nb.njit(nogil=True, cache=True)
def gather(words, bits, pool, rows, C, s, t, a, b, full, out):
    """out[i] = row rows[i] as a working row (``full``) or its values alone; zeros for the columns
    of chunks a row does not hold, and for rows[i] < 0. Touches the next AHEAD rows' chunks
    before copying each window: cold chunks arrive about twice as fast as one by one. Returns
    the touched words' sum (so that the touch is not compiled away; callers ignore it).

    words,  # (R, W) float32 row words
    bits,   # (R, W) int32: the same memory (the handles)
    pool,   # (P, (1 + a) s) float32 chunks
    rows,   # (n,) int64
    out,    # (n, dim) float32, or (n, (1 + a) dim + b) when full
    """
    dim = C * s + t
    blocks = 1 + a if full else 1
    n = rows.shape[0]
    touched = _touch(bits, pool, rows, C, 0, min(AHEAD, n))
    for i in range(n):
        if i % AHEAD == 0:
            touched += _touch(bits, pool, rows, C, i + AHEAD, min(i + 2 * AHEAD, n))
        r = rows[i]
        if r < 0:
            for j in range(out.shape[1]):
                out[i, j] = 0.0
            continue
        _read_row(words, bits, pool, r, C, s, t, a, b, full, out, i)
    return touched


@nb.njit(nogil=True, cache=True, inline="always")
def _read_row(words, bits, pool, r, C, s, t, a, b, full, out, i):
    """out[i] = row r as a working row (``full``) or its values alone (``gather``)."""
    dim = C * s + t
    blocks = 1 + a if full else 1
    for k in range(C):
        h = bits[r, k]
        for e in range(blocks):
            at = e * dim + k * s
            if h == 0:
                for j in range(s):
                    out[i, at + j] = 0.0
            else:
                for j in range(s):
                    out[i, at + j] = pool[h - 1, e * s + j]
    for e in range(blocks):
        for j in range(t):
            out[i, e * dim + C * s + j] = words[r, 2 * C + e * t + j]
    if full:
        for q in range(b):
            out[i, (1 + a) * dim + q] = words[r, 2 * C + (1 + a) * t + q]


@nb.njit(nogil=True, cache=True, inline="always")
def _portable_row(words, bits, pool, r, C, s, t, a, b, out, i):
    """out[i] = row r's portable form: [working row | utility (C) | live (C): 1.0 or 0.0]."""
    _read_row(words, bits, pool, r, C, s, t, a, b, True, out, i)
    ww = (1 + a) * (C * s + t) + b
    for k in range(C):
        out[i, ww + k] = words[r, C + k]
        out[i, ww + C + k] = 1.0 if bits[r, k] != 0 else 0.0


@nb.njit(nogil=True, cache=True)
def portable(words, bits, pool, rows, C, s, t, a, b, out):
    """out[i] = the portable form of row rows[i] (rows >= 0), (n, (1 + a) dim + b + 2 C); touches
    ahead and returns the touched words' sum as ``gather`` does."""
    n = rows.shape[0]
    touched = _touch(bits, pool, rows, C, 0, min(AHEAD, n))
    for i in range(n):
        if i % AHEAD == 0:
            touched += _touch(bits, pool, rows, C, i + AHEAD, min(i + 2 * AHEAD, n))
        _portable_row(words, bits, pool, rows[i], C, s, t, a, b, out, i)
    return touched


@nb.njit(nogil=True, cache=True)
def scatter(work, words, bits, pool, rows, C, s, t, a, b):
    """Write working rows work[i] (n, (1 + a) dim + b) back to rows rows[i]: the columns of the
    chunks each row holds, its tail and its scalars; the columns of chunks it does not hold are
    dropped."""
    for i in range(rows.shape[0]):
        _write_row(work, i, words, bits, pool, rows[i], C, s, t, a, b)


@nb.njit(nogil=True, cache=True, inline="always")
def _write_row(work, i, words, bits, pool, r, C, s, t, a, b):
    """Row r := working row work[i] (``scatter``)."""
    dim = C * s + t
    for k in range(C):
        h = bits[r, k]
        if h == 0:
            continue
        for e in range(1 + a):
            for j in range(s):
                pool[h - 1, e * s + j] = work[i, e * dim + k * s + j]
    for e in range(1 + a):
        for j in range(t):
            words[r, 2 * C + e * t + j] = work[i, e * dim + C * s + j]
    for q in range(b):
        words[r, 2 * C + (1 + a) * t + q] = work[i, (1 + a) * dim + q]


@nb.njit(nogil=True, cache=True)
def observe(words, bits, rows, grads, C, s):
    """A push's gradients grads[i] (n, dim) for rows rows[i]: utility k += the squared L2 norm of
    the gradient's chunk k columns (float32, summed in column order, held at FLOAT32_MAX), for
    every chunk; the gradient of a chunk the row does not hold is then zeroed (dropped)."""
    for i in range(rows.shape[0]):
        _observe_row(words, bits, rows[i], grads, i, C, s)


@nb.njit(nogil=True, cache=True, inline="always")
def _observe_row(words, bits, r, grads, i, C, s):
    """``observe`` of row r, gradient grads[i]."""
    for k in range(C):
        acc = np.float32(0.0)
        for j in range(k * s, (k + 1) * s):
            g = grads[i, j]
            acc += g * g
        u = words[r, C + k] + acc
        words[r, C + k] = u if u <= FLOAT32_MAX else FLOAT32_MAX
        if bits[r, k] == 0:
            for j in range(k * s, (k + 1) * s):
                grads[i, j] = 0.0


@nb.njit(nogil=True, cache=True)
def place(portable, words, bits, pool, rows, chunks, C, s, t, a, b):
    """Rows rows[i] hold portable rows portable[i] = [working row | utility (C) | live (C)]: the
    chunks marked live get pool rows chunks[0], chunks[1], ... in row then chunk order (as many
    as are live), the others none; utilities, tail and scalars are copied. The rows hold no
    chunks before (``Chunked.release``)."""
    dim = C * s + t
    ww = (1 + a) * dim + b
    c = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(C):
            words[r, C + k] = portable[i, ww + k]
            if portable[i, ww + C + k] == 0.0:
                bits[r, k] = 0
                continue
            h = chunks[c]
            c += 1
            bits[r, k] = np.int32(h + 1)
            for e in range(1 + a):
                for j in range(s):
                    pool[h, e * s + j] = portable[i, e * dim + k * s + j]
        for e in range(1 + a):
            for j in range(t):
                words[r, 2 * C + e * t + j] = portable[i, e * dim + C * s + j]
        for q in range(b):
            words[r, 2 * C + (1 + a) * t + q] = portable[i, ww - b + q]
    return c


@nb.njit(nogil=True, cache=True)
def prefix_min(util, out):
    """out[r, k] = min(util[r, 0..k]): the threshold up to which chunk k of row r stays live.

    util, out,  # (n, C) float32
    """
    for r in range(util.shape[0]):
        m = util[r, 0]
        for k in range(util.shape[1]):
            m = min(m, util[r, k])
            out[r, k] = m


@nb.njit(nogil=True, cache=True)
def compact(bits, old, new, live):
    """Rows [0, n) keep exactly the chunks ``live`` (n, C) bool marks: live chunks get pool rows
    0, 1, ... of ``new`` in row then chunk order, a chunk the row held copied from ``old``, a new
    one zeros; the handles are rewritten. Returns the number of chunks in ``new``.

    old,  # (P, (1 + a) s) float32: the pool the handles point into now
    new,  # (>= live.sum(), (1 + a) s) float32
    """
    c = 0
    for r in range(live.shape[0]):
        for k in range(live.shape[1]):
            h = bits[r, k]
            if not live[r, k]:
                bits[r, k] = 0
                continue
            for j in range(new.shape[1]):
                new[c, j] = old[h - 1, j] if h != 0 else np.float32(0.0)
            c += 1
            bits[r, k] = np.int32(c)
    return c


@nb.njit(nogil=True, cache=True)
def first_nonfinite_held(work, bits, rows, C, s, t, a, b):
    """The first i whose working row work[i] holds NaN or Inf in a column row rows[i] stores
    (its held chunks, its tail, its scalars; every block), or -1: what ``gather`` of the stored
    rows would find, without gathering them again."""
    dim = C * s + t
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(C):
            if bits[r, k] == 0:
                continue
            for e in range(1 + a):
                for j in range(s):
                    if not np.isfinite(work[i, e * dim + k * s + j]):
                        return i
        for e in range(1 + a):
            for j in range(t):
                if not np.isfinite(work[i, e * dim + C * s + j]):
                    return i
        for q in range(b):
            if not np.isfinite(work[i, (1 + a) * dim + q]):
                return i
    return -1


def _run(kernel, hyper, data, rows, grads, counts, lo, hi, dim):
    """``kernel`` on rows ``rows`` of ``data``, gradients grads[lo:hi], counted by counts[lo:hi] unless
    ``counts`` is None (an ``optim/base.py`` kernel's two forms; compiled by its overload below)."""


@overload(_run)
def _run_compiled(kernel, hyper, data, rows, grads, counts, lo, hi, dim):
    if isinstance(counts, types.NoneType):
        def run(kernel, hyper, data, rows, grads, counts, lo, hi, dim):
            kernel(data, rows, grads[lo:hi], dim, *hyper)
    else:
        def run(kernel, hyper, data, rows, grads, counts, lo, hi, dim):
            kernel(data, rows, grads[lo:hi], counts[lo:hi], dim, *hyper)
    return run


TILE = 64  # rows a push updates at a time: their working rows (dim 64, row-wise Adagrad: 17 KB) stay in L1


@nb.njit(nogil=True)
def update_in_place(words, bits, pool, rows, grads, counts, kernel, hyper, backup, tile, order, C, s, t, a, b):
    """A push's update of rows rows[i] (unique), gradients grads[i], in place, TILE rows at a time:
    backup[i] = the row's portable form (``portable``), the push observed (``observe``: utilities,
    dropped gradients), then ``kernel(tile, order, grads, [counts,] dim, *hyper)`` (an optimizer's,
    ``optim/base.py``: every row on its own) run on the tile's working rows, which are checked (the
    columns a row stores) and written back. No decoded copy of the block, one pass over its rows:
    the same bits as ``portable``, ``observe``, ``gather``, the kernel on all the rows, then
    ``scatter``. The next tile's chunks are touched first, as ``gather`` does. Returns (-1, or the
    first i whose row would hold NaN or Inf: its tile and the rows after are not written back,
    ``backup`` is filled for every row; the touched words' sum, as ``gather``'s). Not cached: numba
    caches no function that takes another (``kernel``) as an argument, so it compiles once a
    process for each kernel it is given (about half a second).

    grads,   # (n, dim) float32; a dropped chunk's gradient is zeroed here
    counts,  # (n,) int32, or None: the kernel's counted form or not
    backup,  # (n, (1 + a) dim + b + 2 C) float32
    tile,    # (TILE, (1 + a) dim + b) float32, scratch
    order,   # (TILE,) int64: 0, 1, ...
    """
    dim = C * s + t
    n = rows.shape[0]
    touched = _touch(bits, pool, rows, C, 0, min(TILE, n))
    for lo in range(0, n, TILE):
        hi = min(n, lo + TILE)
        touched += _touch(bits, pool, rows, C, hi, min(hi + TILE, n))
        for i in range(lo, hi):
            _portable_row(words, bits, pool, rows[i], C, s, t, a, b, backup, i)
            for j in range(tile.shape[1]):
                tile[i - lo, j] = backup[i, j]
            _observe_row(words, bits, rows[i], grads, i, C, s)
        _run(kernel, hyper, tile, order[:hi - lo], grads, counts, lo, hi, dim)
        bad = first_nonfinite_held(tile[:hi - lo], bits, rows[lo:hi], C, s, t, a, b)
        if bad >= 0:
            for i in range(hi, n):
                _portable_row(words, bits, pool, rows[i], C, s, t, a, b, backup, i)
            return lo + bad, touched
        for i in range(lo, hi):
            _write_row(tile, i - lo, words, bits, pool, rows[i], C, s, t, a, b)
    return -1, touched

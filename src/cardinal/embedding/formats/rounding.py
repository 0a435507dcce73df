"""The random bits of stochastic rounding: a hash of (id, step, column), no generator state.

A row encoded twice from the same values at the same step gets the same bits (a resumed or
replayed run is bitwise equal); different steps draw independently, so an update smaller
than one step of the format moves the stored value by that update on average.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash

INIT_STEP = 0xFFFFFFFF  # the step new rows are rounded at (their first values depend on the id alone)


@nb.njit(inline="always")
def row_key(id_, step):
    return index_hash(U64(id_) ^ (U64(step) * U64(0x9E6C63D0676A9A99)))


@nb.njit(inline="always")
def noise(key, j):
    """64 random bits for column j of the row keyed ``key``."""
    return index_hash(key + U64(j) * U64(0xD1B54A32D192ED03))


@nb.njit(nogil=True, cache=True)
def bits(ids, step, dim, out):
    """out[i, j] = noise(row_key(ids[i], step), j): the bits the formats draw (for references).

    out,  # (n, dim) uint64
    """
    for i in range(ids.shape[0]):
        key = row_key(ids[i], step)
        for j in range(dim):
            out[i, j] = noise(key, j)


@nb.njit(nogil=True, cache=True)
def uniforms(ids, step, dim, out):
    """out[i, j] uniform in [0, 1), 24 bits, from (ids[i], step, j).

    ids,  # (n,) int64
    out,  # (n, dim) float32
    """
    for i in range(ids.shape[0]):
        key = row_key(ids[i], step)
        for j in range(dim):
            out[i, j] = np.float32((noise(key, j) >> U64(40)) * (1.0 / 16777216.0))

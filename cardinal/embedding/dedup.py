"""De-duplication of a batch's ids: the "virtual sparse ids" of ScaleFreeCTR.

    ids      [7, 3, 7, 9, 3]
    unique   [7, 3, 9]            first-occurrence order (stable, so results never depend
    inverse  [0, 1, 0, 2, 1]      on a hash seed): unique[inverse] == ids

A worker pulls and pushes one row per unique id; the server sums duplicate gradients in
a fixed order (``segment_sum``) before its optimizer sees them.
"""

import numba as nb
import numpy as np

from cardinal.embedding.hashing import U64, index_hash


@nb.njit(nogil=True, cache=True)
def _unique_inverse(ids, unique, inverse):
    n = ids.shape[0]
    cap = 16
    while cap < 2 * n:
        cap *= 2
    mask = U64(cap - 1)
    table = np.full(cap, -1, np.int64)  # slot -> position in unique
    u = 0
    for i in range(n):
        key = ids[i]
        s = index_hash(key) & mask
        while True:
            j = table[s]
            if j < 0:
                table[s] = u
                unique[u] = key
                inverse[i] = u
                u += 1
                break
            if unique[j] == key:
                inverse[i] = j
                break
            s = (s + U64(1)) & mask
    return u


def unique_inverse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ids (n,) int64 -> (unique (u,) int64 in first-occurrence order, inverse (n,) int64)."""
    unique = np.empty(len(ids), np.int64)
    inverse = np.empty(len(ids), np.int64)
    u = _unique_inverse(ids, unique, inverse)
    return unique[:u].copy(), inverse


@nb.njit(nogil=True, cache=True)
def _segment_sum(values, inverse, out):
    for i in range(values.shape[0]):
        j = inverse[i]
        for k in range(values.shape[1]):
            out[j, k] += values[i, k]


def segment_sum(values: np.ndarray, inverse: np.ndarray, n_segments: int) -> np.ndarray:
    """out[j] = sum of values[i] with inverse[i] == j, added in increasing i (deterministic).

    values,   # (n, d) float32
    inverse,  # (n,) int64 in [0, n_segments)
    """
    out = np.zeros((n_segments, values.shape[1]), values.dtype)
    _segment_sum(values, inverse, out)
    return out

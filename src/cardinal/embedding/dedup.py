"""De-duplication of a batch's ids: the "virtual sparse ids" of ScaleFreeCTR.

    ids      [7, 3, 7, 9, 3]
    unique   [7, 3, 9]            first-occurrence order (stable, so results never depend
    inverse  [0, 1, 0, 2, 1]      on a hash seed): unique[inverse] == ids

A worker pulls and pushes one row per unique id; the server sums duplicate gradients in
a fixed order (``segment_sum``) before its optimizer sees them.

Large inputs are de-duplicated on the kernel threads (``cardinal/parallel.py``), with the same
result as one thread: thread t of T owns the ids whose hash falls in partition t and finds,
for each of its ids, the position of that id's first occurrence (``first[i]``); then the
first occurrences, numbered in position order, are the unique ids:

    ids      [7, 3, 7, 9, 3]
    first    [0, 1, 0, 3, 1]      (7 and 9 in partition 0, 3 in partition 1, say)
    is first [1, 1, 0, 1, 0]  ->  numbered 0, 1, _, 2, _  ->  unique [7, 3, 9], inverse [0, 1, 0, 2, 1]
"""

import numba as nb
import numpy as np

from cardinal import parallel
from cardinal.embedding.hashing import U64, index_hash

PARALLEL_MIN = 1 << 14  # ids per thread below which a thread does not pay for its hop
MIN_THREADS = 4  # the threaded path does ~3.2x one thread's work in all (benchmarks/worker_path.py, 2
                 # threads forced), so it pays from 4 threads; with fewer the caller's thread dedups alone


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


@nb.njit(nogil=True, cache=True)
def _partitions(ids, hashes, parts, n_parts, lo, hi):
    """hashes[i] = index_hash(ids[i]) and parts[i] = its partition (hash bits 32..63 scaled to n_parts)."""
    for i in range(lo, hi):
        h = index_hash(ids[i])
        hashes[i] = h
        parts[i] = np.int32(((h >> U64(32)) * U64(n_parts)) >> U64(32))


@nb.njit(nogil=True, cache=True)
def _first_positions(ids, hashes, parts, first, part):
    """first[i] = the first position of ids[i], for the ids of partition ``part``."""
    n = ids.shape[0]
    mine = 0
    for i in range(n):
        if parts[i] == part:
            mine += 1
    cap = 16
    while cap < 2 * mine:
        cap *= 2
    mask = U64(cap - 1)
    table = np.full(cap, -1, np.int64)  # slot -> first position of its id
    for i in range(n):
        if parts[i] != part:
            continue
        key = ids[i]
        s = hashes[i] & mask
        while True:
            j = table[s]
            if j < 0:
                table[s] = i
                first[i] = i
                break
            if ids[j] == key:
                first[i] = j
                break
            s = (s + U64(1)) & mask


@nb.njit(nogil=True, cache=True)
def _count_firsts(first, lo, hi):
    c = 0
    for i in range(lo, hi):
        if first[i] == i:
            c += 1
    return c


@nb.njit(nogil=True, cache=True)
def _number_firsts(ids, first, lo, hi, base, unique, inverse):
    """Positions lo..hi-1 that are first occurrences get numbers base, base + 1, ..."""
    u = base
    for i in range(lo, hi):
        if first[i] == i:
            unique[u] = ids[i]
            inverse[i] = u
            u += 1


@nb.njit(nogil=True, cache=True)
def _copy_numbers(first, inverse, lo, hi):
    """Other positions take their first occurrence's number (written by _number_firsts)."""
    for i in range(lo, hi):
        j = first[i]
        if j != i:
            inverse[i] = inverse[j]


def _unique_inverse_parallel(ids, unique, inverse, n_parts: int) -> int:
    """Five passes over n_parts threads: hash each id (by position ranges); find first positions
    (by hash partition); then by position ranges: count first occurrences, number them (unique,
    their inverse), copy the numbers to the other positions."""
    n = len(ids)
    first, hashes, parts = np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(n, np.int32)
    bounds = [n * p // n_parts for p in range(n_parts + 1)]
    parallel.each(n_parts, lambda p, k: _partitions(ids, hashes, parts, k, bounds[p], bounds[p + 1]))
    parallel.each(n_parts, lambda p, k: _first_positions(ids, hashes, parts, first, p))
    counts = [0] * n_parts
    parallel.each(n_parts, lambda p, k: counts.__setitem__(p, _count_firsts(first, bounds[p], bounds[p + 1])))
    bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
    parallel.each(n_parts, lambda p, k: _number_firsts(ids, first, bounds[p], bounds[p + 1], bases[p], unique,
                                                       inverse))
    parallel.each(n_parts, lambda p, k: _copy_numbers(first, inverse, bounds[p], bounds[p + 1]))
    return bases[-1]


def unique_inverse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ids (n,) int64 -> (unique (u,) int64 in first-occurrence order, inverse (n,) int64).

    The same result for any thread count; inputs below ``PARALLEL_MIN`` ids per thread, or
    fewer than ``MIN_THREADS`` threads, stay on the caller's thread."""
    unique = np.empty(len(ids), np.int64)
    inverse = np.empty(len(ids), np.int64)
    n_parts = parallel.parts(len(ids), PARALLEL_MIN)
    if n_parts >= MIN_THREADS:
        u = _unique_inverse_parallel(ids, unique, inverse, n_parts)
    else:
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


@nb.njit(nogil=True, cache=True)
def _segment_max(values, inverse, out):
    for i in range(values.shape[0]):
        j = inverse[i]
        if values[i] > out[j]:
            out[j] = values[i]


def segment_max(values: np.ndarray, inverse: np.ndarray, n_segments: int) -> np.ndarray:
    """out[j] = the largest values[i] with inverse[i] == j: a push's duplicate ids are parts of one
    update, so their update counts merge by max, not sum.

    values,   # (n,) int32 >= 1
    inverse,  # (n,) int64 in [0, n_segments)
    """
    out = np.zeros(n_segments, values.dtype)
    _segment_max(values, inverse, out)
    return out

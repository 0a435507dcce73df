"""The victims of a policy whose scores follow a uint32 key (lru: last step, lfu: count), in one
compiled pass over the rows instead of float64 scores sorted.

A budget eviction picks the k lowest-scored of every RAM row it may evict, each step: with a disk
tier about four times a step over ~90k rows a shard, 1.6 ms each as scores, a protection mask and
``np.argpartition``. A radix select finds the k lowest keys in three passes over the keys
(histograms of the high and of the low 16 bits, then the rows), with no sort: 0.2 ms. Ties at the
k-th key go in row order: the choice is the same every run, and only where a row lives depends on
it, never its values.
"""

import numba as nb
import numpy as np

BINS = 1 << 16


@nb.njit(nogil=True, cache=True)
def lowest_keys(key, last_step, cutoff, k):
    """Row numbers (increasing) of the ``k`` lowest ``key`` (n,) uint32 among rows whose
    ``last_step`` (n,) uint32 is below ``cutoff`` (int64; the others are protected); all of them
    if fewer. Ties at the k-th key: the first rows."""
    n = key.shape[0]
    high = np.zeros(BINS, np.int64)
    m = 0
    for i in range(n):
        if np.int64(last_step[i]) < cutoff:
            high[key[i] >> 16] += 1
            m += 1
    k = min(k, m)
    out = np.empty(max(k, 0), np.int64)
    if k <= 0:
        return out
    below, hi = 0, 0
    while below + high[hi] < k:  # every key under bin hi is taken
        below += high[hi]
        hi += 1
    low = np.zeros(BINS, np.int64)
    for i in range(n):
        if np.int64(last_step[i]) < cutoff and key[i] >> 16 == hi:
            low[key[i] & 0xFFFF] += 1
    lo = 0
    while below + low[lo] < k:
        below += low[lo]
        lo += 1
    threshold = np.uint32((hi << 16) | lo)
    ties, j = k - below, 0  # every key under threshold, and the first ``ties`` rows at it
    for i in range(n):
        if np.int64(last_step[i]) < cutoff:
            if key[i] < threshold:
                out[j] = i
                j += 1
            elif key[i] == threshold and ties > 0:
                out[j] = i
                j += 1
                ties -= 1
    return out

"""Merging a delta into a sorted table in one pass, off the GIL: a reload's copy of the table
runs while the server goes on answering requests (``tables.SnapshotTable.updated``).

    old ids   [2, 5, 7, 9]     keep  [T, F, T, T]   (5 deleted or replaced)
    new ids   [5, 8]           at    [1, 2]          (where each goes among the kept rows)
    merged    [2, 5, 7, 8, 9]

numpy's boolean take and ``insert`` would copy the table twice, each holding the GIL.
"""

import numba as nb
import numpy as np


@nb.njit(nogil=True, cache=True)
def _merge(old, keep, new, at, out):
    o = j = k = 0  # rows written, new rows placed, kept rows passed
    for i in range(old.shape[0]):
        if not keep[i]:
            continue
        while j < at.shape[0] and at[j] == k:
            out[o] = new[j]
            o += 1
            j += 1
        out[o] = old[i]
        o += 1
        k += 1
    while j < at.shape[0]:
        out[o] = new[j]
        o += 1
        j += 1


def merge(old: np.ndarray, keep: np.ndarray, new: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``old[keep]`` with the rows of ``new`` inserted before kept row ``at[j]`` (``at`` ascending,
    as ``np.searchsorted(old_ids[keep], new_ids)`` of sorted new ids gives): ``np.insert(old[keep],
    at, new, axis=0)`` in one pass."""
    out = np.empty((int(keep.sum()) + len(new), *old.shape[1:]), old.dtype)
    _merge(_bytes(old), np.ascontiguousarray(keep, np.bool_), _bytes(np.asarray(new, old.dtype)),
           np.ascontiguousarray(at, np.int64), _bytes(out))
    return out


def _bytes(a: np.ndarray) -> np.ndarray:
    """A row-major array as (rows, bytes a row) uint8, a view: one compiled kernel for every dtype
    (float16 among them, which numba has not) and shape."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(len(a), -1) if a.size else np.zeros((len(a), 0), np.uint8)

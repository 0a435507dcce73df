"""The per-row pieces that let one kernel pass both update rows and guard them.

A push that would make any value or optimizer state NaN or Inf is refused whole. Checking
after the fact costs passes over the rows (copy them, update, re-read to check); instead each
optimizer kernel takes a ``backup`` (u, width) buffer and, per row, while the row is in L1:
saves it, updates it, and checks it. It stops at the first non-finite row and returns its
index, so the caller restores rows [0, i] from ``backup`` and nothing is changed. With an
empty ``backup`` (``NO_BACKUP``) the same kernel is the plain update.

    i = kernel(data, rows, grads, dim, ..., backup)   # -1: every row finite, all written
    if i >= 0: restore_rows(data, rows, i + 1, backup)  # rows [0, i] back as they were
"""

import numba as nb
import numpy as np

from cardinal.embedding.prefetch import prefetch_row

AHEAD = 8  # rows prefetched ahead of the one being updated
NO_BACKUP = np.empty((0, 0), np.float32)


@nb.njit(inline="always")
def before_row(data, rows, i, backup):
    """Prefetch the row AHEAD of i; when guarding, copy row rows[i] to backup[i]."""
    if i + AHEAD < rows.shape[0]:
        prefetch_row(data, rows[i + AHEAD])
    if backup.shape[0] > 0:
        r = rows[i]
        for j in range(data.shape[1]):
            backup[i, j] = data[r, j]


@nb.njit(inline="always")
def row_bad(data, r, backup):
    """When guarding: does row r (values and state) hold a NaN or Inf? (x * 0 is 0 only for
    finite x; the sum keeps any NaN, and the loop vectorizes.)"""
    if backup.shape[0] == 0:
        return False
    acc = np.float32(0.0)
    for j in range(data.shape[1]):
        acc += data[r, j] * np.float32(0.0)
    return not acc == np.float32(0.0)

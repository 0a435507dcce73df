"""Deleting rows while the live ones stay dense: rows [0, size) are always the live rows.

Each deleted row below the new size is filled by a live row from the end, in order, and
the index is told of the move before anything moves (its probes read ids through the rows):

    rows   0 1 2 3 4 5       delete rows {1, 4}: size 6 -> 4
    ids    a b c d e f       holes below 4: [1]; live rows at or past 4: [5]
    after  a f c d           f moved 5 -> 1

Why dense rather than a free list: every whole-table pass (export for checkpoints, digest,
check, eviction's scoring) stays one sweep over [0, size) with no liveness test, and the
memory of deleted rows is returned at the end of the arenas. A deletion costs one row copy.
The result depends only on the set deleted, never on threads.
"""

import numpy as np

from cardinal.embedding.index import IdIndex


def delete_rows(index: IdIndex, columns: tuple[np.ndarray, ...], size: int, dead: np.ndarray) -> int:
    """Delete rows ``dead`` (row numbers < size) from ``index`` and every column; returns the new size.

    columns,  # each (>= size, ...): columns[0] is the (size,) int64 ids the index reads
    """
    dead = np.unique(np.asarray(dead, np.int64))
    if len(dead) == 0:
        return size
    assert dead[0] >= 0 and dead[-1] < size, "deleting a row that is not live"
    ids = columns[0]
    new_size = size - len(dead)
    index.remove(ids, ids[dead])
    holes = dead[dead < new_size]
    tail = np.ones(size - new_size, bool)
    tail[dead[dead >= new_size] - new_size] = False
    movers = new_size + np.flatnonzero(tail)
    assert len(holes) == len(movers)
    if len(movers):
        index.relink(ids, ids[movers], holes)
        for column in columns:
            column[holes] = column[movers]
    return new_size

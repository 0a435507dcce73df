"""A served table with its recent deltas beside it: a reload costs the delta, not the table.

    t = Overlaid.over(snapshot)                 # nothing recent yet
    t = t.updated(ids, values, deleted)         # a delta: merged into ``recent`` only
    rows, known = t.lookup(ids)                 # recent first, then the base less ``gone``

Merging each delta into the whole table (``SnapshotTable.updated``) copies every row on every
reload, and that copy is what a reload's requests wait behind on a server's cores. Here a reload
merges the delta into the small ``recent`` table and notes the base's ids it deleted (``gone``);
the base is shared, untouched, with the model still answering requests. Once what lies beside the
base passes FOLD of it, one reload folds it in: the same merge as before, a reload in several.
A lookup reads what the merged table would hold, bit for bit (tests/serve/test_overlay.py): each
delta's rows are encoded once, in ``recent``, and a fold moves their encoded arrays.
"""

from dataclasses import dataclass

import numpy as np

from cardinal.serve.tables import SAEC_FIXED, SnapshotTable

FOLD = 0.5  # recent rows and gone ids, as a share of the base's rows, past which a reload folds them in:
           # a delta of a training run's 10 steps is 10-20% of the table, so a fold comes every few reloads

_NO_IDS = np.empty(0, np.int64)


@dataclass(frozen=True, eq=False)
class Overlaid:
    base: SnapshotTable
    recent: SnapshotTable  # rows set since the base (new or changed), in its form
    gone: np.ndarray       # (k,) int64 sorted: the base's ids deleted since and not set again
    size: int              # rows it reads: counted at the merge (made off the server's path), not at each look

    @staticmethod
    def over(base: SnapshotTable) -> "Overlaid":
        if base.form == "saec":
            raise ValueError(SAEC_FIXED)
        empty = SnapshotTable.build(_NO_IDS, np.empty((0, base.width), np.float32), base.form)
        return Overlaid(base, empty, _NO_IDS, len(base))

    @property
    def form(self) -> str:
        return self.base.form

    @property
    def width(self) -> int:
        return self.base.width

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self.base.nbytes + self.recent.nbytes + self.gone.nbytes

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out, known = self.base.lookup(ids)
        if len(self.gone):
            dead = _held(self.gone, ids)
            out[dead], known[dead] = 0, False  # what an id never trained reads
        if len(self.recent):
            rows, here = self.recent.lookup(ids)
            out[here], known[here] = rows[here], True
        return out, known

    def updated(self, ids: np.ndarray, values: np.ndarray, deleted: np.ndarray) -> "Overlaid | SnapshotTable":
        """This table with a delta applied (``SnapshotTable.updated``'s arguments): the base untouched
        while what lies beside it stays under FOLD of it, else one table, every change merged in."""
        return self.merged(SnapshotTable.build(np.asarray(ids, np.int64), values, self.form), deleted)

    def merged(self, new: SnapshotTable, deleted: np.ndarray) -> "Overlaid | SnapshotTable":
        """``updated`` with the delta's rows already built in this table's form (``SnapshotTable.merged``)."""
        deleted = np.asarray(deleted, np.int64)
        recent = self.recent.merged(new, deleted)
        gone = np.union1d(self.gone, deleted[_held(self.base.ids, deleted)])
        gone = gone[~_held(recent.ids, gone)]  # set again (every id of ``new`` is in ``recent`` now)
        if len(recent) + len(gone) <= FOLD * max(1, len(self.base)):
            hidden = int(_held(self.base.ids, np.union1d(gone, recent.ids)).sum())
            return Overlaid(self.base, recent, gone, len(self.base) - hidden + len(recent))
        return self.base.merged(recent, gone)


def overlaid(table: "Overlaid | SnapshotTable", new: SnapshotTable, deleted: np.ndarray) -> "Overlaid | SnapshotTable":
    """A served table (an export's ``SnapshotTable``, or one with deltas beside it) with a delta merged."""
    return (table if isinstance(table, Overlaid) else Overlaid.over(table)).merged(new, deleted)


def beside(table: "Overlaid | SnapshotTable", recent: SnapshotTable, gone: np.ndarray, size: int) -> Overlaid:
    """``recent`` and ``gone`` (merged elsewhere: ``overlaid``'s) beside the base ``table`` serves."""
    return Overlaid(table.base if isinstance(table, Overlaid) else table, recent, gone, size)


def _held(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(len(ids),) bool: which ``ids`` are in ``sorted_ids`` (sorted, unique), by binary search."""
    if len(sorted_ids) == 0:
        return np.zeros(len(ids), np.bool_)
    pos = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return sorted_ids[pos] == ids

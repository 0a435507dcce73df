"""``Table``: what the store (``ps/server/store.py``), the memory manager (``ps/server/memory.py``,
``ps/server/budget.py``) and checkpoints (``checkpoint/``) use of a table, whichever kind it is.

Two kinds implement it: ``EmbeddingTable`` (``table.py``: a row per id, in RAM and a disk tier)
and ``SaecTable`` (``clustered_table.py``: after Saec, a frozen map of ids to cluster rows). The
store asks nothing else of a table, so it never needs to know which kind it holds:

    requests        pull (into ``out`` when given: a reply being built), push, has
    after a push    after_push(step, replace): what the table's schedule runs then (``after_push.py``):
                    a chunked table's pass, a clustering that replaces the table; True when rows
                    changed that no push touched (the next checkpoint cannot be a delta)
    memory          len, nbytes, row_bytes, storage (the RAM rows eviction scores and deletes),
                    values (their values, for scores), evict, delete, admission, lock; ``tiered``:
                    rows leaving RAM go to a disk tier (``RowTable``), else they are deleted
    checkpoints     snapshot, checkpoint_files (a table saved in files of its own: its arrays and
                    manifest keys; None: saved as rows, ``RowTable.row_chunks``), import_rows,
                    deleted (ids deleted since the last checkpoint, ``deletion_log.py``),
                    delta_refused (why the next checkpoint cannot be a delta, or None), and
                    config, dim, optimizer, format, portable_width for the manifest
    whole table     export, stats (a Stats reply's entry), digest_parts, digest, check, close
"""

from collections.abc import Callable
from typing import Protocol

import numpy as np

from cardinal.embedding.deletion_log import DeletionLog
from cardinal.embedding.storage import Columns, RowStorage
from cardinal.embedding.table_config import TableConfig

Admit = Callable[[int, object], Callable[[], None]]  # admit(n_new, table) -> release(); raises to refuse
Select = Callable[[Columns, int], np.ndarray]  # select(columns, size) -> row numbers (eviction's choice)


def check_out(out: np.ndarray, n: int, dim: int) -> np.ndarray:
    """The array a pull of ``n`` rows of ``dim`` is told to write into: (n, dim) float32,
    C-contiguous and writable (the kernels write it row by row), else a ValueError."""
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != (n, dim) \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out: a pull of {n} rows of dim {dim} writes a writable C-contiguous ({n}, {dim}) "
                         f"float32 array, got {getattr(out, 'dtype', type(out).__name__)} of shape "
                         f"{getattr(out, 'shape', '?')}")
    return out


class Table(Protocol):
    config: TableConfig
    dim: int
    optimizer: object         # ``optim.SparseOptimizer``
    format: object            # ``formats.RowFormat``: its name goes into the manifest
    portable_width: int       # float32 words of a saved row
    lock: object              # an RLock: requests, eviction and a save's fence hold it
    admission: object         # ``admission.AdmissionFilter`` or None
    deleted: DeletionLog      # ids deleted since the last checkpoint, for the next delta
    tiered: bool              # rows leaving RAM go to a disk tier (``demote``) instead of being deleted

    def __len__(self) -> int:
        """Ids the table answers for (rows in every tier)."""

    @property
    def nbytes(self) -> int:
        """Bytes in RAM, everything counted against the memory budget."""

    @property
    def row_bytes(self) -> int:
        """What evicting every RAM row would free."""

    @property
    def storage(self) -> RowStorage:
        """The RAM rows eviction scores and deletes (``size``, ``columns()``, ``width``)."""

    def pull(self, ids: np.ndarray, *, create: bool = True, step: int = 0, admit: Admit | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        ...

    def push(self, ids: np.ndarray, grads: np.ndarray, *, step: int = 0, kind: str = "grad",
             admit: Admit | None = None, lr_scale: float = 1.0, counts: np.ndarray | None = None) -> None:
        ...

    def has(self, ids: np.ndarray) -> np.ndarray:
        ...

    def after_push(self, step: int, replace: Callable[["Table"], None]) -> bool:
        """Called by the store after each push of ``step`` to this table (no lock held): runs what the
        table's schedule has due; a table that is replaced gives its successor to ``replace``, its
        own lock held. True when rows changed that no push touched."""

    def delete(self, ids: np.ndarray, log: bool = True) -> int:
        ...

    def evict(self, select: Select, reason: str) -> int:
        ...

    def values(self, data: np.ndarray) -> np.ndarray:
        """(n, dim) float32: the values of RAM rows' words ``data`` (eviction's scores)."""

    def export(self, since: int | None = None) -> dict[str, np.ndarray]:
        ...

    def snapshot(self, since: int | None = None) -> dict:
        """A checkpoint's "rows" (a delta's; None for a full one), "deleted" and "admission"."""

    def checkpoint_files(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """A table saved in files of its own: (column -> array, written as ``<table>.<column>.npy``;
        what its manifest entry holds besides every table's keys); None: saved as rows (lock held)."""

    def import_rows(self, ids, data, count, last_step) -> None:
        ...

    def delta_refused(self) -> str | None:
        """Why a delta checkpoint cannot hold this table's changes since the last one, or None."""

    def stats(self) -> dict:
        ...

    def digest_parts(self) -> tuple[int, int]:
        ...

    def digest(self) -> str:
        ...

    def check(self) -> None:
        ...

    def close(self) -> None:
        """Let go of what the table holds outside RAM (its disk tier: its rows go with it)."""


class RowTable(Table, Protocol):
    """A table of rows (``EmbeddingTable``): what is asked of it where ``tiered`` (its disk tier)
    and where ``checkpoint_files()`` is None (a full checkpoint streams ``row_chunks``)."""

    @property
    def cold_bytes(self) -> int:
        """Bytes of the disk tier."""

    @property
    def cold_rows(self) -> int:
        """Rows in the disk tier."""

    @property
    def cold_ram_bytes(self) -> int:
        """Bytes the disk tier keeps in RAM (its key filter, RocksDB's table readers)."""

    def demote(self, select: Select) -> int:
        ...

    def evict_cold(self, select: Callable[[Columns | None], np.ndarray], reason: str) -> int:
        ...

    def cold_values(self, data: np.ndarray) -> np.ndarray:
        ...

    def row_chunks(self, size: int = 1 << 20):
        ...

    def settle(self) -> None:
        """The disk tier's background writes finished (``ColdTier.settle``)."""

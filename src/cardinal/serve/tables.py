"""Embedding tables as serving holds them: the live rows only, sorted by id, in one of four forms.

    t = SnapshotTable.build(ids, values, "int8")        # (n,) int64 any order, (n, width) float32
    rows, known = t.lookup(ids)    # (m, width) float32 and (m,) bool: zeros where an id was never trained
    entries = t.save(out, "emb")   # files emb.*.npy, checksummed; SnapshotTable.load(out, "emb", entries)

The forms (``FORMS``), chosen at export:

    fp32   values as trained: what ``cardinal eval`` pulls, bit for bit
    fp16   values rounded to half precision: half the value bytes
    int8   bytes round(x / scale) with one float32 scale per row (max |x| / 127): about 4x fewer
    saec   each field's rows clustered (part 8, ``compression/``): one vector per cluster and
           one int32 cluster number per id, ``ratio`` rows a cluster

A lookup is a binary search of the sorted ids (no index to build at load, none to rebuild on a
reload), then a gather; an id never trained reads zeros, as in training's evaluation. No
optimizer state, counts or steps: serving needs none of them.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cardinal.checkpoint.durable import load_array, verify_file, write_array
from cardinal.serve.merge import merge

FORMS = ("fp32", "fp16", "int8", "saec")
SAEC_FIXED = ("a saec table's clusters are fixed at export: it cannot follow training's checkpoints; export again, "
              "or serve an fp32, fp16 or int8 export")
ARRAYS = {"fp32": ("values",), "fp16": ("values",), "int8": ("values", "scale"), "saec": ("cluster", "vectors")}


@dataclass(frozen=True, eq=False)
class SnapshotTable:
    form: str
    width: int
    ids: np.ndarray                       # (n,) int64, sorted, unique
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # the form's arrays (``ARRAYS``)

    @staticmethod
    def build(ids: np.ndarray, values: np.ndarray, form: str = "fp32", *, clusters=None) -> "SnapshotTable":
        """``clusters``: for saec, a ``ClusteredTable`` of these ids (``compression.clustered``)."""
        if form not in FORMS:
            raise ValueError(f"table form must be one of {', '.join(FORMS)}, got {form!r}")
        order = np.argsort(ids, kind="stable")
        ids, values = np.ascontiguousarray(ids[order], np.int64), np.ascontiguousarray(values[order], np.float32)
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():
            raise ValueError("a table's ids must be unique")
        width = values.shape[1]
        if form == "fp32":
            arrays = {"values": values}
        elif form == "fp16":
            arrays = {"values": values.astype(np.float16)}
        elif form == "int8":
            scale = (np.abs(values).max(axis=1, initial=0.0) / np.float32(127)).astype(np.float32)
            safe = np.where(scale > 0, scale, np.float32(1))
            arrays = {"values": np.rint(values / safe[:, None]).astype(np.int8), "scale": scale}
        else:
            if clusters is None or not np.array_equal(clusters.ids, ids):
                raise ValueError("a saec table needs the clustering of exactly its ids")
            arrays = {"cluster": clusters.cluster, "vectors": clusters.vectors}
        return SnapshotTable(form, width, ids, arrays)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + sum(a.nbytes for a in self.arrays.values())

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros((len(ids), self.width), np.float32)
        if len(self.ids) == 0:
            return out, np.zeros(len(ids), np.bool_)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        known = self.ids[pos] == ids
        out[known] = self.rows(pos[known])
        return out, known

    def rows(self, pos: np.ndarray) -> np.ndarray:
        """(len(pos), width) float32: the rows at those positions of ``ids``."""
        a = self.arrays
        if self.form == "fp32":
            return a["values"][pos]
        if self.form == "fp16":
            return a["values"][pos].astype(np.float32)
        if self.form == "int8":
            return a["values"][pos].astype(np.float32) * a["scale"][pos, None]
        return a["vectors"][a["cluster"][pos]]

    def values(self) -> np.ndarray:
        """Every row, decoded, in id order."""
        return self.rows(np.arange(len(self.ids)))

    def save(self, out: Path, name: str) -> dict:
        """Write ``name.ids.npy`` and the form's arrays; returns {file: entry (bytes, crc32)}."""
        arrays = {"ids": self.ids, **self.arrays}
        return {f"{name}.{k}.npy": write_array(Path(out) / f"{name}.{k}.npy", a) for k, a in arrays.items()}

    @staticmethod
    def load(where: Path, name: str, form: str, width: int, entries: dict) -> "SnapshotTable":
        """The table ``save`` wrote, each file verified against its entry before it is read."""
        if form not in FORMS:
            raise ValueError(f"{where}: table {name!r} has form {form!r}, not one of {', '.join(FORMS)}")
        arrays = {}
        for key in ("ids", *ARRAYS[form]):
            file = f"{name}.{key}.npy"
            if file not in entries:
                raise ValueError(f"{where}: the manifest lists no {file}")
            verify_file(Path(where) / file, entries[file])
            arrays[key] = load_array(Path(where) / file, mmap=False)
        ids = arrays.pop("ids")
        return SnapshotTable(form, width, ids, arrays)

    def updated(self, ids: np.ndarray, values: np.ndarray, deleted: np.ndarray) -> "SnapshotTable":
        """A new table: this one without ``deleted`` ids, with ``ids`` set to ``values`` (new or
        changed rows, float32), in this table's form (saec: refused, its clusters are fixed)."""
        if self.form == "saec":
            raise ValueError(SAEC_FIXED)
        return self.merged(SnapshotTable.build(ids, values, self.form), deleted)

    def merged(self, new: "SnapshotTable", deleted: np.ndarray) -> "SnapshotTable":
        """A new table: this one without ``deleted`` ids, with the rows of ``new`` (this form's) set."""
        changed = np.concatenate([deleted, new.ids]).astype(np.int64)
        keep = np.ones(len(self.ids), np.bool_)
        if len(self.ids):  # the rows a delta replaces or deletes: by binary search, O(changes log n)
            pos = np.minimum(np.searchsorted(self.ids, changed), len(self.ids) - 1)
            keep[pos[self.ids[pos] == changed]] = False
        at = np.searchsorted(self.ids[keep], new.ids)  # the new rows slot into the sorted rest: no sort of n rows
        arrays = {k: merge(a, keep, new.arrays[k], at) for k, a in self.arrays.items()}  # one pass each, off the GIL
        return SnapshotTable(self.form, self.width, merge(self.ids, keep, new.ids, at), arrays)

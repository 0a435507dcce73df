"""Parquet input in the Criteo layout, and ``convert`` from TSV, for data read many times.

Columns: ``label`` (int8), ``I1..I13`` (int64, null = missing), ``C1..C26`` (uint32, null =
missing). Reading yields the same batches as the TSV reader, without parsing text.
"""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cardinal.data.criteo import CAT_LIMIT, DENSE, INT_LIMIT, SPARSE, CriteoReader, LayoutReader, Rows
from cardinal.data.shares import bounds


def convert(tsv_paths: list[str | Path], out: str | Path, strict: bool = False, progress=None) -> dict:
    """Write TSV files as one Parquet file; returns {"rows", "bad_lines"}."""
    reader = CriteoReader(tsv_paths, batch_size=1, strict=strict)
    schema = pa.schema([("label", pa.int8())] + [(n, pa.int64()) for n in DENSE] + [(n, pa.uint32()) for n in SPARSE])
    rows = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for chunk in reader.chunks():
            arrays = [pa.array(chunk.labels.astype(np.int8))]
            arrays += [pa.array(chunk.ints[:, j], mask=~chunk.int_ok[:, j]) for j in range(len(DENSE))]
            arrays += [pa.array(chunk.cats[:, j].astype(np.uint32), mask=~chunk.cat_ok[:, j]) for j in range(len(SPARSE))]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
            rows += len(chunk)
            if progress:
                progress(len(chunk))
    if rows == 0:
        Path(out).unlink(missing_ok=True)
        raise ValueError(f"no good rows in {', '.join(map(str, tsv_paths))} ({reader.bad_lines} bad lines; "
                         f"first: {'; '.join(reader.bad_examples[:3]) or 'none'})")
    return {"rows": rows, "bad_lines": reader.bad_lines, "bad_examples": reader.bad_examples}


class ParquetReader(LayoutReader):
    """Yields, of every global batch of ``batch_size`` rows, the ``share=(rank, world)`` worker's
    rows as a ``Batch``, from Parquet files in the layout ``convert`` writes (``shares``: rows
    are counted over the files in order, a batch may span files, a bad row is dropped from its
    batch, and a share that is empty or all bad yields an empty Batch). Only the share's row
    slices are converted; the files' row counts (metadata) give the last batch's length.

    Files written by other tools are checked as the TSV reader checks text: every column must
    be there with a numeric type (else a ValueError naming the file and the column), and a row
    whose label is not 0/1, whose integer is not finite, whole and below 10**18, or whose
    categorical value is outside [0, 2**32) is bad (skipped and counted, or stops the run).
    """

    def pieces(self) -> Iterator[tuple[Rows, np.ndarray, int]]:
        """The share's good rows of each record batch of each file, and the global row of each."""
        files = []
        for path in self.paths:
            try:
                file = pq.ParquetFile(path)
            except (pa.ArrowException, OSError) as e:
                raise ValueError(f"{path}: not a readable Parquet file ({e})") from e
            _check_schema(path, file.schema_arrow)
            files.append((path, file))
        total, size = sum(file.metadata.num_rows for _, file in files), self.batch_size
        g = 0  # global index of the record's first row
        for path, file in files:
            file_start = g
            for record in file.iter_batches(batch_size=size, columns=COLUMNS):
                m = record.num_rows
                parts, lines = [], []
                for b in range(g // size, (g + m + size - 1) // size):
                    lo, hi = bounds(min(size, total - b * size), self.share)
                    a, e = max(b * size + lo, g), min(b * size + hi, g + m)
                    if a < e:
                        rows, where, kept = _rows(record.slice(a - g, e - a), path, a - file_start)
                        self.bad.add(where, e - a)
                        parts.append(rows)
                        lines.append(a + kept)
                g += m
                if not parts:
                    yield Rows.empty(), np.empty(0, np.int64), g
                else:
                    yield (parts[0], lines[0], g) if len(parts) == 1 else (Rows.concat(parts), np.concatenate(lines), g)

COLUMNS = ["label", *DENSE, *SPARSE]


def _check_schema(path: Path, schema: pa.Schema) -> None:
    for name in COLUMNS:
        if schema.get_field_index(name) < 0:
            raise ValueError(f"{path}: no column {name!r}; the Criteo layout has label, I1..I13, C1..C26 "
                             f"(write it with `cardinal convert`)")
        t = schema.field(name).type
        if name in SPARSE:
            ok, kind = pa.types.is_integer(t), "integers"
        else:
            ok, kind = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t), "numbers"
        if not ok:
            raise ValueError(f"{path}: column {name!r} holds {t}; it must hold {kind}")


def _values(record: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) of one column; null values read as 0."""
    col = record.column(name)
    return col.fill_null(0).to_numpy(zero_copy_only=False), col.is_valid().to_numpy(zero_copy_only=False)


def _rows(record: pa.RecordBatch, path: Path, first: int) -> tuple[Rows, list[str], np.ndarray]:
    """The good rows of ``record``, ``file:row: reason`` of each bad one (rows count from 1), and
    the index in ``record`` of each good row."""
    n = record.num_rows
    reason = np.full(n, None, object)

    def mark(bad: np.ndarray, text: str, values: np.ndarray) -> None:
        for i in np.flatnonzero(bad & (reason == None)):  # noqa: E711 (elementwise)
            value = values[i]
            reason[i] = f"{text} ({value.item() if isinstance(value, np.generic) else value!r})"

    label, present = _values(record, "label")
    mark(~present | ~((label == 0) | (label == 1)), "bad label", np.where(present, label, None))
    ints, int_ok = np.zeros((n, len(DENSE)), np.int64), np.zeros((n, len(DENSE)), np.bool_)
    for j, name in enumerate(DENSE):
        v, present = _values(record, name)
        good = (v > -INT_LIMIT) & (v < INT_LIMIT) if v.dtype.kind in "iub" else \
            np.isfinite(v) & (np.abs(np.nan_to_num(v)) < INT_LIMIT) & (np.nan_to_num(v) == np.round(np.nan_to_num(v)))
        mark(present & ~good, f"bad integer {name}", v)
        int_ok[:, j] = present & good
        ints[:, j] = np.where(int_ok[:, j], v, 0).astype(np.int64)
    cats, cat_ok = np.zeros((n, len(SPARSE)), np.int64), np.zeros((n, len(SPARSE)), np.bool_)
    for j, name in enumerate(SPARSE):
        v, present = _values(record, name)
        good = (v >= 0) & (v < CAT_LIMIT) if v.dtype.kind == "i" else v < CAT_LIMIT
        mark(present & ~good, f"categorical {name} outside [0, 2**32)", v)
        cat_ok[:, j] = present & good
        cats[:, j] = np.where(cat_ok[:, j], v, 0).astype(np.int64)
    keep = reason == None  # noqa: E711
    where = [f"{path}:{first + int(i) + 1}: {reason[i]}" for i in np.flatnonzero(~keep)]
    rows = Rows(label[keep].astype(np.float32), ints[keep], int_ok[keep], cats[keep], cat_ok[keep])
    return rows, where, np.flatnonzero(keep)

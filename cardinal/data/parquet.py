"""Parquet input in the Criteo layout, and ``convert`` from TSV, for data read many times.

Columns: ``label`` (int8), ``I1..I13`` (int64, null = missing), ``C1..C26`` (uint32, null =
missing). Reading yields the same batches as the TSV reader, without parsing text.
"""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cardinal.data.batch import Batch
from cardinal.data.criteo import DENSE, SPARSE, CriteoReader, Rows


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
    return {"rows": rows, "bad_lines": reader.bad_lines, "bad_examples": reader.bad_examples}


class ParquetReader:
    """Yields ``Batch``es of ``batch_size`` rows from Parquet files written by ``convert``."""

    dense_fields, sparse_fields = DENSE, SPARSE

    def __init__(self, paths: list[str | Path], batch_size: int):
        self.paths = [Path(p) for p in paths]
        for p in self.paths:
            if not p.is_file():
                raise ValueError(f"data file not found: {p}")
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[Batch]:
        for path in self.paths:
            for record in pq.ParquetFile(path).iter_batches(batch_size=self.batch_size):
                yield _rows(record).to_batch()


def _rows(record: pa.RecordBatch) -> Rows:
    def column(name, dtype):
        col = record.column(name)
        return col.fill_null(0).to_numpy().astype(dtype), col.is_valid().to_numpy(zero_copy_only=False)

    ints, int_ok = zip(*(column(n, np.int64) for n in DENSE))
    cats, cat_ok = zip(*(column(n, np.int64) for n in SPARSE))
    labels = record.column("label").to_numpy().astype(np.float32)
    return Rows(labels, np.stack(ints, 1), np.stack(int_ok, 1), np.stack(cats, 1), np.stack(cat_ok, 1))

"""What the planner knows of each table: rows, bytes, and how many ids a step asks for.

From a sample of the training data (``from_sample``): the first ``rows`` rows, read by the
run's own reader (``PlanInputs.readers``), each field's ids folded as training folds them (``hash_buckets``). A
table's ids a step is the mean of its distinct ids per global batch (what a pull and a push
carry after de-duplication). Its rows over the whole data follow Heaps' law, the distinct
ids of a Zipf-like stream growing as n^b: b is fitted from the sample's first half and the
whole, and the count extrapolated to the data's rows.

From a previous run (``from_run``): its newest checkpoint's rows per table, exact; the ids a
step still come from a sample (a checkpoint does not record access).
"""

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cardinal.checkpoint.layout import latest
from cardinal.checkpoint.reader import Reader
from cardinal.embedding import formats
from cardinal.embedding.hashing import fold
from cardinal.embedding.table import stored_width
from cardinal.optim import make_optimizer
from cardinal.planner.inputs import PlanInputs

ROW_OVERHEAD = 32  # bytes a row takes beside its words: id, count, last step, index slot


@dataclass(frozen=True)
class TableStats:
    name: str
    rows: int             # rows the table will hold
    width: int            # values a row (embedding dim, + 1 for a wide part's weight)
    words: int            # float32 words a stored row takes (values and optimizer state)
    ids_per_step: float   # distinct ids a global batch pulls (and pushes)
    state_per_column: int = 1  # optimizer words that scale with the row's width (Adagrad: 1)
    storage: str = "fp32"      # the row format (compression.storage): words its values take

    def row_bytes(self, width: int | None = None) -> int:
        """Bytes a stored row (or a piece of ``width`` of its columns) takes: the piece's encoded
        values (``formats``: fp16 packs two a word, int8 four and a scale), its optimizer state."""
        if width is None:
            return 4 * self.words + ROW_OVERHEAD
        values = formats.get(self.storage).value_words
        fixed = self.words - values(self.width) - self.width * self.state_per_column  # state words of any width
        return 4 * (values(width) + width * self.state_per_column + fixed) + ROW_OVERHEAD

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes()


def from_sample(inputs: PlanInputs, rows: int = 200_000, progress: bool = False) -> list[TableStats]:
    """Each table's stats from the first ``rows`` training rows of the run's data."""
    train, _, info = inputs.readers(progress=progress)
    seen = _table_ids(inputs)
    per_batch = {t: [] for t in seen}
    distinct = {t: [] for t in seen}  # arrays of ids, folded per table
    read, half = 0, {}
    for batch in train:
        for table, ids in _batch_ids(inputs, batch).items():
            per_batch[table].append(len(np.unique(ids)))
            distinct[table].append(ids)
        read += len(batch.labels)
        if not half and read >= rows // 2:
            half = {t: (read, len(np.unique(np.concatenate(v)))) for t, v in distinct.items()}
        if read >= rows:
            break
    if hasattr(train, "close"):
        train.close()
    total_rows = (info.get("train_steps") or info.get("train_steps_estimate") or 0) * inputs.batch_size
    out = []
    storages = _storages(inputs)
    for table, (width, words) in _widths(inputs).items():
        d = len(np.unique(np.concatenate(distinct[table]))) if distinct[table] else 0
        n_half, d_half = half.get(table, (read, d))
        estimate = heaps(d_half, n_half, d, read, max(total_rows, read))
        if inputs.hash_buckets:
            estimate = min(estimate, inputs.hash_buckets)
        ids_per_step = float(np.mean(per_batch[table])) if per_batch[table] else 0.0
        out.append(TableStats(table, estimate, width, words, ids_per_step, _state_per_column(inputs), storages[table]))
    return out


def from_run(run_dir, inputs: PlanInputs, rows: int = 200_000) -> list[TableStats]:
    """Rows per table from ``run_dir``'s newest checkpoint (every piece's rows, any plan; a delta
    counted with its chain: a delta's manifests count only the rows touched since its base), ids a
    step from a sample of the recipe's data."""
    found = latest(Path(run_dir) / "checkpoints")
    if found is None:
        raise ValueError(f"{run_dir} has no committed checkpoint to read table sizes from")
    newest = Reader(found).chain[-1]  # every link verified first
    counted: dict[str, int] = {}
    for table in _widths(inputs):
        counted[table] = newest.row_count(table)
        if counted[table] is None:
            raise ValueError(f"{found} holds no table {table!r} (it has {sorted(newest.tables)}): the "
                             "recipe's tables must be the run's (the same embedding.shared, dims, model)")
    sampled = from_sample(inputs, rows)
    return [replace(s, rows=counted[s.name]) for s in sampled]


def heaps(d_half: int, n_half: int, d: int, n: int, total: int) -> int:
    """Distinct ids in ``total`` rows, from ``d_half`` in the first ``n_half`` and ``d`` in ``n``:
    Heaps' law d ~ n^b, b fitted from the two points (in [0, 1])."""
    if d == 0 or total <= n:
        return d
    if n_half >= n or d_half <= 0:
        return d
    b = min(1.0, max(0.0, math.log(d / d_half) / math.log(n / n_half)))
    return int(round(d * (total / n) ** b))


def _widths(inputs: PlanInputs) -> dict[str, tuple[int, int]]:
    """table -> (values a row, float32 words a stored row), from the run's store config."""
    config = inputs.store
    optimizer = make_optimizer(config.optimizer)
    return {t.name: (t.dim, stored_width(t, optimizer)) for t in config.tables}


def _storages(inputs: PlanInputs) -> dict[str, str]:
    """table -> its row format (compression.storage, compression.table_storage)."""
    return {t.name: t.storage for t in inputs.store.tables}


def _state_per_column(inputs: PlanInputs) -> int:
    o = make_optimizer(dict(inputs.store.optimizer))
    return o.state_width(2) - o.state_width(1)


def _table_ids(inputs: PlanInputs) -> dict[str, list[str]]:
    """table -> the fields whose ids it holds (a baseline twin ``lr_X`` the same as X)."""
    return inputs.fields


def _batch_ids(inputs: PlanInputs, batch) -> dict[str, np.ndarray]:
    out = {}
    for table, fields in _table_ids(inputs).items():
        ids = np.concatenate([batch.sparse[f].values for f in fields])
        if inputs.hash_buckets:
            ids = ids.copy()
            fold(ids, inputs.hash_buckets, ids)
        out[table] = ids
    return out

"""Loading a table whose columns were saved split otherwise (``sharding/plan.py``: column pieces).

A portable row of a piece of ``w`` columns is its ``w`` values, then the optimizer's state:
``per_dim`` blocks of ``w`` (Adagrad's accumulators, Adam's moments, FTRL's z and n), then
``per_row`` words (row-wise Adagrad's accumulator, Adam's step count). A new piece [lo, hi)
takes each value and each per-column word from the saved piece holding that column, and each
per-row word as the mean of the saved pieces' words weighted by the columns each gives, summed
in float64 and rounded once: sum(word * columns) / width (equal words, such as Adam's step
counts, join to themselves exactly; exact for row-wise Adagrad's mean squared gradient when the
pieces were one row). An id is kept where every saved piece it draws on holds it (every piece
evicts by time to live alike, and stores with a memory budget refuse column pieces, whose
evictions would differ). The piece's rows for this shard are read whole: a re-split table must
fit in memory.
"""

import numpy as np

from cardinal.checkpoint.parts import relay
from cardinal.embedding.storage import Columns


def layout(optimizer) -> tuple[int, int]:
    """(per_dim, per_row) words of the optimizer's state: state_width(w) = per_dim * w + per_row."""
    per_dim = optimizer.state_width(2) - optimizer.state_width(1)
    return per_dim, optimizer.state_width(1) - per_dim


def check_cuttable(where: str, table: str, saved: dict, store_table) -> None:
    """Rows can be cut by other columns only in the plain layout: fp32 values of whole rows."""
    kinds = {saved.get("storage", "fp32"), store_table.format.name}
    if kinds != {"fp32"} or saved.get("chunks", 1) != 1 or store_table.config.chunks != 1:
        raise ValueError(f"{where}: table {table!r} was saved split into other columns than the sharding plan's; "
                         "its rows can be cut anew only from fp32 rows without chunks (it stores "
                         f"{saved.get('storage', 'fp32')}): load it into a plan with its saved column split")


def cut(step_path, info: dict, plan, shard: int, table, saved_rows):
    """Yields one (where, ``Columns``) block: the rows of the store's table ``table`` (a piece by
    ``plan``) for ``shard``, joined from the saved pieces by id and cut to its columns.
    ``saved_rows(piece)`` yields a saved piece's verified blocks of the rows of ``shard``, and a
    ``Need`` for a part on another server's disk, passed on (``parts.relay``)."""
    logical, piece = plan.locate(table.config.name)
    saved_pieces = info["plan"].pieces(logical)
    entries = {m["shard"]: m for m in info["manifests"].values()}
    full = saved_pieces[-1].columns[1] if saved_pieces[-1].columns else \
        next(m["tables"][logical]["dim"] for m in entries.values() if logical in m["tables"])
    lo, hi = piece.columns or (0, table.dim)
    per_dim, per_row = layout(table.optimizer)
    w = hi - lo
    parts, where = [], step_path
    for p in saved_pieces:
        plo, phi = p.columns or (0, full)
        if phi <= lo or plo >= hi:
            continue
        blocks = []
        yield from relay(saved_rows(p), lambda at, rows: blocks.append((at, rows)))
        if blocks:
            where, blocks = blocks[-1][0], [rows for _, rows in blocks]
        else:  # a piece saved with no rows: nothing to join
            yield where, Columns(np.zeros(0, np.int64), np.zeros((0, w * (1 + per_dim) + per_row), np.float32),
                                 np.zeros(0, np.uint32), np.zeros(0, np.uint32))
            return
        cols = Columns(*(np.concatenate([getattr(b, c) for b in blocks]) for c in Columns._fields))
        order = np.argsort(cols.ids, kind="stable")
        parts.append((plo, phi, Columns(*(c[order] for c in cols))))
    ids = parts[0][2].ids
    for _, _, cols in parts[1:]:
        ids = np.intersect1d(ids, cols.ids, assume_unique=True)
    data = np.zeros((len(ids), w * (1 + per_dim) + per_row), np.float32)
    words = np.zeros((len(ids), per_row), np.float64)  # sum of word x columns: exact for equal words
    count = np.zeros(len(ids), np.uint32)
    last = np.zeros(len(ids), np.uint32)
    for plo, phi, cols in parts:
        at = np.searchsorted(cols.ids, ids)
        a, b, pw = max(lo, plo), min(hi, phi), phi - plo
        for k in range(1 + per_dim):  # the values, then each per-column block of state
            data[:, k * w + a - lo:k * w + b - lo] = cols.data[at, k * pw + a - plo:k * pw + b - plo]
        words += cols.data[at, pw * (1 + per_dim):pw * (1 + per_dim) + per_row].astype(np.float64) * (b - a)
        np.maximum(count, cols.count[at], out=count)
        np.maximum(last, cols.last_step[at], out=last)
    data[:, w * (1 + per_dim):] = (words / w).astype(np.float32)  # one rounding: Adam's step counts stay whole
    yield where, Columns(ids, data, count, last)

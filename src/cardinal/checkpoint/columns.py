"""Loading a table whose columns were saved split otherwise (``sharding/plan.py``: column pieces).

A portable row of a piece of ``w`` columns is its ``w`` values, then the optimizer's state:
``per_dim`` blocks of ``w`` (Adagrad's accumulators, Adam's moments, FTRL's z and n), then
``per_row`` words (row-wise Adagrad's accumulator, Adam's step count). A new piece [lo, hi)
takes each value and each per-column word from the saved piece holding that column, and each
per-row word as the mean of the saved pieces' words weighted by the columns each gives, summed
in float64 and rounded once: sum(word * columns) / width (equal words, such as Adam's step
counts, join to themselves exactly; exact for row-wise Adagrad's mean squared gradient when the
pieces were one row). A wide part's weight with state of its own (row-wise Adagrad, ``wide`` in a
piece's optimizer description) carries its own words, ``per_wide`` of them: a column's state is
its own words if it has them, else its piece's per-row words, and the new piece's per-row words
are the mean over its columns without words of their own. An id is kept where every saved piece it draws on holds it (every piece
evicts by time to live alike, and stores with a memory budget refuse column pieces, whose
evictions would differ). The piece's rows for this shard are read whole: a re-split table must
fit in memory.
"""

import numpy as np

from cardinal.checkpoint.parts import relay
from cardinal.embedding.storage import Columns


def layout(optimizer) -> tuple[int, int, int]:
    """(per_dim, per_row, per_wide) words of the optimizer's state: state_width(w) of a piece with
    ``wide`` columns of their own = per_dim * w + per_row + per_wide * wide."""
    plain = optimizer.with_wide(0)
    per_dim = plain.state_width(2) - plain.state_width(1)
    per_wide = plain.with_wide(1).state_width(2) - plain.state_width(2)
    assert per_wide in (0, plain.state_width(1) - per_dim), "a wide column's own words are a row's"
    return per_dim, plain.state_width(1) - per_dim, per_wide


def _saved_wide(info: dict, name: str) -> int:
    """The wide columns of a saved table (piece) with state of their own: 0 in checkpoints from before them."""
    for m in info["manifests"].values():
        if name in m["tables"]:
            return int(m["tables"][name]["optimizer"].get("wide", 0))
    return 0


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
    per_dim, per_row, per_wide = layout(table.optimizer)
    w = hi - lo
    own_lo = hi - (table.optimizer.wide if per_wide else 0)  # [own_lo, hi): the new piece's columns with own words
    tail = per_row + per_wide * (hi - own_lo)
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
            yield where, Columns(np.zeros(0, np.int64), np.zeros((0, w * (1 + per_dim) + tail), np.float32),
                                 np.zeros(0, np.uint32), np.zeros(0, np.uint32))
            return
        cols = Columns(*(np.concatenate([getattr(b, c) for b in blocks]) for c in Columns._fields))
        order = np.argsort(cols.ids, kind="stable")
        parts.append((plo, phi, phi - (_saved_wide(info, p.name(logical)) if per_wide else 0),
                      Columns(*(c[order] for c in cols))))
    ids = parts[0][3].ids
    for *_, cols in parts[1:]:
        ids = np.intersect1d(ids, cols.ids, assume_unique=True)
    data = np.zeros((len(ids), w * (1 + per_dim) + tail), np.float32)
    words = np.zeros((len(ids), per_row), np.float64)  # sum of word x columns: exact for equal words
    count = np.zeros(len(ids), np.uint32)
    last = np.zeros(len(ids), np.uint32)
    own = w * (1 + per_dim) + per_row  # where the new piece's columns' own words start
    for plo, phi, p_own, cols in parts:  # [p_own, phi): the saved piece's columns with own words
        at = np.searchsorted(cols.ids, ids)
        a, b, pw = max(lo, plo), min(hi, phi), phi - plo
        for k in range(1 + per_dim):  # the values, then each per-column block of state
            data[:, k * w + a - lo:k * w + b - lo] = cols.data[at, k * pw + a - plo:k * pw + b - plo]
        start = pw * (1 + per_dim)
        row_words = cols.data[at, start:start + per_row]
        governing = [(a, min(b, p_own), row_words)] + [  # (columns, the words that govern them)
            (c, c + 1, cols.data[at, start + per_row + (c - p_own) * per_wide:][:, :per_wide])
            for c in range(max(a, p_own), b)]
        for c0, c1, held in governing:
            words += held.astype(np.float64) * max(0, min(c1, own_lo) - c0)
            for c in range(max(c0, own_lo), c1):
                data[:, own + (c - own_lo) * per_wide:][:, :per_wide] = held
        np.maximum(count, cols.count[at], out=count)
        np.maximum(last, cols.last_step[at], out=last)
    data[:, w * (1 + per_dim):own] = (words / (own_lo - lo)).astype(np.float32)  # one rounding: Adam's counts stay whole
    yield where, Columns(ids, data, count, last)

"""A wide part's weight (``TableConfig.wide``) across sharding plans, with row-wise Adagrad, whose
accumulator it does not share: the piece holding it keeps its state apart, a piece of it alone is
a row of its own (so cutting it off changes nothing), and a checkpoint re-cut by other columns
takes each column's state from the words that governed it (``checkpoint/columns.py``)."""

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.sharding.plan import ShardingPlan
from test_plan import DIMS, OPTIMIZERS, P, _by_id, assert_same, lookup, stores, train


def config() -> StoreConfig:
    tables = tuple(TableConfig(t, d, seed=k + 1, init_scale=0.5, wide=1) for k, (t, d) in enumerate(DIMS.items()))
    return StoreConfig(tables, OPTIMIZERS["rowwise_adagrad"], {})


PLANS = {  # user 9 columns (8 values and the weight), item 4 (3 and the weight)
    "hash": ShardingPlan(4),
    "cut_off": ShardingPlan(4, {"user": (P(0, 1, columns=(0, 8)), P(2, 3, columns=(8, 9))),
                                "item": (P(3, columns=(0, 3)), P(0, 1, 2, columns=(3, 4)))}),
    "columns": ShardingPlan(4, {"user": (P(0, columns=(0, 3)), P(1, 3, columns=(3, 9))),
                                "item": (P(3, columns=(0, 1)), P(0, 1, 2, 3, columns=(1, 4)))}),
    "columns2": ShardingPlan(4, {"user": (P(3, columns=(0, 5)), P(0, columns=(5, 7)), P(3, columns=(7, 9))),
                                 "item": (P(1, columns=(0, 2)), P(0, columns=(2, 4)))}),
}


def piece_wide(lo: int, hi: int, dim: int) -> int:
    """The wide columns a piece [lo, hi) keeps apart: the weight, unless the piece is the weight alone."""
    return 1 if hi == dim and hi - lo > 1 else 0


def test_the_piece_holding_the_weight_keeps_its_state_apart():
    for name, p in PLANS.items():
        for s in range(4):
            for t in p.shard_config(config(), s).tables:
                logical = t.name.split("-cols")[0]
                lo = t.first_column
                assert t.wide == piece_wide(lo, lo + t.dim, DIMS[logical]), (name, t)


def test_cutting_the_weight_off_trains_bitwise_the_model_of_whole_rows():
    whole = train(connect(config(), 4, plan=PLANS["hash"]))
    cut = train(connect(config(), 4, plan=PLANS["cut_off"]))
    assert len(whole) == len(cut) and all(a.tobytes() == b.tobytes() for a, b in zip(whole, cut))


def governed(saved: dict, saved_plan: ShardingPlan, table: str, lo: int, hi: int):
    """id -> (row, count, last_step) of the piece [lo, hi) from the saved pieces, column by column:
    each column's state is its own word where its piece kept one, else its piece's row word; the new
    row word is the mean over the new piece's columns without a word of their own (float64, rounded
    once), the new weight's word the word that governed it."""
    dim, w = DIMS[table], hi - lo
    own_lo = hi - piece_wide(lo, hi, dim)
    over = []
    for p in saved_plan.pieces(table):
        plo, phi = p.columns or (0, dim)
        if plo < hi and phi > lo:
            over.append((plo, phi, saved[p.name(table)]))
    out = {}
    for i in set.intersection(*(set(rows) for *_, rows in over)):
        values, words, own = np.zeros(w, np.float32), 0.0, np.zeros(hi - own_lo, np.float32)
        count = last = 0
        for plo, phi, rows in over:
            d, c, t = rows[i]
            pw, p_own = phi - plo, phi - piece_wide(plo, phi, dim)
            for col in range(max(lo, plo), min(hi, phi)):
                values[col - lo] = d[col - plo]
                word = d[pw + 1 + col - p_own] if col >= p_own else d[pw]
                if col >= own_lo:
                    own[col - own_lo] = word
                else:
                    words += float(word)
            count, last = max(count, int(c)), max(last, int(t))
        out[i] = (np.concatenate([values, [np.float32(words / (own_lo - lo))], own]), count, last)
    return out


@pytest.mark.parametrize("a, b", [("hash", "columns"), ("columns", "hash"), ("columns", "columns2"),
                                  ("columns2", "cut_off"), ("cut_off", "hash")])
def test_a_checkpoint_re_cut_takes_each_columns_state_from_the_words_that_governed_it(tmp_path, a, b):
    src = connect(config(), 4, plan=PLANS[a])
    train(src, steps=[1, 2])
    saved = {n: _by_id(stores(src), n) for n in PLANS[a].names(DIMS)}
    dst = connect(config(), 4, plan=PLANS[b])
    dst.load(src.save(tmp_path, 2))
    for t in DIMS:
        for p in PLANS[b].pieces(t):
            lo, hi = p.columns or (0, DIMS[t])
            want, got = governed(saved, PLANS[a], t, lo, hi), _by_id(stores(dst), p.name(t))
            assert sorted(want) == sorted(got) and len(got) > 100
            for i, (d, c, last) in want.items():
                assert got[i][0].tobytes() == d.tobytes() and (got[i][1], got[i][2]) == (c, last), (t, p, i)
    assert_same(lookup(dst), lookup(src))


def test_whole_rows_and_rows_with_the_weight_cut_off_load_into_each_other_and_train_on_alike(tmp_path):
    src = connect(config(), 4, plan=PLANS["hash"])
    train(src, steps=[1, 2])
    dst = connect(config(), 4, plan=PLANS["cut_off"])
    dst.load(src.save(tmp_path, 2))
    train(src, steps=[3, 4], seed=9)
    train(dst, steps=[3, 4], seed=9)
    assert_same(lookup(dst), lookup(src))


def test_a_checkpoint_from_before_the_weight_had_its_own_state_is_refused_saying_why(tmp_path):
    old = StoreConfig(tuple(TableConfig(t, d, seed=k + 1) for k, (t, d) in enumerate(DIMS.items())),
                      OPTIMIZERS["rowwise_adagrad"], {})
    src = connect(old, 2)
    train(src, steps=[1])
    dst = connect(config(), 2)
    with pytest.raises(ValueError, match="before a wide part's weight had an accumulator of its own"):
        dst.load(src.save(tmp_path, 1))

"""A push whose ids each have a row and none repeats skips the de-duplication (``table._found``): the same
bits as the path that de-duplicates. A push with a repeated or unknown id among its first ``PROBE`` ids
de-duplicates before its find, as before; one with them later reuses its find's rows: the same bits."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding import table as table_module
from cardinal.embedding.row_kernels import distinct_rows
from cardinal.optim import make_optimizer

DIM = 4


@given(rows=hnp.arrays(np.int64, st.integers(0, 200), elements=st.integers(-2, 150)))
def test_distinct_rows_against_a_set(rows):
    marks = np.zeros(3, np.uint64)  # 192 rows' bits
    want = bool((rows >= 0).all()) and len(set(rows.tolist())) == len(rows)
    assert distinct_rows(rows, marks) == want
    assert not marks.any()  # left as found: the next push starts from zeros


def slow(table: EmbeddingTable) -> EmbeddingTable:
    """The same table, every push de-duplicated by hashing, then its rows found (as with a cold tier)."""
    table._found = lambda ids: None
    return table


def table_bits(table: EmbeddingTable) -> dict:
    rows = table.export()
    return {k: np.ascontiguousarray(v).view(np.uint8).tobytes() for k, v in rows.items()}


@pytest.mark.parametrize("name", ["rowwise_adagrad", "adam", "sgd"])
@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("probe", [64, table_module.PROBE])
def test_a_distinct_push_gives_the_bits_of_a_de_duplicated_one(name, counted, probe, monkeypatch):
    monkeypatch.setattr(table_module, "PROBE", probe)
    rng = np.random.default_rng(5)
    ids = rng.permutation(np.arange(-300, 300, dtype=np.int64) * 104729)
    fast, ref = (EmbeddingTable(TableConfig("t", DIM), make_optimizer({"name": name})) for _ in range(2))
    slow(ref)
    for table in (fast, ref):
        table.pull(ids, step=1)
        table.storage.columns().data[:50] = -0.0  # a -0.0 gradient on a -0.0 value: 0 + g shows in the bits
    for step, at in enumerate([None, None, 10, 200, 20, 300], start=2):
        pick = rng.permutation(ids)[:400]
        if step in (4, 5):  # repeated ids, early or late
            pick = np.insert(pick, at, pick[:3])
        elif step in (6, 7):  # an unknown id, twice, early or late
            pick = np.insert(pick, [at, at + 10], 7 + step)
        grads = rng.normal(size=(len(pick), DIM)).astype(np.float32)
        grads[rng.random(len(pick)) < 0.3] = -0.0
        counts = rng.integers(1, 4, len(pick)).astype(np.int32) if counted else None
        for table in (fast, ref):
            table.push(pick, grads, step=step, counts=counts)
        assert table_bits(fast) == table_bits(ref), step
    fast.check()


def test_a_delta_push_of_distinct_ids_gives_the_bits_of_a_de_duplicated_one():
    ids = np.arange(100, dtype=np.int64) * 31
    fast, ref = (EmbeddingTable(TableConfig("t", DIM), make_optimizer({"name": "sgd"})) for _ in range(2))
    slow(ref)
    deltas = np.random.default_rng(6).normal(size=(100, DIM)).astype(np.float32)
    for table in (fast, ref):
        table.pull(ids, step=1)
        table.push(ids, deltas, step=2, kind="delta")
    assert table_bits(fast) == table_bits(ref)

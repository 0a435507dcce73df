"""A served table with its recent deltas beside it reads what the merged table would, bit for bit."""

import numpy as np
import pytest

from cardinal.serve import overlay
from cardinal.serve.overlay import Overlaid
from cardinal.serve.tables import SnapshotTable


def deltas(rng, ids, n, universe=5_000):
    """``n`` deltas over a table of ``ids``: changed and new rows, and deletions (some of ids never there)."""
    for _ in range(n):
        live = rng.choice(ids, min(len(ids), 40), replace=False)
        changed = np.unique(np.concatenate([live[:25], rng.integers(0, universe, 15)])).astype(np.int64)
        deleted = np.setdiff1d(np.concatenate([live[25:], rng.integers(0, universe, 3)]), changed).astype(np.int64)
        yield changed, rng.normal(size=(len(changed), 4)).astype(np.float32), deleted
        ids = np.setdiff1d(np.union1d(ids, changed), deleted)


@pytest.mark.parametrize("form", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("fold", [0.25, 10.0])  # folds along the way; never folds
def test_an_overlaid_table_reads_as_the_merged_one(form, fold, rng, monkeypatch):
    monkeypatch.setattr(overlay, "FOLD", fold)
    ids = rng.choice(5_000, 300, replace=False).astype(np.int64)
    merged = SnapshotTable.build(ids, rng.normal(size=(300, 4)).astype(np.float32), form)
    served, folds = Overlaid.over(merged), 0
    probe = np.arange(5_000, dtype=np.int64)
    for changed, values, deleted in deltas(rng, ids, 30):
        merged = merged.updated(changed, values, deleted)
        served = (served if isinstance(served, Overlaid) else Overlaid.over(served)).updated(changed, values, deleted)
        folds += isinstance(served, SnapshotTable)
        got, want = served.lookup(probe), merged.lookup(probe)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        assert len(served) == len(merged)
    assert (folds > 0) == (fold < 1)


def test_a_delta_beside_the_base_leaves_the_base_untouched(rng):
    ids = np.arange(0, 1000, 2, dtype=np.int64)
    base = SnapshotTable.build(ids, np.ones((len(ids), 4), np.float32))
    t = Overlaid.over(base).updated(np.array([1, 2], np.int64), np.full((2, 4), 7, np.float32),
                                    np.array([4, 5], np.int64))
    assert isinstance(t, Overlaid) and t.base is base and list(t.gone) == [4]  # 5 was never there
    rows, known = t.lookup(np.array([0, 1, 2, 4, 5], np.int64))
    assert known.tolist() == [True, True, True, False, False]
    assert rows[:, 0].tolist() == [1, 7, 7, 0, 0]
    assert len(t) == len(ids) + 1 - 1 and base.lookup(np.array([2, 4], np.int64))[0][:, 0].tolist() == [1, 1]


def test_a_saec_table_is_refused_before_anything_is_built(rng):
    from cardinal.compression.clustered import ClusteredTable

    ids = np.arange(10, dtype=np.int64)
    clusters = ClusteredTable(ids, np.zeros(10, np.int32), np.zeros((1, 3), np.float32))
    t = SnapshotTable.build(ids, np.zeros((10, 3), np.float32), "saec", clusters=clusters)
    with pytest.raises(ValueError, match="clusters are fixed"):
        Overlaid.over(t)

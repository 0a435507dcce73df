"""Two collections over the same batches share one de-duplication (``worker/layouts.py``), as the
`lr` baseline's shares the model's: the second computes nothing, and both pool and train exactly
as they do alone, on the CPU path and staged on a device."""

import numpy as np
import pytest
import torch

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.worker import EmbeddingCollection
from cardinal.worker.device import DeviceRows
from cardinal.worker.layouts import Layouts
from helpers.bags import bag

CONFIG = StoreConfig((TableConfig("a", 4, init_scale=0.5), TableConfig("b", 3, init_scale=0.5),
                      TableConfig("lr_a", 1, init_scale=0.5), TableConfig("lr_b", 1, init_scale=0.5)),
                     {"name": "adagrad", "lr": 0.5})
MODEL = {"x": "a", "y": "a", "z": "b"}
TWIN = {"x": "lr_a", "y": "lr_a", "z": "lr_b"}
BATCHES = [{"x": bag([[1, 2], [], [2, 2, 3]]), "y": bag([[3], [4], []]), "z": bag([[9], [9], [10]])},
           {"x": bag([[2], [5], [1, 1]]), "y": bag([[], [4], [6]]), "z": bag([[10], [11], [9]])},
           {"x": bag([[7], [2], [1]]), "y": bag([[3], [4], [8]]), "z": bag([[12], [9], [9]])}]
IDS = np.arange(0, 13, dtype=np.int64)


def train(layouts: Layouts | None, staged: bool):
    """Three async steps of both collections (the next batch pulled ahead): pooled outputs, rows after."""
    client = connect(CONFIG, 2)
    staging = DeviceRows(torch.device("cpu"), staged=True) if staged else None
    model, twin = (EmbeddingCollection(client, f, "sum", staging=staging, layouts=layouts) for f in (MODEL, TWIN))
    outs = []
    for k, sparse in enumerate(BATCHES):
        model.step = twin.step = k
        pooled = {**model(sparse), **{f"lr_{f}": v for f, v in twin(sparse).items()}}
        if k + 1 < len(BATCHES):
            model.prefetch(BATCHES[k + 1], k + 1)
            twin.prefetch(BATCHES[k + 1], k + 1)
        weights = {f: torch.arange(v.numel(), dtype=torch.float32).view(v.shape) for f, v in pooled.items()}
        sum((weights[f] * v).sum() for f, v in pooled.items()).backward()
        model.stage_ahead()
        twin.stage_ahead()
        outs.append({f: v.detach().clone() for f, v in pooled.items()})
    model.flush()
    twin.flush()
    return outs, {t: client.pull(t, IDS, create=False).wait() for t in ("a", "b", "lr_a", "lr_b")}, model, twin


@pytest.mark.parametrize("staged", [False, True], ids=["cpu", "staged"])
def test_the_second_collection_reuses_the_first_ones_dedup_and_trains_the_same_bits(staged):
    alone_outs, alone_rows, _, alone_twin = train(None, staged)
    layouts = Layouts()
    outs, rows, model, twin = train(layouts, staged)
    assert layouts.hits == 2 * len(BATCHES)  # tables a and b of every batch, computed once
    assert twin.timings["dedup"] == 0 and alone_twin.timings["dedup"] > 0
    for o, a in zip(outs, alone_outs):
        assert o.keys() == a.keys() and all(torch.equal(o[f], a[f]) for f in o)
    for t in rows:
        np.testing.assert_array_equal(rows[t], alone_rows[t])


def test_a_layout_is_shared_only_for_the_same_fields_and_buckets_and_the_newest_batches():
    layouts, timings = Layouts(keep=2), {"dedup": 0.0}
    first = layouts.get(BATCHES[0], ["x", "y"], 0, timings)
    assert layouts.get(BATCHES[0], ["x", "y"], 0, timings) is first and layouts.hits == 1
    np.testing.assert_array_equal(first[0], [1, 2, 3, 4])  # unique ids of x then y, first-occurrence order
    np.testing.assert_array_equal(first[0][first[1]], [1, 2, 2, 2, 3, 3, 4])
    np.testing.assert_array_equal(first[2], [0, 2, 2, 5, 6, 7, 7])  # x's 3 bags, then y's
    assert layouts.get(BATCHES[0], ["y", "x"], 0, timings) is not first  # another order, another layout
    assert layouts.get(BATCHES[0], ["x", "y"], 5, timings) is not first  # folded into 5 buckets
    layouts.get(BATCHES[1], ["x", "y"], 0, timings)
    layouts.get(BATCHES[2], ["x", "y"], 0, timings)  # batch 0 falls out
    assert layouts.get(BATCHES[0], ["x", "y"], 0, timings) is not first and layouts.hits == 1
    with pytest.raises(ValueError, match="keep"):
        Layouts(keep=0)

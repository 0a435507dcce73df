"""CowClip per-id gradient clipping (worker/clip.py): against a row-by-row reference, in the push
path of EmbeddingCollection with the batch's counts and pulled rows, off by default."""

import math

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.recipe import load
from cardinal.worker import EmbeddingCollection
from cardinal.worker.clip import CowClip
from helpers.bags import bag

CONFIG = StoreConfig((TableConfig("a", 4, init_scale=0.5),), {"name": "sgd", "lr": 1.0})


def reference(grads, rows, counts, ratio, floor):
    """From the paper's formula, one id at a time, in float64."""
    out = []
    for g, w, c in zip(grads.astype(np.float64), rows.astype(np.float64), counts):
        bound = c * max(ratio * math.sqrt(w @ w), floor)
        norm = math.sqrt(g @ g)
        out.append(g * (bound / norm) if norm > bound else g)
    return np.array(out)


@pytest.mark.parametrize("ratio,floor", [(1.0, 1e-5), (0.1, 0.05), (2.0, 0.0)])
def test_cowclip_matches_reference(ratio, floor, rng):
    n, width = 200, 5
    rows = (rng.standard_normal((n, width)) * rng.uniform(0, 1, (n, 1))).astype(np.float32)
    rows[:5] = 0  # fresh rows: the floor decides
    grads = (rng.standard_normal((n, width)) * rng.uniform(0, 4 * ratio, (n, 1))).astype(np.float32)
    counts = rng.integers(1, 6, n)
    got = CowClip(ratio, floor)(grads, rows, counts)
    want = reference(grads, rows, counts, ratio, floor)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-12)
    clipped = np.linalg.norm(grads, axis=1) > np.linalg.norm(want, axis=1) * (1 + 1e-5)
    assert 20 < clipped.sum() < n - 20  # both branches taken
    assert got[~clipped].tobytes() == grads[~clipped].tobytes()  # an id within its bound keeps its bits


SPARSE = {"x": bag([[1, 2], [], [2, 2, 3], [7]]), "y": bag([[3], [4], [], [1]])}


def pushed(clip):
    """(ids, grads) the collection pushes for one backward, and the rows it pulled."""
    client = connect(CONFIG, 2)
    emb = EmbeddingCollection(client, {"x": "a", "y": "a"}, "sum", clip=clip)
    seen = []
    push = emb.source.push
    emb.source.push = lambda table, ids, grads, step: (seen.append((ids.copy(), grads.copy())), push(
        table, ids, grads, step=step))[1]
    out = emb(SPARSE)
    every = np.unique(np.concatenate([SPARSE["x"].values, SPARSE["y"].values]))
    before = dict(zip(every.tolist(), client.pull("a", every, create=False).wait()))  # the rows pulled, untrained
    weights = {"x": 3.0, "y": -20.0}
    sum(weights[f] * (out[f] ** 2).sum() for f in out).backward()
    emb.flush()
    ((ids, grads),) = seen
    return ids, grads, np.stack([before[i] for i in ids.tolist()])


def test_collection_clips_each_id_by_its_uses_and_pulled_row():
    ids, raw, rows = pushed(None)
    ids_c, clipped, rows_c = pushed(CowClip(0.5, 1e-3))
    assert ids.tolist() == ids_c.tolist()
    assert rows_c.tobytes() == rows.tobytes()  # the same pulled rows
    values = np.concatenate([SPARSE["x"].values, SPARSE["y"].values])
    counts = np.array([(values == i).sum() for i in ids])  # id 2: 3 uses, id 1 and 3: 2
    np.testing.assert_allclose(clipped, reference(raw, rows, counts, 0.5, 1e-3), rtol=1e-5, atol=1e-7)
    assert not np.allclose(clipped, raw)


def test_clipping_is_off_by_default():
    ids, raw, _ = pushed(None)
    recipe = load(None, [])
    assert recipe.embedding.clip_ratio == 0 and CowClip.from_config(recipe.embedding) is None
    assert CowClip.from_config(load(None, ["embedding.clip_ratio=1.0"]).embedding) == CowClip(1.0, 1e-5)
    client = connect(CONFIG, 2)
    assert EmbeddingCollection(client, {"x": "a", "y": "a"}, "sum").clip is None


def test_bad_clip_settings_are_named():
    for bad in ("embedding.clip_ratio=-1.0", "embedding.clip_min=-1e-5", "embedding.clip_ratio=inf",
                "embedding.clip_ratio=nan"):
        with pytest.raises(ValueError, match="embedding.clip_ratio and clip_min must be finite and >= 0"):
            load(None, [bad])

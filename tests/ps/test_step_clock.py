"""A request from the future: one push of step 2**32 - 1 from a second client once aged every
row at once, and the next time-to-live sweep deleted 999 of 1,000 trained rows. A shard now
judges each step against its own clock (``ps/server/step_clock.py``)."""

import grpc
import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.limits import store_limits
from cardinal.recipe import load
from cardinal.recipe.eviction import EvictionConfig
from helpers.cluster import Cluster, raw_call
from test_wire_corpus import GRADS, IDS, push

IDS_TRAINED = np.arange(1, 1001, dtype=np.int64)
TTL = StoreConfig((TableConfig("user", 8, seed=1),), {"name": "adagrad", "lr": 0.1},
                  eviction=EvictionConfig(ttl_steps=1000, every=10))


def train(client, steps) -> None:
    rng = np.random.default_rng(0)
    for step in steps:
        rows = client.pull("user", IDS_TRAINED, step=step).wait()
        client.push("user", IDS_TRAINED, rng.normal(size=rows.shape).astype(np.float32), step=step).wait()


def test_a_push_from_the_future_over_grpc_is_refused_and_every_trained_row_survives_the_sweep(tmp_path):
    c = Cluster(TTL, 1, tmp_path)
    try:
        train(c.client, range(1, 6))
        trained = c.client.pull("user", IDS_TRAINED, create=False).wait()
        digest = c.stores[0].stats(digest=True)["tables"]["user"]["digest_parts"]
        with pytest.raises(grpc.RpcError) as err:  # a second client, past every client-side check
            raw_call(c.addresses[0], "Push", push(IDS, GRADS, step=2**32 - 1))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ps.limits.max_step_ahead" in err.value.details()
        assert c.stores[0].stats(digest=True)["tables"]["user"]["digest_parts"] == digest  # nothing changed
        assert c.stores[0].step == 5
        np.testing.assert_array_equal(c.client.pull("user", IDS_TRAINED, create=False).wait(), trained)
        train(c.client, range(6, 21))  # the sweeps at steps 10 and 20
        assert len(c.stores[0].tables["user"]) == 1000 and c.stores[0].tables["user"].evicted == {}
    finally:
        c.stop()


def test_a_step_within_the_window_is_taken_and_moves_the_clock_by_at_most_the_window():
    s = ShardStore(TTL, limits=StoreLimits(max_step_ahead=8))
    ids = np.arange(5, dtype=np.int64)
    s.pull("user", ids, step=8)  # 8 past step 0: taken
    assert s.step == 8
    before = s.stats(digest=True)["tables"]["user"]["digest_parts"]
    for bad in (17, 2**32 - 1):
        with pytest.raises(ValueError, match="ps.limits.max_step_ahead = 8"):
            s.push("user", ids, np.ones((5, 8), np.float32), step=bad)
        with pytest.raises(ValueError, match="ps.limits.max_step_ahead = 8"):
            s.pull("user", np.arange(100, 105, dtype=np.int64), step=bad)
    assert s.stats(digest=True)["tables"]["user"]["digest_parts"] == before and s.step == 8
    s.push("user", ids, np.ones((5, 8), np.float32), step=16)
    s.push("user", ids, np.ones((5, 8), np.float32), step=3)  # older steps are always taken (a slow worker's)
    assert s.step == 16
    s.pull("user", ids, create=False, step=2**32 - 1)  # a lookup changes nothing: nothing to judge


def test_a_loaded_checkpoint_sets_the_clock(tmp_path):
    from cardinal.checkpoint import layout, write

    s = ShardStore(TTL)
    ids = np.arange(5, dtype=np.int64)
    for step in range(1, 41):
        s.push("user", ids, np.ones((5, 8), np.float32), step=step)
    s.save(str(tmp_path), 40)
    write.commit(layout.step_dir(tmp_path, 40), 40, 1)
    fresh = ShardStore(TTL)
    fresh.load(str(layout.step_dir(tmp_path, 40)))
    assert fresh.step == 40
    fresh.push("user", ids, np.ones((5, 8), np.float32), step=41 + 63)  # the window counts from the loaded step


def test_the_window_is_a_recipe_key_and_geo_pushes_fit_in_it(tmp_path):
    assert store_limits(load(None, ["ps.limits.max_step_ahead=200"]).ps).max_step_ahead == 200
    with pytest.raises(ValueError, match="ps.limits.max_step_ahead must be"):
        load(None, ["ps.limits.max_step_ahead=0"])
    with pytest.raises(ValueError, match="raise ps.limits.max_step_ahead"):
        load(None, ['consistency.mode="geo"', "consistency.geo.interval=100"])
    load(None, ['consistency.mode="geo"', "consistency.geo.interval=100", "ps.limits.max_step_ahead=100"])

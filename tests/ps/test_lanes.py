"""Embedded shards on lanes: shard i's requests run on lane i % lanes, in the order sent."""

import threading

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.transport.inprocess import default_lanes
from cardinal.recipe import load

CONFIG = StoreConfig((TableConfig("t", 4, seed=1),), {"name": "adagrad", "lr": 0.1})


def threads_of_each_shard(client) -> list[set[str]]:
    """The names of the threads each shard's pulls ran on, by shard."""
    seen = [set() for _ in client.transport.stores]
    for shard, store in enumerate(client.transport.stores):
        def pull(*args, shard=shard, inner=store.pull, **kwargs):
            seen[shard].add(threading.current_thread().name)
            return inner(*args, **kwargs)
        store.pull = pull
    for step in range(1, 4):
        client.pull("t", np.arange(400, dtype=np.int64), step=step).wait()
    return seen


@pytest.mark.parametrize("lanes", [1, 2, 3, 4])
def test_each_shard_keeps_one_lane_and_the_shards_share_lanes(lanes):
    client = connect(CONFIG, 4, concurrent=True, lanes=lanes)
    seen = threads_of_each_shard(client)
    assert all(len(names) == 1 for names in seen)  # one thread a shard: its requests in the order sent
    assert [names.pop() for names in seen] == [f"cardinal-lane{i % lanes}_0" for i in range(4)]
    client.transport.close()


def test_not_concurrent_runs_on_the_callers_thread():
    client = connect(CONFIG, 4)
    assert threads_of_each_shard(client) == [{threading.current_thread().name}] * 4


def test_default_is_one_lane_per_four_cores_and_at_most_one_a_shard():
    assert [default_lanes(4, cores) for cores in (1, 2, 3, 4, 7, 8, 15, 16, 64)] == [1, 1, 1, 1, 1, 2, 3, 4, 4]
    assert default_lanes(2, 64) == 2


@pytest.mark.parametrize("lanes", [0, 5, -1])
def test_a_lane_count_outside_one_to_the_shards_is_refused(lanes):
    with pytest.raises(ValueError, match="lanes must be 1..4"):
        connect(CONFIG, 4, concurrent=True, lanes=lanes)


@pytest.mark.parametrize("lanes", [-1, 5])
def test_the_recipe_refuses_lanes_outside_zero_to_the_shards(lanes):
    with pytest.raises(ValueError, match="ps.lanes must be 0"):
        load(None, ["ps.shards=4", f"ps.lanes={lanes}"])
    assert load(None, ["ps.shards=4", "ps.lanes=4"]).ps.lanes == 4

"""Embedded shards on lanes: shard i's requests run on lane i % lanes, in the order sent; with one
lane, a request that finds it idle runs on the sender's thread."""

import threading
import time

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.transport.inprocess import default_lanes
from cardinal.ps.transport.lanes import Lane
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
    client = connect(CONFIG, 4, concurrent=True, lanes=lanes, inline=False)
    seen = threads_of_each_shard(client)
    assert all(len(names) == 1 for names in seen)  # one thread a shard: its requests in the order sent
    assert [names.pop() for names in seen] == [f"cardinal-lane{i % lanes}_0" for i in range(4)]
    client.transport.close()


def test_not_concurrent_runs_on_the_callers_thread():
    client = connect(CONFIG, 4)
    assert threads_of_each_shard(client) == [{threading.current_thread().name}] * 4


def test_one_lane_runs_a_request_on_the_senders_thread_when_idle():
    assert threads_of_each_shard(connect(CONFIG, 4, concurrent=True, lanes=1)) == [{"MainThread"}] * 4
    seen = threads_of_each_shard(connect(CONFIG, 4, concurrent=True, lanes=2))  # several lanes overlap: no inline
    assert [names.pop() for names in seen] == [f"cardinal-lane{i % 2}_0" for i in range(4)]


def test_a_request_that_finds_the_lane_busy_waits_on_its_thread_in_order():
    lane, order, started, release = Lane("test-lane", inline=True), [], threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)
        order.append(("slow", threading.current_thread().name))

    def quick(name):
        order.append((name, threading.current_thread().name))
        return name

    sender = threading.Thread(target=lambda: lane.run("slow", slow), name="sender")
    sender.start()
    assert started.wait(10)  # slow runs on the sender's thread, holding the lane
    handles = [lane.run(n, quick, n) for n in ("a", "b")]  # queued behind it, on the lane's thread
    time.sleep(0.05)
    assert order == []
    release.set()
    assert [h.wait(10) for h in handles] == ["a", "b"]
    sender.join(10)
    assert order == [("slow", "sender"), ("a", "test-lane_0"), ("b", "test-lane_0")]
    assert lane.run("c", quick, "c").wait() == "c" and order[-1] == ("c", "MainThread")  # idle again: inline
    lane.close()


def test_an_inline_requests_error_is_raised_at_wait_and_frees_the_lane():
    lane = Lane("test-lane", inline=True)
    handle = lane.run("bad", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        handle.wait()
    assert lane.run("next", lambda: threading.current_thread().name).wait() == "MainThread"
    lane.close()


@pytest.mark.parametrize("inline", [True, False])
def test_close_waits_for_a_request_running_on_its_senders_thread_and_refuses_new_ones(inline):
    lane, started, release, done = Lane("test-lane", inline), threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(10)
        done.append(True)

    sender = threading.Thread(target=lambda: lane.run("slow", slow).wait(10))
    sender.start()
    assert started.wait(10)
    closing = threading.Thread(target=lane.close)
    closing.start()
    time.sleep(0.05)
    assert closing.is_alive() and not done  # close waits for it
    release.set()
    closing.join(10)
    sender.join(10)
    assert done and not closing.is_alive()
    with pytest.raises(RuntimeError, match="test-lane is closed"):
        lane.run("late", lambda: None)


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

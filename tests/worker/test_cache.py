"""The worker cache's parts: hits make no request, lookups read the servers, LRU and LFU evict
in their order, admission after n pulls, the size in bytes, a reset when a worker's cursor
fell out of a shard's update log, cached rows following own gradients with a local optimizer state,
and flush leaves nothing behind."""

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.server.update_log import UpdateLog
from cardinal.ps.transport.requests import Origin
from cardinal.worker.sources import PSSource
from cardinal.worker.sources.cache import CachedSource
from cardinal.worker.sources.cache_slots import META_BYTES, slot_bytes, slots_for

DIM = 4
CONFIG = StoreConfig((TableConfig("a", DIM, init_scale=0.5),), {"name": "sgd", "lr": 0.5})
ONE_ROW = 2 * 4 * DIM + META_BYTES  # a slot: its row, its pending sum, its bookkeeping


class Counting:
    """Counts the pull requests a client sends."""

    def __init__(self, client):
        self.client, self.pulls = client, []
        self.n_shards = client.n_shards

    def pull(self, table, ids, **kw):
        self.pulls.append(ids.copy())
        return self.client.pull(table, ids, **kw)

    def __getattr__(self, name):
        return getattr(self.client, name)


def cache(client=None, rows=16, s=100, **kw):
    client = client or connect(CONFIG, 2)
    return CachedSource(PSSource(client, 4, 20), {"a": DIM}, rows * ONE_ROW, s, CONFIG.optimizer, **kw), client


def ids(*values):
    return np.array(values, np.int64)


def slot(slots, id_):
    return int(slots.lookup(ids(id_))[0])


def cached_ids(src):
    sl = src.slots["a"]
    return sorted(sl.ids[sl.occupied()].tolist())


def test_hits_make_no_request_and_are_the_rows_as_fetched():
    counting = Counting(connect(CONFIG, 2))
    src, _ = cache(counting)
    first = src.pull("a", ids(1, 2, 3), create=True, step=1).wait()
    assert len(counting.pulls) == 1
    again = src.pull("a", ids(3, 1, 2), create=True, step=2).wait()
    assert len(counting.pulls) == 1  # every row a hit: no request at all
    np.testing.assert_array_equal(again, first[[2, 0, 1]])
    mixed = src.pull("a", ids(2, 9, 1), create=True, step=3).wait()
    assert len(counting.pulls) == 2 and counting.pulls[1].tolist() == [9]  # only the miss, in one request
    np.testing.assert_array_equal(mixed[[0, 2]], first[[1, 0]])


def test_any_int64_is_an_id_the_cache_keeps_negative_ones_too():
    """-1 once marked a free slot: a cached -1 was overwritten by the next insert while still mapped."""
    counting = Counting(connect(CONFIG, 2))
    src, _ = cache(counting, rows=4)
    edge = ids(-1, -2**63, 2**63 - 1, 0)
    first = src.pull("a", edge, create=True, step=1).wait()
    src.pull("a", ids(7), create=True, step=2).wait()  # a full cache: one of the four is evicted, not overwritten
    again = src.pull("a", edge, create=True, step=3).wait()
    np.testing.assert_array_equal(again, first)
    assert len(cached_ids(src)) == 4 and len(src.slots["a"]) == 4
    src.slots["a"].clear()
    assert len(src.slots["a"]) == 0 and cached_ids(src) == []


def test_lookups_read_the_servers_and_a_row_lags_by_its_pending_and_pushed_steps():
    src, client = cache(s=2, hold=2)
    one = np.ones((2, DIM), np.float32)
    start = src.pull("a", ids(1, 2), create=True, step=1).wait()
    src.push("a", ids(1, 2), one, step=1)  # pending: 1 step the servers' row lacks; the cached row follows it
    src.settle(None)
    np.testing.assert_array_equal(client.pull("a", ids(1, 2), create=False).wait(), start)  # nothing pushed
    np.testing.assert_allclose(src.pull("a", ids(1, 2), create=False, step=2).wait(), start)  # a lookup: the servers
    np.testing.assert_allclose(src.pull("a", ids(1, 2), create=True, step=2).wait(), start - 0.5, rtol=1e-6)  # a hit
    src.push("a", ids(1, 2), one, step=2)
    np.testing.assert_allclose(src.pull("a", ids(1, 2), create=True, step=3).wait(), start - 1.0, rtol=1e-6)
    src.push("a", ids(1, 2), one, step=3)  # 3 pending > s: pushed, one update with count 3
    src.settle(None)
    expected = start - 0.5 * 3  # sgd: the three summed gradients
    np.testing.assert_allclose(client.pull("a", ids(1, 2), create=False).wait(), expected, rtol=1e-6)
    np.testing.assert_allclose(src.pull("a", ids(1, 2), create=False, step=4).wait(), expected, rtol=1e-6)
    np.testing.assert_allclose(src.pull("a", ids(1, 2), create=True, step=4).wait(), expected, rtol=1e-6)  # 3 > s


def test_a_cached_row_follows_own_gradients_with_a_local_state_kept_across_refreshes():
    """Adagrad: each cached row has its own accumulator on the worker, fresh (initial_accumulator)
    when the row is cached and kept when it is fetched again; the servers' rows are untouched."""
    opt = {"name": "adagrad", "lr": 0.1, "initial_accumulator": 0.5}
    client = connect(StoreConfig((TableConfig("a", DIM, init_scale=0.5),), opt), 1)
    src = CachedSource(PSSource(client, 4, 20), {"a": DIM}, 16 * slot_bytes(DIM, DIM), 1, opt)
    g = np.full((1, DIM), 2.0, np.float32)
    start = src.pull("a", ids(3), create=True, step=1).wait()
    src.push("a", ids(3), g, step=1)  # pushed, and the cached row follows it: 1 behind, still served
    step = lambda acc: np.float32(0.1) * 2.0 / np.sqrt(np.float32(acc))
    np.testing.assert_allclose(src.pull("a", ids(3), create=True, step=2).wait(), start - step(0.5 + 4), rtol=1e-6)
    src.push("a", ids(3), g, step=2)
    src.settle(None)
    fetched = src.pull("a", ids(3), create=True, step=3).wait()  # 2 behind: fetched again
    np.testing.assert_array_equal(fetched, client.pull("a", ids(3), create=False).wait())
    src.push("a", ids(3), g, step=3)
    np.testing.assert_allclose(src.pull("a", ids(3), create=True, step=4).wait(), fetched - step(0.5 + 3 * 4),
                               rtol=1e-6)  # the accumulator saw all three gradients


def test_a_cached_row_with_a_wide_weight_follows_as_its_server_row_does():
    """Row-wise Adagrad with a wide part's weight (``TableConfig.wide``): the worker's state keeps the
    weight's accumulator apart as the servers' does, so a followed row is the servers' row, bit for bit."""
    opt = {"name": "rowwise_adagrad", "lr": 0.1, "initial_accumulator": 1e-3}
    client = connect(StoreConfig((TableConfig("a", DIM, init_scale=0.5, wide=1),), opt), 1)
    src = CachedSource(PSSource(client, 4, 20), {"a": DIM}, 16 * slot_bytes(DIM, 2), 1, opt, wide={"a": 1})
    assert src.slots["a"].state.shape[1] == 2
    src.pull("a", ids(3, 4), create=True, step=1).wait()
    src.push("a", ids(3, 4), np.array([[0.1, 0.2, 0.3, 5.0], [1.0, -1.0, 0.5, 0.01]], np.float32), step=1)
    src.settle(None)
    followed = src.pull("a", ids(3, 4), create=True, step=2).wait()  # 1 behind: served from the cache
    assert followed.tobytes() == client.pull("a", ids(3, 4), create=False).wait().tobytes()


def test_hold_bounds_the_gradients_a_row_keeps_and_staleness_bounds_hold():
    src, client = cache(s=3, hold=1)
    src.pull("a", ids(1), create=True, step=1).wait()
    for step in (1, 2, 3):
        src.push("a", ids(1), np.ones((1, DIM), np.float32), step=step)
        assert src.slots["a"].count.max() == (1 if step == 1 else step % 2)  # pushed once past hold: 1, 0, 1
        src.pull("a", ids(1), create=True, step=step + 1).wait()
    with pytest.raises(ValueError, match="cache.hold = 4 is past cache.staleness = 3"):
        CachedSource(PSSource(client), {"a": DIM}, ONE_ROW, 3, CONFIG.optimizer, hold=4)


@pytest.mark.parametrize("policy,evicted", [("lru", 1), ("lfu", 2)])
def test_a_full_cache_evicts_by_its_policy(policy, evicted):
    src, _ = cache(rows=2, policy=policy)
    for step, pulled in enumerate([(1, 2), (1,), (1,), (2,)], 1):  # 1: used 3 times, last at step 3; 2: twice, at 4
        src.pull("a", ids(*pulled), create=True, step=step).wait()
    src.pull("a", ids(3), create=True, step=5).wait()
    assert cached_ids(src) == sorted({1, 2, 3} - {evicted})
    assert src.metrics()["cache_a_evictions"] == 1


def test_rows_used_by_the_step_are_not_evicted_and_a_full_cache_admits_fewer():
    src, _ = cache(rows=2)
    src.pull("a", ids(1, 2), create=True, step=1).wait()
    src.pull("a", ids(1, 2, 3), create=True, step=2).wait()  # 1 and 2 read at this step: 3 finds no room
    assert cached_ids(src) == [1, 2]


def test_rows_are_cached_after_admit_after_pulls():
    counting = Counting(connect(CONFIG, 2))
    src, _ = cache(counting, admit_after=3)
    for step in (1, 2, 3):
        src.pull("a", ids(5), create=True, step=step).wait()
        assert cached_ids(src) == ([5] if step == 3 else [])
    src.pull("a", ids(5), create=True, step=4).wait()
    assert len(counting.pulls) == 3


def test_the_cache_holds_as_many_rows_as_its_bytes_pay_for():
    assert slots_for(10 * ONE_ROW, DIM, 0) == 10 and slots_for(10 * ONE_ROW - 1, DIM, 0) == 9
    assert slot_bytes(DIM, DIM) == ONE_ROW + 4 * DIM  # adagrad: a slot also holds the row's optimizer state
    src, _ = cache(rows=3)
    src.pull("a", ids(*range(10)), create=True, step=1).wait()
    m = src.metrics()
    assert m["cache_a_rows"] == 3 and m["cache_a_bytes"] == 3 * 2 * 4 * DIM
    with pytest.raises(ValueError, match="holds no row"):
        CachedSource(PSSource(connect(CONFIG, 1)), {"a": DIM}, ONE_ROW - 1, 1, CONFIG.optimizer)


def test_flush_pushes_every_pending_gradient_and_drops_the_cache():
    src, client = cache(s=3, hold=3)
    start = src.pull("a", ids(1, 2, 3), create=True, step=1).wait()
    src.push("a", ids(1, 2, 3), np.ones((3, DIM), np.float32), step=1)
    src.pull("a", ids(1, 2), create=True, step=2).wait()
    src.push("a", ids(1, 2), np.ones((2, DIM), np.float32), step=2)
    src.flush(2)
    assert cached_ids(src) == [] and src.slots["a"].count.max() == 0
    np.testing.assert_allclose(client.pull("a", ids(1, 2, 3), create=False).wait(),
                               start - 0.5 * np.array([[2], [2], [1]]), rtol=1e-6)
    counting = Counting(client)
    src.inner.client = counting
    src.pull("a", ids(1, 2, 3), create=True, step=3).wait()
    assert len(counting.pulls) == 1  # nothing served from before the flush


def two_workers(n_shards=2, s=4):
    """Worker 0 behind a cache, in this thread; worker 1's pushes are sent by hand."""
    client = connect(CONFIG, n_shards)
    src = CachedSource(PSSource(client, 4, 20, worker=0, workers=2, combine=True), {"a": DIM}, 64 * ONE_ROW, s,
                       CONFIG.optimizer, hold=s)
    return src, client


def other(client, step, pushed):
    client.push("a", pushed, np.ones((len(pushed), DIM), np.float32), step=step,
                origin=Origin(1, 2, combine=True)).wait()


def test_another_workers_updates_come_back_with_the_push_replies():
    src, client = two_workers(n_shards=1)
    src.pull("a", ids(1, 2, 3), create=True, step=1).wait()
    other(client, 1, ids(7))
    src.push("a", ids(1, 2, 3), np.zeros((3, DIM), np.float32), step=1)  # pending, not pushed: s = 4
    src.settle(None)
    src.pull("a", ids(1, 2, 3), create=True, step=2).wait()
    assert src.metrics()["cache_a_hit_rate_unique"] == 0.5  # all three rows hit at step 2
    for step in range(2, 7):  # the other worker changes row 1 at every step
        other(client, step, ids(1))
        src.push("a", ids(2), np.zeros((1, DIM), np.float32), step=step)
        src.settle(None)
    slots = src.slots["a"]
    assert slots.behind[slot(slots, 1)] == 5 and slots.behind[slot(slots, 3)] == 0
    before = src.counters["a.unique_hits"]
    src.pull("a", ids(1, 3), create=True, step=7).wait()
    assert src.counters["a.unique_hits"] - before == 1  # row 1: 5 behind > s, fetched again; row 3 hits
    assert slots.behind[slot(slots, 1)] == 0


def test_a_cursor_that_fell_out_of_the_log_drops_that_shards_rows():
    src, client = two_workers(n_shards=2)
    stores = client.transport.stores
    for store in stores:
        store.log = UpdateLog(max_entries=1)
    pulled = ids(*range(20))
    src.pull("a", pulled, create=True, step=1).wait()
    other(client, 1, ids(100))
    src.push("a", pulled[:1], np.zeros((1, DIM), np.float32), step=1)
    src.settle(None)
    for _ in range(3):  # shard 0's log moves on by more than it keeps
        stores[0].log.append("a", 1, [(1, ids(100))])
    other(client, 2, ids(100))
    src.push("a", pulled[:1], np.zeros((1, DIM), np.float32), step=2)
    src.settle(None)
    from cardinal.sharding.routing import route
    kept = set(cached_ids(src))
    shards = dict(zip(pulled.tolist(), route(pulled, 2).tolist()))
    assert src.metrics()["cache_a_resets"] == 1
    assert kept == {i for i in pulled.tolist() if shards[i] == 1}


class Deferred:
    """A client whose pushes are applied only when waited on (a slow network, made certain)."""

    def __init__(self, client):
        self.client, self.n_shards = client, client.n_shards

    def push(self, *args, **kwargs):
        client = self.client

        class Later:
            def wait(self, timeout=None):
                return client.push(*args, **kwargs).wait(timeout)
        return Later()

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_a_row_fetched_while_an_own_push_of_it_is_in_flight_counts_that_push():
    client = connect(CONFIG, 2)
    src = CachedSource(PSSource(Deferred(client), 4, 20), {"a": DIM}, 16 * ONE_ROW, 0, CONFIG.optimizer)
    first = src.pull("a", ids(4), create=True, step=1).wait()
    src.push("a", ids(4), np.ones((1, DIM), np.float32), step=1)  # s = 0: goes out with the next pull
    second = src.pull("a", ids(4), create=True, step=2).wait()  # fetched again, before the push is applied
    np.testing.assert_array_equal(second, first)
    src.settle(1)
    third = src.pull("a", ids(4), create=True, step=3).wait()  # the cached row lacks that push: not served
    np.testing.assert_array_equal(third, first - 0.5)


def test_each_shard_is_asked_from_its_own_cursor_and_rows_nobody_else_changed_stay_fresh():
    src, client = two_workers(n_shards=2)
    stores = client.transport.stores
    from cardinal.sharding.routing import route
    pulled = ids(*range(12))
    on = dict(zip(pulled.tolist(), route(pulled, 2).tolist()))
    mine = [i for i in pulled.tolist() if on[i] == 1][:2]  # two rows of shard 1
    for _ in range(5):  # shard 0's log runs ahead: the cursors of the two shards differ
        stores[0].log.append("a", 0, [(1, ids(1000))])
    src.pull("a", pulled, create=True, step=1).wait()
    for step in range(1, 7):
        other(client, step, ids(mine[0]))
        src.push("a", ids(), np.zeros((0, DIM), np.float32), step=step)
        src.settle(None)
    assert src.cursor["a"][0] == src.cursor["a"][1] + 5 and src.metrics()["cache_a_resets"] == 0
    slots = src.slots["a"]
    assert slots.behind[slot(slots, mine[0])] == 6 and slots.behind[slot(slots, mine[1])] == 0


def test_a_fetched_row_counts_every_step_of_an_own_sum_still_in_flight():
    client = connect(CONFIG, 2)
    src = CachedSource(PSSource(Deferred(client), 4, 20), {"a": DIM}, 16 * ONE_ROW, 1, CONFIG.optimizer, hold=1)
    one = np.ones((1, DIM), np.float32)
    start = src.pull("a", ids(4), create=True, step=1).wait()
    src.push("a", ids(4), one, step=1)
    src.pull("a", ids(4), create=True, step=2).wait()
    src.push("a", ids(4), one, step=2)  # 2 pending > s: a sum of 2, sent with the next pull
    np.testing.assert_array_equal(src.pull("a", ids(4), create=True, step=3).wait(), start)  # fetched, push unapplied
    src.settle(None)
    np.testing.assert_allclose(src.pull("a", ids(4), create=True, step=4).wait(), start - 1.0, rtol=1e-6)


def test_pending_gradients_and_other_workers_updates_add_up():
    src, client = two_workers(n_shards=1)
    src.pull("a", ids(4), create=True, step=1).wait()
    for step in (1, 2, 3):  # 3 updates by the other worker, 3 gradients pending here: 6 > s = 4
        other(client, step, ids(4))
        src.push("a", ids(4), np.zeros((1, DIM), np.float32), step=step)
        src.settle(None)
    assert src.slots["a"].count.max() == 3
    fresh = client.pull("a", ids(4), create=False).wait()
    np.testing.assert_array_equal(src.pull("a", ids(4), create=True, step=4).wait(), fresh)


def test_another_workers_sum_of_k_steps_counts_k():
    src, client = two_workers(n_shards=1)
    src.pull("a", ids(4, 5), create=True, step=1).wait()
    client.push("a", ids(4, 5), np.ones((2, DIM), np.float32), step=1, origin=Origin(1, 2, combine=True),
                counts=np.array([5, 4], np.int32)).wait()  # its cache's sums of 5 and 4 steps
    src.push("a", ids(), np.zeros((0, DIM), np.float32), step=1)
    src.settle(None)
    src.pull("a", ids(4, 5), create=True, step=2).wait()
    assert src.counters["a.unique_hits"] == 1  # 5 steps behind > s = 4: fetched again; 4: served

"""Several workers on one shard: clocks, pushes combined once per step, the staleness bound."""

import itertools

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import PSClient, ShardStore, StoreConfig, StoreLimits
from cardinal.ps.transport.inprocess import InProcessTransport
from cardinal.ps.transport.requests import Origin
from cardinal.worker.sources import PSSource
from helpers.cluster import Cluster

CONFIG = StoreConfig((TableConfig("a", 4),), {"name": "rowwise_adagrad", "lr": 0.1})
RNG = np.random.default_rng(0)
SHARES = [(np.array([5, 1, 9], np.int64), RNG.normal(size=(3, 4)).astype(np.float32)),
          (np.array([1, 7], np.int64), RNG.normal(size=(2, 4)).astype(np.float32)),
          (np.array([9, 5, 2, 1], np.int64), RNG.normal(size=(4, 4)).astype(np.float32))]
ALL = np.array([5, 1, 9, 7, 2], np.int64)


def store_with_rows(limits: StoreLimits | None = None) -> ShardStore:
    s = ShardStore(CONFIG, limits=limits)
    s.pull("a", ALL)
    return s


def values(store) -> np.ndarray:
    return store.pull("a", ALL, create=False)


def test_a_combined_step_is_one_update_of_the_shares_in_worker_order_whatever_their_arrival():
    one = store_with_rows()  # one worker pushing the whole batch: what W workers must reproduce
    one.push("a", np.concatenate([i for i, _ in SHARES]), np.concatenate([g for _, g in SHARES]), step=1)
    for order in itertools.permutations(range(3)):
        s = store_with_rows()
        before = s.stats(digest=True)["tables"]["a"]["digest_parts"]
        replies = [s.push("a", *SHARES[w], step=1, origin=Origin(w, 3, combine=True)) for w in order]
        assert [r["clock"] for r in replies] == [0, 0, 1]  # held, held, applied
        assert s.stats(digest=True)["tables"]["a"]["digest_parts"] != before
        np.testing.assert_array_equal(values(s), values(one))
        assert s.steps.clock("a", 3) == 1


def test_uncombined_pushes_apply_at_once_and_each_moves_only_its_workers_clock():
    s = store_with_rows()
    before = values(s)
    assert s.push("a", *SHARES[0], step=1, origin=Origin(0, 2))["clock"] == 0
    assert not np.array_equal(values(s), before)
    assert s.push("a", *SHARES[1], step=1, origin=Origin(1, 2))["clock"] == 1
    assert s.push("a", *SHARES[0], step=2, origin=Origin(0, 2))["clock"] == 1


def test_a_clock_moves_only_once_every_part_of_every_earlier_step_is_applied():
    s = store_with_rows()
    ids, g = SHARES[2]
    s.push("a", ids[2:], g[2:], step=2, origin=Origin(0, 1, part=0, parts=1))
    assert s.steps.clock("a", 1) == 0  # step 1 not yet whole
    s.push("a", ids[:1], g[:1], step=1, origin=Origin(0, 1, part=1, parts=2))
    assert s.steps.clock("a", 1) == 0
    s.push("a", ids[1:2], g[1:2], step=1, origin=Origin(0, 1, part=0, parts=2))
    assert s.steps.clock("a", 1) == 2


@pytest.mark.parametrize("origin,step,message", [
    (Origin(0, 2, combine=True), 1, "sent part 0 twice"),
    (Origin(0, 3, combine=True), 1, "disagree on their number"),
    (Origin(0, 2, part=1, parts=3, combine=True), 1, "split it into"),
])
def test_a_confused_combined_push_is_refused_and_changes_nothing(origin, step, message):
    s = store_with_rows()
    s.push("a", *SHARES[0], step=1, origin=Origin(0, 2, combine=True))
    before, digest = values(s), s.stats(digest=True)["tables"]["a"]["digest_parts"]
    with pytest.raises(ValueError, match=message):
        s.push("a", *SHARES[1], step=step, origin=origin)
    np.testing.assert_array_equal(values(s), before)
    assert s.stats(digest=True)["tables"]["a"]["digest_parts"] == digest


def test_a_push_of_a_step_already_applied_is_refused():
    s = store_with_rows()
    s.push("a", *SHARES[0], step=1, origin=Origin(0, 1))
    before = values(s)
    with pytest.raises(ValueError, match="up to step 1 already"):
        s.push("a", *SHARES[0], step=1, origin=Origin(0, 1))
    np.testing.assert_array_equal(values(s), before)


@pytest.mark.parametrize("kwargs", [dict(worker=2, workers=2), dict(workers=0), dict(part=1, parts=1),
                                    dict(staleness=-1), dict(combine=1)])
def test_an_impossible_origin_is_refused(kwargs):
    with pytest.raises((ValueError, TypeError)):
        Origin(**kwargs)


def test_staleness_compensation_divides_the_learning_rate():
    plain, compensated, slow = store_with_rows(), store_with_rows(), ShardStore(
        StoreConfig(CONFIG.tables, {"name": "rowwise_adagrad", "lr": 0.05}))
    slow.pull("a", ALL)
    plain.push("a", *SHARES[0], step=1, origin=Origin(0, 1))
    compensated.push("a", *SHARES[0], step=1, origin=Origin(0, 1, staleness=2))
    slow.push("a", *SHARES[0], step=1)
    np.testing.assert_array_equal(values(compensated), values(slow))
    assert not np.array_equal(values(compensated), values(plain))


def sources(n_shards=2, workers=2, timeout=5.0):
    stores = [ShardStore(CONFIG, s, n_shards) for s in range(n_shards)]
    client = PSClient(InProcessTransport(stores))
    return stores, [PSSource(client, 2, timeout, worker=w, workers=workers) for w in range(workers)]


def test_a_worker_waits_for_the_slowest_and_names_it_when_it_waits_too_long():
    stores, (fast, slow) = sources(timeout=0.3)
    ids, g = SHARES[0]
    for step in (1, 2, 3):
        fast.pull("a", ids, create=True, step=step).wait()
        fast.push("a", ids, g, step=step)
    slow.pull("a", ids, create=True, step=1).wait()
    slow.push("a", ids, g, step=1)
    slow.settle(1)
    fast.settle(1)  # every worker finished step 1
    with pytest.raises(TimeoutError, match="only up to step 1, and waits for worker 1"):
        fast.settle(2)  # worker 1 never pushes step 2
    slow.push("a", ids, g, step=2)
    slow.settle(None)
    fast.settle(2)
    assert fast.staleness_counts == {0: 1, 1: 1, 2: 1}  # steps 1, 2, 3 pulled while the clock stood at 0


def test_pushes_with_an_origin_reach_every_shard_and_combine_over_grpc_in_parts(tmp_path):
    cluster = Cluster(CONFIG, 2, tmp_path)
    try:
        transport = cluster.client.transport
        transport.chunk_bytes = 64  # a few ids per message: every push travels in several parts
        ids = np.arange(40, dtype=np.int64) * 7919
        grads = RNG.normal(size=(40, 4)).astype(np.float32)
        one = PSClient(InProcessTransport([ShardStore(CONFIG, s, 2) for s in range(2)]))
        for c in (cluster.client, one):
            c.pull("a", ids).wait()
        one.push("a", ids, grads, step=1).wait()
        replies = [cluster.client.push("a", ids[w::2], grads[w::2], step=1,
                                       origin=Origin(w, 2, combine=True)).wait() for w in (1, 0)]
        assert [r["clock"] for r in replies] == [0, 1]
        np.testing.assert_array_equal(cluster.client.pull("a", ids, create=False).wait(),
                                      one.pull("a", ids, create=False).wait())
        assert cluster.client.clocks(2)["a"][0] == 1
        empty = cluster.client.push("a", ids[:0], grads[:0], step=2, origin=Origin(0, 1)).wait()
        assert empty == {"clock": 2}  # an empty push still reaches, and moves the clock of, every shard
    finally:
        cluster.stop()


def test_a_combined_step_is_compensated_by_the_largest_staleness_of_its_pushes():
    slow = ShardStore(StoreConfig(CONFIG.tables, {"name": "rowwise_adagrad", "lr": 0.05}))
    combined = store_with_rows()
    slow.pull("a", ALL)
    slow.push("a", np.concatenate([SHARES[0][0], SHARES[1][0]]), np.concatenate([SHARES[0][1], SHARES[1][1]]), step=1)
    combined.push("a", *SHARES[1], step=1, origin=Origin(1, 2, combine=True, staleness=2))
    combined.push("a", *SHARES[0], step=1, origin=Origin(0, 2, combine=True, staleness=0))
    np.testing.assert_array_equal(values(combined), values(slow))


def test_a_combined_step_refused_when_applied_keeps_the_other_workers_pushes_held():
    """The push that completes a step is refused (its result would not be finite): it changes
    nothing, the other worker's acknowledged push stays held, and a good resend completes it."""
    one, s = store_with_rows(), store_with_rows(StoreLimits(max_gradient=float("inf")))  # past ps.limits.max_gradient's check
    one.push("a", np.concatenate([SHARES[0][0], SHARES[1][0]]), np.concatenate([SHARES[0][1], SHARES[1][1]]), step=1)
    s.push("a", *SHARES[0], step=1, origin=Origin(0, 2, combine=True))
    before = values(s)
    with pytest.raises(ValueError, match="NaN or Inf"):
        s.push("a", SHARES[1][0], np.full_like(SHARES[1][1], 3e38), step=1, origin=Origin(1, 2, combine=True))
    np.testing.assert_array_equal(values(s), before)
    assert s.stats()["held"] == {"a": {"1": [0]}} and s.steps.clock("a", 2) == 0
    assert s.push("a", *SHARES[1], step=1, origin=Origin(1, 2, combine=True)) == {"clock": 1}
    np.testing.assert_array_equal(values(s), values(one))
    assert s.stats()["held"] == {}


def test_a_push_far_ahead_of_the_slowest_worker_is_refused():
    s = ShardStore(CONFIG, limits=StoreLimits(max_step_ahead=1000))  # the server's own clock lets it through
    s.pull("a", ALL)
    with pytest.raises(ValueError, match="more than 64 steps ahead of the slowest"):
        s.push("a", *SHARES[0], step=65, origin=Origin(0, 2))
    s.push("a", *SHARES[0], step=64, origin=Origin(0, 2))


def test_a_waiting_worker_names_the_one_missing_from_a_combined_step():
    stores = [ShardStore(CONFIG, s, 2) for s in range(2)]
    client = PSClient(InProcessTransport(stores))
    w0, w1, w2 = (PSSource(client, 2, 0.3, worker=w, workers=3, combine=True) for w in range(3))
    ids, g = SHARES[0]
    for w in (w0, w2):  # worker 1 never pushes step 1
        w.pull("a", ids, create=True, step=1).wait()
        w.push("a", ids, g, step=1)
    with pytest.raises(TimeoutError, match="waits for worker 1"):
        w0.settle(1)


def test_with_several_workers_a_table_is_pushed_once_per_step():
    _, (w0, _) = sources()
    ids, g = SHARES[0]
    w0.push("a", ids, g, step=1)
    with pytest.raises(ValueError, match="pushed once per step"):
        w0.push("a", ids, g, step=1)
    w0.settle(0)  # the first push was sent


def test_staleness_compensation_is_refused_for_ftrl():
    """FTRL recomputes a weight from its accumulators with the lr: a smaller lr for one push
    would rescale the whole weight, so compensation is refused, in the recipe and on the server."""
    from cardinal.optim import make_optimizer
    from cardinal.recipe import load

    with pytest.raises(ValueError, match="does not apply to sparse_optimizer ftrl"):
        load(None, ['consistency.async.compensation="lr"', 'sparse_optimizer.name="ftrl"'])
    with pytest.raises(ValueError, match="does not apply to FTRL"):
        make_optimizer({"name": "ftrl"}).scaled(0.5)

"""Row sources, each on its own: the parameter-server source's settle and window, the GEO
replica's intervals, and the module driving a source through its four calls."""

import numpy as np
import pytest
import torch

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.transport.base import Completed, Handle
from cardinal.worker import EmbeddingCollection
from cardinal.worker.sources import GeoReplica, PSSource, RowSource
from cardinal.data import Bag
from helpers.bags import bag

CONFIG = StoreConfig((TableConfig("a", 4, init_scale=0.5),), {"name": "sgd", "lr": 1.0})
IDS = np.array([3, 1, 7], np.int64)


class Ack(Handle):
    """A push that counts as applied once waited on (or fails then, with ``error``)."""

    def __init__(self, error: Exception | None = None):
        self.acked, self.error = False, error

    def wait(self, timeout=None):
        self.acked = True
        if self.error is not None:
            raise self.error
        return {}


class RecordingClient:
    """A PSClient stand-in: each push returns an ``Ack``; records how many were unacknowledged
    when each push was sent."""

    def __init__(self, fail_step: int | None = None):
        self.pushes: list[tuple[int, Ack]] = []
        self.outstanding_at_send: list[int] = []
        self.fail_step = fail_step

    def push(self, table, ids, grads, *, step, kind="grad", origin=None):
        self.outstanding_at_send.append(sum(not h.acked for _, h in self.pushes))
        h = Ack(RuntimeError(f"push of step {step} failed") if step == self.fail_step else None)
        self.pushes.append((step, h))
        return h


def grads(n=3, dim=4, value=1.0):
    return np.full((n, dim), value, np.float32)


def test_ps_source_settle_acknowledges_exactly_the_pushes_up_to_the_step():
    client = RecordingClient()
    source = PSSource(client, max_in_flight=10, timeout=20)
    for step in (1, 2, 2, 3):
        source.push("a", IDS, grads(), step=step)
    source.settle(2)
    assert [(s, h.acked) for s, h in client.pushes] == [(1, True), (2, True), (2, True), (3, False)]
    source.settle(None)
    assert all(h.acked for _, h in client.pushes)


def test_ps_source_keeps_at_most_max_in_flight_pushes_unacknowledged():
    client = RecordingClient()
    source = PSSource(client, max_in_flight=2, timeout=20)
    for step in range(1, 7):
        source.push("a", IDS, grads(), step=step)
    source.flush(6)
    assert len(client.pushes) == 6 and all(h.acked for _, h in client.pushes)
    assert max(client.outstanding_at_send) == 1  # one unacknowledged, plus the one being sent: 2


def test_ps_source_settle_raises_the_push_error():
    source = PSSource(RecordingClient(fail_step=2), max_in_flight=10, timeout=20)
    for step in (1, 2, 3):
        source.push("a", IDS, grads(), step=step)
    source.settle(1)  # the failing push is not waited on yet
    with pytest.raises(RuntimeError, match="push of step 2 failed"):
        source.settle(None)


def test_ps_source_rejects_an_empty_window():
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        PSSource(RecordingClient(), max_in_flight=0)


def server_rows(client, ids=IDS):
    return client.pull("a", ids, create=False).wait()


def test_geo_replica_trains_locally_and_pushes_deltas_at_each_interval():
    client = connect(CONFIG, 2)
    replica = GeoReplica(client, {"name": "sgd", "lr": 1.0}, interval=2, timeout=20)
    start = replica.pull("a", IDS, create=True, step=1).wait()
    np.testing.assert_array_equal(start, server_rows(client))  # pulled once, created on the servers
    replica.push("a", IDS, grads(value=1.0), step=1)
    np.testing.assert_array_equal(replica.pull("a", IDS, create=True, step=2).wait(), start - 1.0)
    other = grads(value=0.25)  # another worker's push reaches the servers meanwhile
    client.push("a", IDS, other, step=2).wait()
    replica.push("a", IDS, grads(value=2.0), step=2)
    np.testing.assert_array_equal(server_rows(client), start - 0.25)  # the replica's changes: not yet
    third = replica.pull("a", IDS, create=True, step=3).wait()  # a new interval: deltas pushed first
    np.testing.assert_allclose(server_rows(client), start - 3.25, rtol=1e-6)
    np.testing.assert_array_equal(third, server_rows(client))  # the replica was dropped: fresh rows
    replica.push("a", IDS, grads(value=1.0), step=3)
    replica.flush(3)
    np.testing.assert_allclose(server_rows(client), start - 4.25, rtol=1e-6)


def test_geo_replica_lookups_read_the_servers_and_change_nothing():
    client = connect(CONFIG, 2)
    replica = GeoReplica(client, {"name": "sgd", "lr": 1.0}, interval=4, timeout=20)
    start = replica.pull("a", IDS, create=True, step=1).wait()
    replica.push("a", IDS, grads(), step=1)
    looked_up = replica.pull("a", np.array([3, 1, 7, 99], np.int64), create=False, step=1).wait()
    np.testing.assert_array_equal(looked_up[:3], start)     # the servers' rows, not the replica's
    np.testing.assert_array_equal(looked_up[3], np.zeros(4))  # unknown id: zeros, nothing created
    assert sum(s["tables"]["a"]["rows"] for s in client.stats()) == 3
    np.testing.assert_array_equal(replica.pull("a", IDS, create=True, step=2).wait(), start - 1.0)


class RecordingSource(RowSource):
    """Rows of ones; records every call the module makes."""

    def __init__(self):
        self.calls: list[tuple] = []

    def pull(self, table, ids, *, create, step):
        self.calls.append(("pull", table, tuple(ids.tolist()), create, step))
        return Completed(np.ones((len(ids), 2), np.float32))

    def push(self, table, ids, grads, *, step):
        self.calls.append(("push", table, tuple(ids.tolist()), tuple(grads[:, 0].tolist()), step))

    def settle(self, up_to_step):
        self.calls.append(("settle", up_to_step))

    def flush(self, step):
        self.calls.append(("flush", step))


def test_the_module_drives_its_source_through_the_four_calls():
    source = RecordingSource()
    emb = EmbeddingCollection(source, {"x": "a", "y": "a"}, "sum", staleness=2)
    sparse = {"x": bag([[5, 4], [5]]), "y": bag([[6], []])}
    emb.step = 7
    sum(v.sum() for v in emb(sparse).values()).backward()
    emb.flush()
    assert source.calls == [("settle", 4),                       # step 7 sees pushes up to 7 - 1 - 2
                            ("pull", "a", (5, 4, 6), True, 7),   # unique ids, creating (training)
                            ("push", "a", (5, 4, 6), (2.0, 1.0, 1.0), 7),  # one summed gradient row per id
                            ("flush", 7)]
    source.calls.clear()
    emb.eval()
    with torch.no_grad():
        emb(sparse)
    assert source.calls == [("settle", 4), ("pull", "a", (5, 4, 6), False, 7)]  # a lookup; nothing pushed


def test_the_module_takes_a_client_or_a_source():
    client = connect(CONFIG, 1)
    assert isinstance(EmbeddingCollection(client, {"x": "a"}).source, PSSource)
    assert EmbeddingCollection(client, {"x": "a"}, max_in_flight=7).source.max_in_flight == 7
    with pytest.raises(TypeError, match="max_in_flight belongs to the row source"):
        EmbeddingCollection(PSSource(client), {"x": "a"}, max_in_flight=7)
    with pytest.raises(TypeError, match="a PSClient or a RowSource, got dict"):
        EmbeddingCollection({}, {"x": "a"})


class SettleLog(RowSource):
    """Records what the collection asks the source to settle before each pull."""

    def __init__(self):
        self.settled = []

    def pull(self, table, ids, *, create, step):
        return Completed(np.zeros((len(ids), 4), np.float32))

    def push(self, table, ids, grads, *, step):
        pass

    def settle(self, up_to_step):
        self.settled.append(up_to_step)

    def flush(self, step):
        pass


@pytest.mark.parametrize("staleness,expected", [(None, None), (1, 5)])
def test_sync_settles_every_push_whatever_the_collections_step(staleness, expected):
    """Sync: every earlier push, even when the user never advances .step; async k: steps <= t - 1 - k."""
    log = SettleLog()
    emb = EmbeddingCollection(log, {"f": "a"}, staleness=staleness)
    emb.step = 7
    emb({"f": Bag(np.array([1, 2], np.int64), np.array([0, 1, 2], np.int64))})
    assert log.settled == [expected]


@pytest.mark.parametrize("inline", [True, False])
def test_a_push_slower_than_the_timeout_is_named_whichever_thread_runs_it(inline):
    import threading
    client = connect(CONFIG, 1, concurrent=True, lanes=1, inline=inline)
    store, release = client.transport.stores[0], threading.Event()
    real = store.push
    store.push = lambda *args, **kwargs: (release.wait(10), real(*args, **kwargs))[1]
    source = PSSource(client, timeout=0.2)
    source.pull("a", IDS, create=True, step=1).wait()
    source.push("a", IDS, np.ones((3, 4), np.float32), step=1)
    # inline the push runs on the push thread, which settle waits for; else on the lane's
    named = "worker 0's push of table 'a' at step 1" if inline else "push on in-process shard 0"
    with pytest.raises(TimeoutError, match=f"{named}: no answer within 0.2 s"):
        source.settle(None)
    release.set()
    client.transport.close()

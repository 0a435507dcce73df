"""The servers' update log: what each push reply tells a worker of the others' updates, in
process and over gRPC, where a resent push is answered alike."""

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig
from cardinal.ps.server.update_log import UpdateLog
from cardinal.ps.transport.grpc_transport import GrpcTransport
from cardinal.ps.transport.requests import Origin, PushRequest
from helpers.cluster import JOB, TOKEN, Cluster

CONFIG = StoreConfig((TableConfig("a", 4),), {"name": "sgd", "lr": 0.1})


def ids(*values):
    return np.array(values, np.int64)


def test_a_combined_step_counts_once_and_not_for_the_rows_the_worker_changed_itself():
    log = UpdateLog()
    log.append("a", 3, [(0, ids(1, 2)), (1, ids(2, 5), np.array([3, 2], np.int32)), (1, ids(5, 6))])
    log.append("a", 4, [(1, ids(1))])
    mine = log.since("a", 0, worker=0, clock=4)
    assert mine["ids"].tolist() == [5, 6, 1] and mine["steps"].tolist() == [3, 3, 4]
    assert mine["seqs"].tolist() == [1, 1, 2] and mine["cursor"] == 2 and not mine["reset"]
    assert mine["counts"].tolist() == [2, 1, 1]  # a row's update brings the most steps any part carried
    assert log.since("a", 1, worker=0, clock=4)["ids"].tolist() == [1]
    assert log.since("a", 0, worker=1, clock=4)["ids"].tolist() == [1]  # worker 1 changed the rest itself


def test_a_cursor_outside_the_log_is_answered_reset():
    log = UpdateLog(max_entries=2)
    for step in range(1, 5):
        log.append("a", step, [(1, ids(step))])
    assert log.since("a", 2, 0, 4)["ids"].tolist() == [3, 4]
    assert log.since("a", 1, 0, 4)["reset"] and log.since("a", 1, 0, 4)["cursor"] == 4
    assert log.since("a", 9, 0, 4)["reset"]  # past its end: another incarnation's cursor
    log.reset()
    assert log.since("a", 3, 0, 4)["reset"] and not log.since("a", 4, 0, 4)["reset"]


def test_the_log_is_bounded_in_ids():
    log = UpdateLog(max_entries=100, max_ids=10)
    for step in range(1, 6):
        log.append("a", step, [(1, ids(*range(4 * step, 4 * step + 4)))])
    assert sum(len(e.ids) for e in log._entries["a"]) <= 10
    assert log.since("a", 0, 0, 5)["reset"]


def test_the_store_logs_updates_of_several_workers_and_replies_after_the_cursor():
    store = ShardStore(CONFIG)
    g = np.ones((2, 4), np.float32)
    store.push("a", ids(1, 2), g, step=1, origin=Origin(1, 2, combine=True))
    reply = store.push("a", ids(2, 3), g, step=1, origin=Origin(0, 2, combine=True, since=0))
    assert reply["clock"] == 1 and reply["log"]["ids"].tolist() == [1] and reply["log"]["cursor"] == 1
    assert "log" not in store.push("a", ids(1), g[:1], step=2, origin=Origin(0, 2, combine=True))
    single = ShardStore(CONFIG)
    single.push("a", ids(1), g[:1], step=1, origin=Origin(0, 1, since=0))
    assert single.log.since("a", 0, 0, 1)["cursor"] == 0  # one worker: nothing logged


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(CONFIG, 1, tmp_path / "ps")
    yield c
    c.stop()


def test_over_grpc_a_resent_push_gets_the_same_invalidations(cluster):
    """Sent twice with one request id (a lost reply): applied once, answered alike; a push split
    into several messages asks in one of them."""
    transport = GrpcTransport(cluster.addresses, JOB, TOKEN, timeout=20, chunk_mb=0.0001)  # ~100 B: many parts
    try:
        g = np.ones((40, 4), np.float32)
        transport.push(0, PushRequest("a", ids(*range(40)), g, 1, request_id="other-1",
                                      origin=Origin(1, 2, combine=False), counts=np.full(40, 3, np.int32))).wait()
        push = PushRequest("a", ids(*range(30, 70)), g, 1, request_id="mine-1",
                           origin=Origin(0, 2, combine=False, since=0))
        first = transport.push(0, push).wait()
        digest = cluster.client.digest("a")
        rows = cluster.client.pull("a", ids(*range(70)), create=False).wait()
        again = transport.push(0, push).wait()
        assert cluster.client.digest("a") == digest
        np.testing.assert_array_equal(cluster.client.pull("a", ids(*range(70)), create=False).wait(), rows)
        parts = sum(1 for _ in transport._chunks(40, 8 + 16, 0))
        assert parts > 1
        for reply in (first, again):
            log = reply["log"]
            assert sorted(log["ids"].tolist()) == list(range(40))  # worker 1's rows; worker 0's own not reported
            assert set(log["steps"].tolist()) == {1} and set(log["counts"].tolist()) == {3}
        # each part is one update: worker 1's, then worker 0's (its other parts may land after the first reply)
        assert parts + 1 <= first["log"]["cursor"] <= again["log"]["cursor"] == 2 * parts
        assert first["log"]["ids"].tolist() == again["log"]["ids"].tolist()
        assert first["log"]["seqs"].tolist() == again["log"]["seqs"].tolist()
    finally:
        transport.close()

"""Counted pushes end to end: ``counts`` (updates each gradient row accumulates) refused when
malformed without changing anything, merged by max (a push's duplicate ids, a combined step's
workers), carried on the wire by both transports, and passed on by the row sources."""

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer
from cardinal.ps import ShardStore, StoreConfig, connect
from cardinal.ps.transport import wire
from cardinal.ps.transport.grpc_transport import GrpcTransport
from cardinal.ps.transport.requests import Origin
from cardinal.worker.sources import GeoReplica, PSSource
from helpers.cluster import JOB, TOKEN, Cluster, raw_call
from test_wire_corpus import GRADS, IDS, INVALID, assert_refused, push, server  # noqa: F401 - server: a fixture

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)),
                     {"name": "adagrad", "lr": 0.1})
IDS3 = np.array([1, 2, 3], np.int64)
G3 = np.ones((3, 8), np.float32)
PROBE = np.arange(-50, 60, dtype=np.int64)


def bad_counts():
    return {
        "too short": (np.ones(2, np.int32), r"shape \(len\(ids\),\) = \(3,\)"),
        "too long": (np.ones(4, np.int32), r"shape \(len\(ids\),\) = \(3,\)"),
        "2-d": (np.ones((3, 1), np.int32), r"shape \(len\(ids\),\) = \(3,\)"),
        "int64": (np.ones(3, np.int64), "numpy int32 array, got int64"),
        "float32": (np.ones(3, np.float32), "numpy int32 array, got float32"),
        "a list": ([1, 1, 1], "numpy int32 array, got list"),
        "zero": (np.array([1, 0, 2], np.int32), "must be >= 1.*got 0 at row 1"),
        "negative": (np.array([1, 2, -3], np.int32), "must be >= 1.*got -3 at row 2"),
    }


def snapshot(read_digest, pull) -> tuple:
    """Digests and every row read back through the public API (a lookup changes nothing)."""
    return read_digest(), pull("user", PROBE).tobytes(), pull("item", PROBE).tobytes()


def trained_store() -> ShardStore:
    s = ShardStore(CONFIG)
    s.pull("user", PROBE, step=1)
    s.push("user", PROBE, np.full((len(PROBE), 8), 0.5, np.float32), step=1, counts=np.full(len(PROBE), 2, np.int32))
    return s


@pytest.mark.parametrize("case", sorted(bad_counts()) + ["with a delta"])
def test_bad_counts_are_refused_by_the_store_and_change_nothing(case):
    s = trained_store()
    counts, message = bad_counts().get(case, (np.ones(3, np.int32), "only gradient pushes carry counts"))
    kind = "delta" if case == "with a delta" else "grad"
    state = lambda: snapshot(lambda: {t: s.tables[t].digest() for t in s.tables},  # noqa: E731
                             lambda t, ids: s.pull(t, ids, create=False))
    before = state()
    with pytest.raises(ValueError, match=message):
        s.push("user", IDS3, G3, step=2, kind=kind, counts=counts)
    assert state() == before
    s.check()


@pytest.mark.parametrize("case", sorted(bad_counts()) + ["with a delta"])
def test_bad_counts_are_refused_by_the_client_before_any_shard_sees_them(case):
    client = connect(CONFIG, 2)
    client.pull("user", PROBE, step=1).wait()
    counts, message = bad_counts().get(case, (np.ones(3, np.int32), "only gradient pushes carry counts"))
    kind = "delta" if case == "with a delta" else "grad"
    state = lambda: snapshot(lambda: (client.digest("user"), client.digest("item")),  # noqa: E731
                             lambda t, ids: client.pull(t, ids, create=False).wait())
    before = state()
    with pytest.raises(ValueError, match=message):
        client.push("user", IDS3, G3, step=2, kind=kind, counts=counts)
    assert state() == before


def test_duplicate_ids_of_a_push_take_the_largest_count():
    """Duplicates are parts of one update: summed gradients, the max of their counts."""
    a, b = (EmbeddingTable(TableConfig("t", 4, seed=5), make_optimizer({"name": "adagrad", "lr": 0.1}))
            for _ in range(2))
    g = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    a.push(np.array([7, 8, 7, 7], np.int64), g, step=1, counts=np.array([2, 3, 5, 1], np.int32))
    b.push(np.array([7, 8], np.int64), np.stack([g[0] + g[2] + g[3], g[1]]), step=1,
           counts=np.array([5, 3], np.int32))
    assert a.digest() == b.digest()


def test_a_combined_step_takes_the_largest_count_of_its_workers_parts():
    """Worker 0 holds row 7 for 3 updates, worker 1 sends it plain (count 1) with row 8: one
    update of the sum with count 3, and row 8 with count 1 (a part without counts is one each)."""
    rng = np.random.default_rng(2)
    g0, g1 = rng.standard_normal((1, 8)).astype(np.float32), rng.standard_normal((2, 8)).astype(np.float32)
    combined, one = ShardStore(CONFIG), ShardStore(CONFIG)
    combined.push("user", np.array([7], np.int64), g0, step=1, origin=Origin(0, 2, combine=True),
                  counts=np.array([3], np.int32))
    combined.push("user", np.array([7, 8], np.int64), g1, step=1, origin=Origin(1, 2, combine=True))
    one.push("user", np.array([7, 8], np.int64), np.stack([g0[0] + g1[0], g1[1]]), step=1,
             counts=np.array([3, 1], np.int32))
    assert combined.tables["user"].digest() == one.tables["user"].digest()
    uncounted = ShardStore(CONFIG)
    uncounted.push("user", np.array([7, 8], np.int64), np.stack([g0[0] + g1[0], g1[1]]), step=1)
    assert uncounted.tables["user"].digest() != one.tables["user"].digest()


def counted_training(client, steps=3, unique=False, counted=True):
    """Pushes with duplicate ids (or ``unique`` ids: a message split on the wire is one update per
    part, so duplicates across parts would not be one update on either transport)."""
    rng = np.random.default_rng(6)
    for step in range(1, steps + 1):
        for table, dim in (("user", 8), ("item", 4)):
            ids = (rng.permutation(1000)[:400] - 500 if unique else rng.integers(-500, 500, 400)).astype(np.int64)
            client.pull(table, ids, step=step).wait()
            grads = rng.standard_normal((len(ids), dim)).astype(np.float32)
            counts = rng.integers(1, 5, len(ids)).astype(np.int32)
            client.push(table, ids, grads, step=step, counts=counts if counted else None).wait()


def test_counted_pushes_give_bitwise_equal_tables_over_grpc_and_in_process(tmp_path):
    local, uncounted = connect(CONFIG, 1), connect(CONFIG, 1)
    counted_training(local)
    counted_training(uncounted, counted=False)
    assert local.digest("user") != uncounted.digest("user")
    c = Cluster(CONFIG, 2, tmp_path)
    try:
        counted_training(c.client)
        for table in ("user", "item"):
            assert c.client.digest(table) == local.digest(table)
    finally:
        c.stop()


def test_counted_pushes_split_into_many_messages_keep_their_counts(tmp_path):
    local = connect(CONFIG, 1)
    counted_training(local, unique=True)
    c = Cluster(CONFIG, 2, tmp_path)
    try:
        c.client.transport.close()
        c.client.transport = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, chunk_mb=0.01)  # ~150 rows a message
        counted_training(c.client, unique=True)
        for table in ("user", "item"):
            assert c.client.digest(table) == local.digest(table)
    finally:
        c.stop()


COUNTS = np.array([1, 2, 3, 4], np.int32).tobytes()


@pytest.mark.parametrize("payload_counts, fields, message", [
    (COUNTS[:-2], {"counts_bytes": 14}, "counts_bytes: 14 is not a multiple of 4"),
    (COUNTS, {"counts_bytes": 4000}, "counts_bytes: 4000 is not a multiple of 4 within the payload"),
    (COUNTS, {"counts_bytes": True}, "counts_bytes: expected int, got bool"),
    (COUNTS[:-4], {"counts_bytes": 12}, r"counts must have shape \(len\(ids\),\) = \(4,\), got \(3,\)"),
    (COUNTS + COUNTS, {"counts_bytes": 32}, r"counts must have shape \(len\(ids\),\) = \(4,\), got \(8,\)"),
    (np.array([1, 0, 1, 1], np.int32).tobytes(), {"counts_bytes": 16}, "must be >= 1.*got 0 at row 1"),
    (COUNTS, {"counts_bytes": 16, "kind": "delta"}, "only gradient pushes carry counts"),
    (b"", {"counts_bytes": 4}, "payload: 156 bytes, but ids_bytes \\+ grads_bytes = 32 \\+ 128"),
])
def test_malformed_counts_on_the_wire_are_refused_and_change_nothing(server, payload_counts, fields, message):  # noqa: F811
    message_bytes = push(IDS, GRADS, **fields)
    assert_refused(server, "Push", message_bytes + payload_counts, INVALID, message)


def test_a_counted_push_is_ids_then_gradients_then_counts_on_the_wire(tmp_path):
    """A message built by hand in the documented layout does what the same push does in process."""
    ids = np.array([3, -9, 3, 12], np.int64)
    grads = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    counts = np.array([2, 1, 4, 3], np.int32)
    local = ShardStore(CONFIG)
    local.push("user", ids, grads, step=1, counts=counts)
    c = Cluster(CONFIG, 1, tmp_path)
    try:
        head = {"v": 1, "shard": 0, "n_shards": 1, "table": "user", "ids_bytes": 32, "ids_dtype": "int64",
                "grads_bytes": 128, "dim": 8, "dtype": "float32", "codec": "raw", "step": 1,
                "request_id": "abc123-1", "counts_bytes": 16}
        raw_call(c.addresses[0], "Push", wire.encode(head, ids, grads, counts.astype("<i4")))
        assert c.client.digest("user") == local.tables["user"].digest()
        probe = np.array([3, -9, 12], np.int64)
        np.testing.assert_array_equal(c.client.pull("user", probe, create=False).wait(),
                                      local.pull("user", probe, create=False))
    finally:
        c.stop()


def test_ps_source_passes_counts_on():
    ids = np.array([4, 5, 6], np.int64)
    g = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    counts = np.array([3, 1, 2], np.int32)
    direct, via, plain = connect(CONFIG, 2), connect(CONFIG, 2), connect(CONFIG, 2)
    direct.push("user", ids, g, step=1, counts=counts).wait()
    plain.push("user", ids, g, step=1).wait()
    source = PSSource(via, timeout=20)
    source.push("user", ids, g, step=1, counts=counts)
    source.settle(None)
    assert via.digest("user") == direct.digest("user") != plain.digest("user")


def test_geo_replica_refuses_counts_and_changes_nothing():
    client = connect(CONFIG, 1)
    geo = GeoReplica(client, {"name": "sgd", "lr": 0.1}, interval=2, timeout=20)
    ids = np.array([4, 5], np.int64)
    rows = geo.pull("user", ids, create=True, step=1).wait()
    with pytest.raises(TypeError, match="GeoReplica takes no counts"):
        geo.push("user", ids, np.ones((2, 8), np.float32), step=1, counts=np.array([2, 2], np.int32))
    np.testing.assert_array_equal(geo.pull("user", ids, create=True, step=1).wait(), rows)


def test_a_resend_with_other_counts_is_another_request_and_refused():
    s = trained_store()
    counts = np.array([2, 1, 3], np.int32)
    s.push("user", IDS3, G3, step=2, counts=counts, request_id="c0ffee-1")
    state = lambda: snapshot(lambda: s.tables["user"].digest(),  # noqa: E731
                             lambda t, ids: s.pull(t, ids, create=False))
    before = state()
    s.push("user", IDS3, G3, step=2, counts=counts, request_id="c0ffee-1")  # the same: acknowledged, applied once
    assert state() == before
    with pytest.raises(ValueError, match="used before for another request"):
        s.push("user", IDS3, G3, step=2, counts=counts + 1, request_id="c0ffee-1")
    with pytest.raises(ValueError, match="used before for another request"):
        s.push("user", IDS3, G3, step=2, request_id="c0ffee-1")
    assert state() == before

"""A corpus of bad requests sent as raw bytes straight to a live server, past every check a
client makes: each is refused with the status that says what to change, in a short message,
and leaves the shard as it was (digest, and every row read back) and SERVING."""

import json
import os
import re
import struct

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.servicer import MAX_DETAILS
from cardinal.ps.transport import wire
from helpers.cluster import AUTH, JOB, TOKEN, Cluster, raw_call

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adam", "lr": 0.01})
KNOWN = np.arange(-300, 300, dtype=np.int64)
INVALID, PRECONDITION, EXHAUSTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.RESOURCE_EXHAUSTED)


def header(**fields):
    return {"v": 1, "shard": 0, "n_shards": 1, "table": "user", "ids_dtype": "int64", "step": 1,
            "request_id": f"{os.urandom(6).hex()}-1", **fields}


def push(ids: bytes, grads: bytes, **fields):
    base = header(ids_bytes=len(ids), grads_bytes=len(grads), dim=8, dtype="float32", codec="raw")
    return wire.encode({k: v for k, v in {**base, **fields}.items() if v is not None}, ids, grads)


def pull(ids: bytes, **fields):
    base = header(ids_bytes=len(ids), create=True)
    return wire.encode({k: v for k, v in {**base, **fields}.items() if v is not None}, ids)


def framed(head: bytes, payload: bytes = b"") -> bytes:
    return struct.pack("<I", len(head)) + head + payload


IDS = np.arange(4, dtype=np.int64).tobytes()
NEW = np.arange(10_000, 10_004, dtype=np.int64).tobytes()  # ids the server has not seen
GRADS = np.ones((4, 8), np.float32).tobytes()
NAN = np.full((4, 8), np.nan, np.float32).tobytes()
HUGE = np.full((4, 8), 3e38, np.float32).tobytes()
FAR = np.full((4, 8), 1e19, np.float32).tobytes()  # finite, past ps.limits.max_gradient
DEEP = b"[" * 60_000 + b"]" * 60_000
LONG = "t" * 12_000  # under the header limit: the field itself is refused
CORPUS = {
    "empty message": ("Push", b"", INVALID, "too short"),
    "header not json": ("Push", b"\x05\x00\x00\x00{oops", INVALID, "header"),
    "header length past the message": ("Push", b"\xff\x00\x00\x00{}", INVALID, "does not fit"),
    "header not an object": ("Push", framed(b"[1]"), INVALID, "JSON object"),
    "60,000-deep nesting": ("Push", framed(DEEP[:16000]), INVALID, "nested deeper"),
    "deep nesting in a field": ("Pull", framed(b'{"x":' + b"[" * 8 + b"]" * 8 + b"," +
                                               json.dumps(header(ids_bytes=0)).encode()[1:]), INVALID, "nested deeper"),
    "brackets in strings do not count": ("Pull", framed(b'{"x":"' + b"[" * 99 + b'",' +
                                                        json.dumps(header(ids_bytes=0)).encode()[1:]), INVALID,
                                         "unknown field 'x'"),
    "a header over 16 KiB": ("Pull", pull(IDS, table="t" * 20_000), INVALID, "over the 16384-byte limit"),
    "a 5000-digit integer": ("Pull", framed(b'{"v":1,"shard":0,"n_shards":1,"step":' + b"9" * 5000 + b"}"),
                             INVALID, "header"),
    "ids not multiple of 8": ("Push", push(IDS[:12], GRADS), INVALID, "ids_bytes"),
    "ids_bytes past the payload": ("Pull", pull(IDS, ids_bytes=800), INVALID, "ids_bytes"),
    "ids without a dtype": ("Pull", pull(IDS, ids_dtype=None), INVALID, "ids_dtype"),
    "ids of another dtype": ("Pull", pull(IDS, ids_dtype="int32"), INVALID, "ids_dtype"),
    "grads length": ("Push", push(IDS, GRADS[:-4]), INVALID, "grads_bytes"),
    "unknown codec": ("Push", push(IDS, GRADS, codec="zstd"), INVALID, "codec"),
    "unknown kind": ("Push", push(IDS, GRADS, kind="sum"), INVALID, "kind"),
    "unknown dtype": ("Push", push(IDS, GRADS, dtype="float16"), INVALID, "dtype"),
    "unknown field": ("Push", push(IDS, GRADS, colour="blue"), INVALID, "unknown field 'colour'"),
    "a 12 KB unknown field": ("Pull", pull(IDS, **{LONG: 1}), INVALID, r"unknown field 'tttt.*12000 characters"),
    "wrong dim": ("Push", push(IDS, np.ones((4, 5), np.float32).tobytes(), dim=5), INVALID, r"\(4, 8\)"),
    "dim a bool": ("Push", push(IDS, GRADS, dim=True), INVALID, "dim: expected int, got bool"),
    "nan gradient": ("Push", push(IDS, NAN), INVALID, "NaN"),
    "a finite 1e19 gradient": ("Push", push(IDS, FAR), INVALID, r"reach 1e\+19 .*past ps.limits.max_gradient = 1e\+09"),
    "gradients that overflow a new row": ("Push", push(NEW[:8] * 4, HUGE, kind="delta", step=2), INVALID,
                                          "NaN or Inf"),
    "unknown table": ("Push", push(IDS, GRADS, table="x"), INVALID, "unknown table"),
    "a 12 KB table name": ("Pull", pull(IDS, table=LONG), INVALID, r"unknown table 'tttt.*12000 characters"),
    "table a number": ("Pull", pull(IDS, table=7), INVALID, "table: expected str"),
    "wrong protocol": ("Push", push(IDS, GRADS, v=7), PRECONDITION, "protocol version"),
    "protocol a bool": ("Push", push(IDS, GRADS, v=True), PRECONDITION, "protocol version of type bool"),
    "wrong shard": ("Push", push(IDS, GRADS, shard=1, n_shards=2), PRECONDITION, "shard"),
    "shard false, n_shards true": ("Push", push(IDS, GRADS, shard=False, n_shards=True), PRECONDITION,
                                   "shard of type bool"),
    "no request id": ("Push", push(IDS, GRADS, request_id=None), INVALID, "request_id"),
    "request id not CLIENT-SEQ": ("Push", push(NEW, GRADS, request_id="free text"), INVALID, "CLIENT-SEQ"),
    "a 12 KB request id": ("Push", push(NEW, GRADS, request_id="r" * 12_000), INVALID, "12000 characters"),
    "request id a number": ("Pull", pull(NEW, request_id=12), INVALID, "request_id: expected str"),
    "origin without workers": ("Push", push(IDS, GRADS, worker=1, combine=True, parts=3), INVALID,
                               "workers: expected int, got nothing"),
    "origin with null workers": ("Push", wire.encode({**header(ids_bytes=32, grads_bytes=128, dim=8, dtype="float32"),
                                                      "workers": None, "worker": 0}, IDS, GRADS), INVALID, "workers"),
    "origin with a null part": ("Push", wire.encode({**header(ids_bytes=32, grads_bytes=128, dim=8, dtype="float32"),
                                                     "workers": 2, "worker": 0, "part": None}, IDS, GRADS), INVALID,
                                "part: expected int, got null"),
    "origin worker past workers": ("Push", push(IDS, GRADS, worker=2, workers=2), INVALID, "worker 2 of 2"),
    "origin part past parts": ("Push", push(IDS, GRADS, worker=0, workers=2, part=3, parts=3), INVALID, "part 3 of 3"),
    "origin combine an int": ("Push", push(IDS, GRADS, worker=0, workers=2, combine=1), INVALID,
                              "combine: expected bool"),
    "origin staleness negative": ("Push", push(IDS, GRADS, worker=0, workers=2, staleness=-1), INVALID, "staleness"),
    "origin far ahead of the slowest": ("Push", push(IDS, GRADS, worker=0, workers=2, step=65), INVALID,
                                        "more than 64 steps ahead"),  # the server's clock is at 1: within its window
    "a push from the future": ("Push", push(IDS, GRADS, step=2**32 - 1), INVALID, "past this server's clock"),
    "a pull from the future": ("Pull", pull(NEW, step=66), INVALID, "ps.limits.max_step_ahead = 64"),
    "bad step": ("Pull", pull(IDS, step=-5), INVALID, "step"),
    "step a bool": ("Pull", pull(IDS, step=True), INVALID, "step: expected int, got bool"),
    "create an int": ("Pull", pull(NEW, create=1), INVALID, "create: expected bool"),
    "save keeping steps the payload lacks": ("Save", wire.encode({"v": 1, "shard": 0, "n_shards": 1, "root": "ck",
                                                                  "step": 1, "keep": 3}, np.zeros(1, np.int64)),
                                             INVALID, "keep: 3 steps"),
    "load with commits not JSON": ("Load", wire.encode({"v": 1, "shard": 0, "n_shards": 1, "path": "ck/step-0000000001",
                                                        "phase": "prepare", "commits": 3}, b"{x}"), INVALID,
                                   "commits: not JSON"),
    "load with commits not a list": ("Load", wire.encode({"v": 1, "shard": 0, "n_shards": 1,
                                                          "path": "ck/step-0000000001", "phase": "prepare",
                                                          "commits": 7}, b'{"a":1}'), INVALID,
                                     "commits: must be a list"),
    "a part fed past its payload": ("Load", wire.encode({"v": 1, "shard": 0, "n_shards": 1,
                                                         "path": "ck/step-0000000001", "phase": "feed", "token": "t",
                                                         "end": 1, "total": 1, "arrays": [["ids", "int64", [10]]]},
                                                        IDS), INVALID,
                                    "arrays: 'ids' needs 80 bytes, the payload has 32 left"),
    "a part fed as objects": ("Load", wire.encode({"v": 1, "shard": 0, "n_shards": 1, "path": "ck/step-0000000001",
                                                   "phase": "feed", "token": "t", "end": 1, "total": 1,
                                                   "arrays": [["ids", "object", [4]]]}, IDS), INVALID, "arrays: "),
    "a part asked for with its commit not JSON": ("ReadPart", wire.encode(
        {"v": 1, "shard": 0, "n_shards": 1, "path": "ck/step-0000000001", "commit": 3, "step": 1, "part": 0,
         "table": "user", "into": "user", "kind": "rows", "lo": 0, "hi": 1, "to": 0}, b"{x}"), INVALID,
        "commit: not JSON"),
    "a part asked for of an unknown kind": ("ReadPart", wire.encode(
        {"v": 1, "shard": 0, "n_shards": 1, "path": "ck/step-0000000001", "commit": 2, "step": 1, "part": 0,
         "table": "user", "into": "user", "kind": "files", "lo": 0, "hi": 1, "to": 0}, b"{}"), INVALID,
        "need: table and into must be names, kind one of"),
    "save with a 12 KB path": ("Save", wire.encode({"v": 1, "shard": 0, "n_shards": 1, "root": LONG, "step": 1}),
                               INVALID, "not a usable path"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    c = Cluster(CONFIG, 1, tmp_path_factory.mktemp("ps"), max_message_mb=1,
                limits=StoreLimits(max_rows=100_000, max_new_rows_per_request=50_000))
    c.client.pull("user", KNOWN, step=1).wait()
    c.client.push("user", KNOWN, np.full((len(KNOWN), 8), 0.25, np.float32), step=1).wait()
    c.client.pull("item", KNOWN, step=1).wait()
    yield c
    c.stop()


def state(c) -> dict:
    """Digests and every row read back through the public API (a lookup-only pull changes nothing)."""
    probe = np.concatenate([KNOWN, np.frombuffer(NEW, np.int64), np.arange(100_000, 100_100, dtype=np.int64)])
    return {"digests": {t: c.client.digest(t) for t in ("user", "item")},
            "rows": [s["tables"] for s in c.client.stats()],
            "steps": [(s["clocks"], s["held"]) for s in c.client.stats()],
            "user": c.client.pull("user", probe, create=False).wait().tobytes(),
            "item": c.client.pull("item", probe, create=False).wait().tobytes()}


def serving(address) -> bool:
    with grpc.insecure_channel(address) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=wire.SERVICE), timeout=10)
    return status.status == health_pb2.HealthCheckResponse.SERVING


def assert_refused(c, method, message, code, text, metadata=AUTH):
    before = state(c)
    with pytest.raises(grpc.RpcError) as err:
        raw_call(c.addresses[0], method, message, metadata)
    details = err.value.details() or ""
    assert err.value.code() == code and re.search(text, details), (err.value.code(), details[:300])
    assert len(details) <= MAX_DETAILS and JOB not in details and TOKEN not in details
    assert state(c) == before
    c.stores[0].check()
    assert serving(c.addresses[0])
    return details


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_raw_bad_request_corpus(server, case):
    assert_refused(server, *CORPUS[case])


@pytest.mark.parametrize("metadata, code", [
    ((), grpc.StatusCode.UNAUTHENTICATED),
    ((("x-cardinal-job", "other"), ("x-cardinal-token", TOKEN)), grpc.StatusCode.PERMISSION_DENIED),
    ((("x-cardinal-job", JOB), ("x-cardinal-token", "guess")), grpc.StatusCode.PERMISSION_DENIED),
])
def test_requests_of_another_job_or_with_a_wrong_token_are_refused(server, metadata, code):
    assert_refused(server, "Push", push(NEW, GRADS), code, ".", metadata)  # the server's job is never named


def test_a_pull_whose_reply_cannot_fit_creates_nothing(server):
    ids = np.arange(200_000, 240_000, dtype=np.int64)  # 0.3 MiB of ids, 1.2 MiB of rows back: over 1 MiB
    assert_refused(server, "Pull", pull(ids.tobytes()), EXHAUSTED, "message limit.*nothing was created")


def test_more_rows_than_a_request_may_create_are_refused(server):
    ids = np.arange(300_000, 360_000, dtype=np.int64)  # 60,000 new rows, over 50,000; the reply would fit in 'item'
    assert_refused(server, "Pull", pull(ids.tobytes(), table="item"), EXHAUSTED, "max_new_rows_per_request")


def test_a_full_server_refuses_with_resource_exhausted(tmp_path):
    server = Cluster(CONFIG, 1, tmp_path, max_message_mb=1, limits=StoreLimits(max_rows=100_000))
    try:
        fill_and_refuse(server)
    finally:
        server.stop()


def fill_and_refuse(server):
    server.client.pull("user", KNOWN, step=1).wait()
    used = sum(t["rows"] for s in server.client.stats() for t in s["tables"].values())
    room = 100_000 - used
    ids = np.arange(400_000, 400_000 + room + 1, dtype=np.int64)
    for part in np.array_split(ids, 4)[:-1]:
        server.client.pull("item", part).wait()
    last = np.array_split(ids, 4)[-1]
    assert_refused(server, "Pull", pull(last.tobytes(), table="item"), EXHAUSTED, "store full")


def test_a_resend_with_another_payload_is_refused(server):
    rid = f"{os.urandom(6).hex()}-3"
    raw_call(server.addresses[0], "Push", push(IDS, GRADS, request_id=rid))
    assert_refused(server, "Push", push(IDS, GRADS[:-32] + np.full(8, 2.0, np.float32).tobytes(), request_id=rid),
                   INVALID, "used before for another request")
    raw_call(server.addresses[0], "Push", push(IDS, GRADS, request_id=rid))  # the same payload: acknowledged
    assert_refused(server, "Push", push(IDS, GRADS, request_id=rid, step=9), INVALID, "another request")


def test_an_update_that_would_overflow_is_refused(server):
    raw_call(server.addresses[0], "Push", push(IDS, HUGE, kind="delta"))
    assert_refused(server, "Push", push(IDS, HUGE, kind="delta"), INVALID, "NaN or Inf")


def test_a_1e19_gradient_is_refused_and_its_rows_train_on_as_if_it_never_came(tmp_path):
    """Adagrad: accepted, 1e19 would put 1e38 in the rows' accumulators, whose later steps of
    ordinary gradients then move them by ~1e-21 (frozen); refused, they train as a twin's do."""
    config = StoreConfig(CONFIG.tables, {"name": "adagrad", "lr": 0.1})
    server, twin = Cluster(config, 1, tmp_path), ShardStore(config)
    try:
        server.client.pull("user", KNOWN, step=1).wait()
        twin.pull("user", KNOWN, step=1)
        grad = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
        assert_refused(server, "Push", push(IDS, FAR), INVALID, "past ps.limits.max_gradient = 1e\\+09")
        for step in (2, 3):
            raw_call(server.addresses[0], "Push", push(IDS, grad.tobytes(), step=step))
            twin.push("user", np.frombuffer(IDS, np.int64), grad, step=step)
        rows = server.client.pull("user", np.frombuffer(IDS, np.int64), create=False).wait()
        np.testing.assert_array_equal(rows, twin.pull("user", np.frombuffer(IDS, np.int64), create=False))
        assert server.client.digest("user") == twin.tables["user"].digest()
    finally:
        server.stop()


def test_empty_pulls_and_pushes_work(server):
    empty = np.zeros(0, np.int64)
    before = state(server)
    assert server.client.pull("user", empty).wait().shape == (0, 8)
    server.client.push("user", empty, np.zeros((0, 8), np.float32)).wait()
    reply = raw_call(server.addresses[0], "Pull", pull(b""))
    head, rows = wire.decode(reply)
    assert head["dim"] == 8 and head["dtype"] == "float32" and len(rows) == 0
    raw_call(server.addresses[0], "Push", push(b"", b""))
    assert state(server) == before


def test_error_details_are_cut_to_fit_grpc_metadata():
    from cardinal.ps.server.servicer import _cut

    assert len(_cut("x" * 100_000)) <= MAX_DETAILS and _cut("short") == "short"

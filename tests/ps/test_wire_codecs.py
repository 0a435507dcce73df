"""Codecs on the wire: one per direction through PSClient, the same numbers on both transports,
a server that refuses what it cannot decode, and traffic counters at the codec's size."""

import os
import platform
import re
import subprocess
import sys

import grpc
import numpy as np
import pytest

from cardinal import codecs
from cardinal.embedding import TableConfig
from cardinal.ps import PSClient, StoreConfig, connect
from cardinal.sharding.routing import route
from cardinal.ps.transport import wire
from cardinal.ps.transport.grpc_transport import GrpcTransport
from helpers.cluster import JOB, TOKEN, Cluster, raw_call

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 3, seed=2)),
                     {"name": "adagrad", "lr": 0.05})
DIMS = {"user": 8, "item": 3}
PAIRS = [("fp32", "fp32"), ("fp16", "fp16"), ("bf16", "bf16"), ("int8", "int8"), ("bf16", "int8"), ("fp32", "fp16")]


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(n):
        made.append(Cluster(CONFIG, n, tmp_path / "ps"))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def train(client, steps=3, n=200, seed=7):
    """Pull and push as a worker does; returns every pulled array (to compare bit for bit)."""
    rng, pulled = np.random.default_rng(seed), []
    for step in range(1, steps + 1):
        for table, dim in DIMS.items():
            ids = rng.choice(np.arange(-500, 500, dtype=np.int64), n, replace=False)  # unique, as a worker's
            pulled.append(client.pull(table, ids, step=step).wait())
            client.push(table, ids, rng.standard_normal((n, dim)).astype(np.float32) * 3, step=step).wait()
    return pulled


def everything(client):
    ids = np.arange(-500, 500, dtype=np.int64)
    return {t: client.pull(t, ids, create=False).wait() for t in DIMS}


@pytest.mark.parametrize("pull_codec, push_codec", PAIRS)
def test_the_same_codecs_give_bitwise_the_same_numbers_on_both_transports(cluster, pull_codec, push_codec):
    c = cluster(2)
    small_chunks = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, chunk_mb=0.005)  # ~40 rows a message
    remote = PSClient(small_chunks, pull_codec=pull_codec, push_codec=push_codec)
    local = connect(CONFIG, 2, concurrent=True)
    local = PSClient(local.transport, pull_codec=pull_codec, push_codec=push_codec)
    reference = connect(CONFIG, 2)  # fp32 both ways: the codec must show
    got, want, plain = train(remote), train(local), train(reference)
    for a, b in zip(got, want):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
    final_remote, final_local = everything(remote), everything(local)
    for t in DIMS:
        assert final_remote[t].tobytes() == final_local[t].tobytes()
        assert remote.digest(t) == local.digest(t)
    codec = codecs.get(pull_codec)
    for rows in got:  # what was pulled is what the pull codec can represent
        assert codec.roundtrip(rows).tobytes() == rows.tobytes()
    if (pull_codec, push_codec) != ("fp32", "fp32"):
        assert any(a.tobytes() != b.tobytes() for a, b in zip(got, plain))
    if push_codec != "fp32":  # the servers trained on the decoded gradients: their tables differ from fp32's
        assert remote.digest("user") != reference.digest("user")
    small_chunks.close()


def _header(ids, **fields):
    return {"v": 1, "shard": 0, "n_shards": 2, "table": "user", "ids_bytes": ids.nbytes, "ids_dtype": "int64",
            "step": 9, "request_id": f"{os.urandom(6).hex()}-1", **fields}


def test_the_server_refuses_unknown_codecs_and_wrong_sizes_changing_nothing(cluster):
    c = cluster(2)
    client = PSClient(c.client.transport, pull_codec="bf16", push_codec="int8")
    train(client, steps=1)
    ids = np.arange(-500, 500, dtype=np.int64)
    ids = ids[route(ids, 2) == 0][:20]  # shard 0's, known and new
    new = np.arange(10**9, 10**9 + 5, dtype=np.int64)
    new = new[route(new, 2) == 0]
    grads = np.ones((len(ids), 8), np.float32)
    bf16 = codecs.get("bf16").encode(grads)
    cases = [
        ("Pull", wire.encode(_header(new, codec="zstd"), new), r"codec: unknown codec 'zstd'"),
        ("Pull", wire.encode(_header(new, codec=7), new), r"codec: expected str"),
        ("Push", wire.encode(_header(ids, grads_bytes=bf16.nbytes, dim=8, dtype="float32", codec="int9"), ids, bf16),
         r"codec: unknown codec 'int9'; this server reads \['fp32', 'fp16', 'bf16', 'int8'\]"),
        ("Push", wire.encode(_header(ids, grads_bytes=grads.nbytes, dim=8, dtype="float32", codec="bf16"), ids, grads),
         r"grads_bytes: \d+ is not len\(ids\) x the bf16 row's bytes"),
        ("Push", wire.encode(_header(ids, grads_bytes=bf16.nbytes - 2, dim=8, dtype="float32", codec="bf16"),
                             ids, bf16[:-2]), r"grads_bytes"),
        ("Push", wire.encode(_header(ids, grads_bytes=bf16.nbytes, dim=8, dtype="float32", codec="int8"), ids, bf16),
         r"grads_bytes: \d+ is not len\(ids\) x the int8 row's bytes"),
    ]
    before = client.digest("user"), everything(client)
    for method, message, text in cases:
        with pytest.raises(grpc.RpcError) as err:
            raw_call(c.addresses[0], method, message)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert re.search(text, err.value.details()), err.value.details()
    after = client.digest("user"), everything(client)
    assert after[0] == before[0]
    for t in DIMS:
        assert after[1][t].tobytes() == before[1][t].tobytes()
    assert not client.pull("user", new, create=False).wait().any()  # the refused pulls created no row
    for s in c.stores:
        s.check()


def test_a_pull_reply_is_checked_against_the_codec_asked_for():
    rows = np.ones((3, 4), np.float32)
    bf16 = codecs.get("bf16")
    payload = memoryview(bf16.encode(rows).tobytes())
    header = {"dim": 4, "dtype": "float32", "codec": "bf16"}
    np.testing.assert_array_equal(wire.rows_from_reply(header, payload, 3, bf16), rows)
    with pytest.raises(wire.WireError, match="a pull reply of 'fp16' rows"):
        wire.rows_from_reply({**header, "codec": "fp16"}, payload, 3, bf16)
    with pytest.raises(wire.WireError, match="a pull reply of 24 bytes for 4 rows"):
        wire.rows_from_reply(header, payload, 4, bf16)


def test_payloads_start_aligned_and_a_blank_message_is_written_in_place():
    """The header is padded so that a message's arrays are aligned views (``wire.ALIGN``); a pull's
    reply is a message whose rows the table writes into before it is sent (``encode_blank``)."""
    ids = np.arange(5, dtype=np.int64)
    for k in range(2 * wire.ALIGN):
        message = wire.encode({"table": "t" * k}, ids)
        header, payload = wire.decode(message)
        assert header == {"table": "t" * k} and (len(message) - len(payload)) % wire.ALIGN == 0
        np.testing.assert_array_equal(np.frombuffer(payload, np.int64), ids)
        message, into = wire.encode_blank({"table": "t" * k}, 12)
        into[:] = np.arange(12, dtype=np.uint8)
        header, payload = wire.decode(message)
        assert type(message) is bytes and header == {"table": "t" * k} and bytes(payload) == bytes(range(12))
        assert into.ctypes.data % wire.ALIGN == 0


def test_an_unknown_codec_is_refused_by_the_client():
    with pytest.raises(ValueError, match=r"unknown codec 'bf17'; the codecs are \['fp32', 'fp16', 'bf16', 'int8'\]"):
        PSClient(connect(CONFIG, 1).transport, pull_codec="bf17")
    with pytest.raises(ValueError, match="unknown codec 'raw'"):
        PSClient(connect(CONFIG, 1).transport, push_codec="raw")


@pytest.mark.parametrize("remote", [False, True])
def test_traffic_counts_rows_at_their_codec_size(cluster, remote):
    transport = GrpcTransport(cluster(2).addresses, JOB, TOKEN, shared_memory=False) if remote \
        else connect(CONFIG, 2).transport  # rows in the replies: not in shared memory (test_shared_rows.py)
    client = PSClient(transport, pull_codec="bf16", push_codec="int8")
    ids = np.arange(100, dtype=np.int64)
    handle = client.pull("user", ids)
    handle.wait()
    handle.wait()  # waited on twice, counted once
    client.push("user", ids[:30], np.ones((30, 8), np.float32)).wait()
    client.pull("item", ids[:10]).wait()
    client.pull("item", ids[:7], create=False).wait()  # evaluation: counted apart
    m = client.metrics()
    assert {k: m[k] for k in ("pull_ids", "pull_row_bytes", "push_ids", "push_row_bytes", "lookup_ids",
                              "lookup_row_bytes")} == {
        "pull_ids": 110, "pull_row_bytes": 100 * 8 * 2 + 10 * 3 * 2, "push_ids": 30, "push_row_bytes": 30 * (8 + 4),
        "lookup_ids": 7, "lookup_row_bytes": 7 * 3 * 2}
    if remote:  # whole messages: ids, rows, headers; at least the rows and ids each way
        assert m["message_bytes_received"] > m["pull_row_bytes"]
        assert m["message_bytes_sent"] > m["push_row_bytes"] + 8 * (110 + 30 + 7)
    else:
        assert "message_bytes_sent" not in m


def test_the_recipe_names_the_codecs_there_are():
    from cardinal.recipe import load
    from cardinal.recipe.wire import CODECS

    assert CODECS == codecs.NAMES
    with pytest.raises(ValueError, match=r"wire.pull must be one of \['fp32', 'fp16', 'bf16', 'int8'\], got 'fp8'"):
        load(None, ['wire.pull="fp8"'])



FAULTS = """
import resource, sys, threading
import numpy as np
from cardinal.ps.transport import heap
{make}
def replies(out):  # message buffers of varying sizes, freed as soon as sent, on a server thread
    sizes = [3 << 20, 16 << 20, 9 << 20]
    for size in sizes:
        np.ones(size, np.uint8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for size in sizes * 10:
        np.ones(size, np.uint8)
    out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
out = []
t = threading.Thread(target=replies, args=(out,))
t.start()
t.join()
print(heap._done, out[0])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only: elsewhere the heap settings do nothing")
@pytest.mark.parametrize("make", [
    "from cardinal.ps.transport.grpc_transport import GrpcTransport\nGrpcTransport(['127.0.0.1:1'], 'j', 't').close()",
    "from cardinal.ps.server.servicer import ShardServicer; ShardServicer(None, '.', 'j', 't')",
    "pass"])
@pytest.mark.slow
def test_servers_keep_freed_message_buffers(make):
    """heap.py: memory freed by one reply is reused by the next instead of being faulted in again
    (counted in page faults, not time). Each in a fresh process, since the setting is per process.
    A gRPC client leaves its process (a training worker's) as glibc made it: see the next test."""
    done = subprocess.run([sys.executable, "-c", FAULTS.format(make=make)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    took, faults = done.stdout.split()
    if "ShardServicer" not in make:  # glibc's defaults: the control, which shows the test can tell
        assert took == "None" and int(faults) > 200
    else:
        assert took == "True" and int(faults) < 50, (took, faults)


@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize("codec, big", [("fp16", 7e4), ("fp16", -65520.0), ("bf16", 3.4e38)])
def test_a_push_the_codec_cannot_carry_is_refused_whole_naming_the_codec(cluster, remote, codec, big):
    """Finite gradients past the codec's range would arrive as inf on one shard only: that shard would
    refuse its part ("NaN or Inf ... lower the learning rate") while the others applied theirs. The
    client refuses the whole push first, naming wire.push, and no shard changes."""
    transport = GrpcTransport(cluster(2).addresses, JOB, TOKEN, shared_memory=False) if remote \
        else connect(CONFIG, 2).transport  # rows in the replies: not in shared memory (test_shared_rows.py)
    client = PSClient(transport, push_codec=codec)
    ids = np.arange(-500, 500, dtype=np.int64)
    client.pull("user", ids).wait()
    before = client.digest("user"), client.pull("user", ids, create=False).wait().copy()
    grads = np.ones((len(ids), 8), np.float32)
    grads[np.flatnonzero(route(ids, 2) == 1)[3], 5] = big  # one value, on shard 1; shard 0's part is fine
    with pytest.raises(ValueError, match=rf"first at row \d+.*push codec '{codec}' \(wire.push\).*use 'bf16'"):
        client.push("user", ids, grads, step=1).wait()
    assert client.digest("user") == before[0]
    assert client.pull("user", ids, create=False).wait().tobytes() == before[1].tobytes()
    edge = np.float32(codecs.get(codec).overflow)  # the codec's bound is where inf begins, exactly
    assert np.isinf(codecs.get(codec).roundtrip(np.array([[edge, -edge]], np.float32))).all()
    inside = np.nextafter(edge, np.float32(0))
    assert np.isfinite(codecs.get(codec).roundtrip(np.array([[inside, -inside]], np.float32))).all()
    if codec == "fp16":
        grads[:] = inside
        client.push("user", ids, grads, step=2).wait()  # just inside the range: sent
        assert client.digest("user") != before[0]


def test_fp32_in_process_pays_no_codec_work(monkeypatch):
    """The default (fp32, embedded) must cost what it did before codecs: rows and gradients go to
    and from the stores as they are, without a pass through the codec (measured: about 5% of a
    small batch's pull when each shard's rows took fp32's checked round trip)."""
    client = connect(CONFIG, 2)
    ids = np.arange(-50, 50, dtype=np.int64)

    def touched(*args, **kwargs):
        raise AssertionError("the fp32 codec was called on the in-process path")
    for name in ("encode", "decode", "roundtrip"):
        monkeypatch.setattr(codecs.get("fp32"), name, touched)
    rows = client.pull("user", ids, step=1).wait()
    client.push("user", ids, np.ones((len(ids), 8), np.float32), step=1).wait()
    assert not np.array_equal(client.pull("user", ids, create=False).wait(), rows)


HELD = """
import sys, threading
import numpy as np
{make}
def rss_mib():
    return next(int(line.split()[1]) >> 10 for line in open("/proc/self/status") if line.startswith("VmRSS"))
allocated = threading.Barrier(8)  # every array made before any is freed: glibc's dynamic mmap threshold,
def work():                       # raised by a thread's first free, then routes the rest alike each run
    arrays = [np.ones(4 << 20, np.uint8) for _ in range(25)]  # a training worker's threads: arrays of a few MiB
    allocated.wait()
    del arrays
base = rss_mib()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(rss_mib() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only: elsewhere the heap settings do nothing")
@pytest.mark.parametrize("make", [
    "from cardinal.ps.transport.grpc_transport import GrpcTransport\nGrpcTransport(['127.0.0.1:1'], 'j', 't').close()",
    "from cardinal.ps.transport import heap; heap.keep_freed_buffers()"])
@pytest.mark.slow
def test_a_gRPC_client_leaves_its_process_memory_as_glibc_made_it(make):
    """The heap settings are process-wide: in a training worker they kept every thread's freed
    arrays resident (8 threads freeing 100 MiB each kept about 680 MiB, against 36 without).
    A server is a process of its own and keeps them (above); a client must not. The control (the
    settings taken) shows the test can tell."""
    done = subprocess.run([sys.executable, "-c", HELD.format(make=make)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    held = int(done.stdout)
    if "GrpcTransport" in make:  # 0-1 MiB seen (36-345 before the barrier: the threshold raced the threads)
        assert held < 100, held
    else:  # 520-680 MiB seen
        assert held > 400, held


def test_fp32_requests_are_read_by_servers_from_before_codecs(cluster, monkeypatch):
    """A server from before codecs (protocol 1 too) takes no "codec" in a Pull and only "raw" in a
    Push: a new client with the default fp32 writes exactly that, so workers can be upgraded before
    their servers. Here the servers are made to read as the old ones did."""
    c = cluster(2)
    old_pull = {k: v for k, v in wire.SCHEMAS["Pull"].items() if k != "codec"}
    monkeypatch.setitem(wire.SCHEMAS, "Pull", old_pull)
    real = wire.codec_of

    def old_codec_of(header):
        if header.get("codec", "raw") != "raw":
            raise wire.WireError(f"codec: unknown codec {header['codec']!r}; this server reads ['raw']")
        return real(header)
    monkeypatch.setattr(wire, "codec_of", old_codec_of)
    client = PSClient(c.client.transport)
    ids = np.arange(-50, 50, dtype=np.int64)
    rows = client.pull("user", ids, step=1).wait()
    client.push("user", ids, np.ones((len(ids), 8), np.float32), step=1).wait()
    assert not np.array_equal(client.pull("user", ids, create=False).wait(), rows)
    with pytest.raises(ValueError, match="unknown codec 'bf16'"):  # a codec the old server lacks: named
        PSClient(c.client.transport, push_codec="bf16").push("user", ids, np.ones((len(ids), 8), np.float32)).wait()



@pytest.mark.parametrize("remote", [False, True])
def test_rows_the_pull_codec_cannot_carry_are_an_error_naming_it(tmp_path, remote):
    """A row past fp16's range would arrive as inf and the model's loss turn NaN far from the cause;
    the client says which table and codec instead."""
    sgd = StoreConfig(CONFIG.tables, {"name": "sgd", "lr": 1.0})
    made = Cluster(sgd, 2, tmp_path) if remote else None
    try:
        transport = made.client.transport if remote else connect(sgd, 2).transport
        ids = np.arange(-20, 20, dtype=np.int64)
        plain = PSClient(transport)
        plain.pull("user", ids).wait()
        grads = np.zeros((len(ids), 8), np.float32)
        grads[7, 2] = -1e5  # row 7 reaches about 1e5, past fp16's 65504
        plain.push("user", ids, grads, step=1).wait()
        with pytest.raises(ValueError, match=r"table 'user'.*pull codec 'fp16' \(wire.pull\).*first at row 7.*'bf16'"):
            PSClient(transport, pull_codec="fp16").pull("user", ids).wait()
        fine = PSClient(transport, pull_codec="fp16").pull("user", ids[:7]).wait()  # the other rows: as ever
        assert fine.tobytes() == codecs.get("fp16").roundtrip(plain.pull("user", ids[:7]).wait()).tobytes()
    finally:
        if made is not None:
            made.stop()

"""Parameter servers over gRPC: the same cases as in-process, a raw bad-request corpus, restarts,
retries, message limits, and ``cardinal server`` as a real process."""

import concurrent.futures as cf
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types

import grpc
import numpy as np
import pytest

from cardinal.checkpoint import chain
from cardinal.embedding import TableConfig
from cardinal.ps import PSClient, ShardStore, StoreConfig, connect
from cardinal.ps.server.process import READY, ServerOptions, ShardServer
from cardinal.ps.server.servicer import ShardServicer
from cardinal.ps.transport import grpc_transport, wire
from cardinal.ps.transport.grpc_transport import GrpcTransport, ServerRestarted, ShardRequestError
from cardinal.ps.transport.requests import PullRequest, PushRequest
from cardinal.sharding.routing import route
from helpers.checkpoint_edit import reseal
from helpers.cluster import JOB, TOKEN, Cluster, raw_call

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adam", "lr": 0.01})
@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(n, **kwargs):
        c = Cluster(CONFIG, n, tmp_path / "ps", **kwargs)
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()


def train(client, rng, steps=3, n=300):
    for step in range(1, steps + 1):
        for table, dim in (("user", 8), ("item", 4)):
            ids = rng.integers(-2000, 2000, n).astype(np.int64)
            client.pull(table, ids, step=step).wait()
            client.push(table, ids, rng.standard_normal((n, dim)).astype(np.float32), step=step).wait()


def test_grpc_tables_are_bitwise_equal_to_the_embedded_default(cluster):
    remote, local = cluster(3).client, connect(CONFIG, 1)
    train(remote, np.random.default_rng(4))
    train(local, np.random.default_rng(4))
    for table in ("user", "item"):
        assert remote.digest(table) == local.digest(table)


def test_grpc_bad_requests_are_named_and_change_nothing(cluster):
    """Sent as raw bytes, past the client's own checks, so the server is what refuses them."""
    c = cluster(2)
    train(c.client, np.random.default_rng(1), steps=1)
    known = np.arange(-2000, 2000, dtype=np.int64)
    before = c.client.digest("user"), c.client.pull("user", known, create=False).wait()
    ids = np.arange(10, dtype=np.int64)
    ids = ids[route(ids, 2) == 0]
    grads = np.ones((len(ids), 8), np.float32)
    grads[1, 1] = np.inf
    cases = [("Pull", _pull_message(ids, table="nope", n_shards=2), "unknown table 'nope'"),
             ("Push", _push(ids.tobytes(), grads.tobytes(), n_shards=2), "NaN or Inf"),
             ("Push", _push(ids.tobytes(), np.ones((len(ids), 5), np.float32).tobytes(), dim=5, n_shards=2),
              r"\(len\(ids\), dim\)")]
    for method, message, text in cases:
        with pytest.raises(grpc.RpcError) as err:
            raw_call(c.addresses[0], method, message)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and re.search(text, err.value.details())
    after = c.client.digest("user"), c.client.pull("user", known, create=False).wait()
    assert after[0] == before[0] and after[1].tobytes() == before[1].tobytes()
    for s in c.stores:
        s.check()


def _values(client):
    """Every id train() can touch, pulled without creating rows, as raw bits."""
    ids = np.arange(-2000, 2000, dtype=np.int64)
    return {t: client.pull(t, ids, create=False).wait().view(np.uint32) for t in ("user", "item")}


def test_grpc_checkpoint_reshards_into_the_embedded_default(cluster):
    c = cluster(2)
    train(c.client, np.random.default_rng(2))
    saved = _values(c.client)
    root = c.data_dir / "ckpt"
    c.client.save(str(root), step=3)
    target = connect(CONFIG, 3)
    assert target.load(root)["step"] == 3
    for t, rows in _values(target).items():
        np.testing.assert_array_equal(rows, saved[t])
    assert target.digest("user") == c.client.digest("user")
    for n in (1, 2):  # resharded, and the same layout
        back = cluster(n)
        back.client.load(str(root / "step-0000000003"))
        for t, rows in _values(back.client).items():
            np.testing.assert_array_equal(rows, saved[t])
        assert back.client.digest("item") == c.client.digest("item")


def test_grpc_load_of_a_checkpoint_one_shard_refuses_changes_no_shard(cluster):
    c = cluster(2)
    train(c.client, np.random.default_rng(2))
    root = c.data_dir / "ckpt"
    c.client.save(str(root), step=3)
    step = root / "step-0000000003"
    ids = np.load(step / "shard-00001-of-00002" / "user.ids.npy")
    np.save(step / "shard-00001-of-00002" / "user.ids.npy", np.concatenate([ids[:-1], ids[:1]]))  # a duplicate
    reseal(step)
    train(c.client, np.random.default_rng(5), steps=1)
    before, digests = _values(c.client), [c.client.digest(t) for t in ("user", "item")]
    with pytest.raises(ValueError, match=r"shard 1 refused it: .*user\.ids\.npy.*duplicate ids"):
        c.client.load(str(step))
    assert [c.client.digest(t) for t in ("user", "item")] == digests
    for t, rows in _values(c.client).items():
        np.testing.assert_array_equal(rows, before[t])
    for s in c.stores:
        assert s._staged is None  # the prepared shard 0 aborted: no second copy left behind


def _push(ids: bytes, grads: bytes, **header):
    base = {"v": 1, "shard": 0, "n_shards": 1, "table": "user", "ids_bytes": len(ids), "ids_dtype": "int64",
            "grads_bytes": len(grads), "dim": 8, "dtype": "float32", "codec": "raw", "step": 1,
            "request_id": f"{os.urandom(6).hex()}-1"}
    return wire.encode({**base, **header}, ids, grads)


def _pull_message(ids: np.ndarray, **header):
    base = {"v": 1, "shard": 0, "n_shards": 1, "table": "user", "ids_bytes": ids.nbytes, "ids_dtype": "int64"}
    return wire.encode({**base, **header}, ids)


IDS = np.arange(4, dtype=np.int64).tobytes()
GRADS = np.ones((4, 8), np.float32).tobytes()


def test_a_retried_push_is_applied_once(cluster):
    c = cluster(1)
    message = _push(IDS, GRADS)
    raw_call(c.addresses[0], "Push", message)
    once = c.stores[0].tables["user"].digest()
    raw_call(c.addresses[0], "Push", message)
    assert c.stores[0].tables["user"].digest() == once


def test_oversized_messages_are_refused_and_large_pulls_split(cluster):
    c = cluster(1, max_message_mb=1)
    ids = np.arange(100_000, dtype=np.int64)  # 0.8 MB of ids, 3.2 MB of rows back
    rows = c.client.pull("user", ids).wait()
    assert rows.shape == (100_000, 8)
    rows_before = len(c.stores[0].tables["user"])
    with pytest.raises(grpc.RpcError) as err:
        raw_call(c.addresses[0], "Pull", _pull_message(np.arange(1 << 18, 1 << 19, dtype=np.int64)))  # 2 MiB of ids
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(c.stores[0].tables["user"]) == rows_before


def test_a_pull_whose_reply_would_pass_the_limit_creates_nothing_in_a_table_of_no_rows(cluster):
    """The reply-size check runs before the pull: a table holding no row yet included."""
    c = cluster(1, max_message_mb=1)
    raw = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, max_message_mb=64)  # sends the pull whole...
    raw._follow = lambda shard, limits: None  # ...not told the server's limit (an old or a hostile client)
    try:
        with pytest.raises(ShardRequestError, match="needs a 1.2 MiB reply, over this server's message limit"):
            raw.pull(0, PullRequest("user", np.arange(40_000, dtype=np.int64), True, 1)).wait()
    finally:
        raw.close()
    assert len(c.stores[0].tables["user"]) == 0


def test_a_client_sizes_its_calls_as_the_server_reads_them(cluster):
    """A server says in Stats how large a message it reads and how many calls at once (less under a
    memory budget: ps/server/process_memory.py); a client sends its pulls and pushes in such pieces."""
    c = cluster(1, max_message_mb=1, max_concurrency=3)
    client = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, max_message_mb=64, chunk_mb=4.0, max_in_flight=16)
    try:
        ids = np.arange(40_000, dtype=np.int64)
        rows = client.pull(0, PullRequest("user", ids, True, 1)).wait()  # 1.2 MiB of rows: two calls
        assert rows.shape == (40_000, 8) and (client._message[0], client._calls[0]) == (1 << 20, 3)
        client.push(0, PushRequest("user", ids, np.ones_like(rows), 1)).wait()
        one_of_two = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, max_in_flight=16, share=2)  # two workers
        one_of_two.stats(0).wait()
        assert one_of_two._calls[0] == 1  # its part of the server's 3 calls
        one_of_two.close()
    finally:
        client.close()
    assert len(c.stores[0].tables["user"]) == 40_000


def test_a_restarted_server_is_noticed(cluster, tmp_path):
    c = cluster(2)
    train(c.client, np.random.default_rng(0), steps=1)
    port = c.servers[1].port
    c.servers[1].stop(0)
    fresh = ShardServer(ShardStore(CONFIG, 1, 2), tmp_path / "ps", JOB, TOKEN, ServerOptions(port=port)).start()
    try:
        ids = np.arange(200, dtype=np.int64)
        with pytest.raises(ServerRestarted, match=f"shard 1 at 127.0.0.1:{port} restarted"):
            c.client.pull("user", ids).wait()
    finally:
        fresh.stop(0)


@contextlib.contextmanager
def server_process(tmp_path, *sets: str):
    """A real ``cardinal server`` (shard 0 of 1, dim 4): yields (process, its READY line's fields);
    it must exit 0 on SIGTERM, and is killed whatever happens."""
    env = {**os.environ, "CARDINAL_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", str(tmp_path),
           *sum((["--set", x] for x in [f'ps.job="{JOB}"', "embedding.dim=4", *sets]), [])]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(READY), line + proc.stderr.read()
        yield proc, dict(part.split("=", 1) for part in line.split()[1:])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_server_process_reports_its_port_and_stops_cleanly_on_sigterm(tmp_path):
    with server_process(tmp_path) as (_, fields):
        client = connect(servers=[f"127.0.0.1:{fields['port']}"], job=JOB, token=TOKEN, timeout=20)
        assert client.pull("emb", np.arange(5, dtype=np.int64)).wait().shape == (5, 5)  # DeepFM: dim + 1
        assert client.health()[0]["incarnation"] == fields["incarnation"]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_server_process_takes_its_limits_from_the_recipe(tmp_path):
    with server_process(tmp_path, "ps.limits.max_message_mb=1", "ps.limits.max_rows=100",
                        "ps.limits.max_concurrent_calls=3") as (_, fields):
        address = f"127.0.0.1:{fields['port']}"
        client = connect(servers=[address], job=JOB, token=TOKEN, timeout=20, max_message_mb=1)
        client.pull("emb", np.arange(100, dtype=np.int64)).wait()
        with pytest.raises(ShardRequestError, match="RESOURCE_EXHAUSTED.*store full.*ps.limits.max_rows = 100"):
            client.pull("emb", np.arange(100, 101, dtype=np.int64)).wait()
        with pytest.raises(grpc.RpcError) as err:  # 1.5 MiB of ids: over the 1 MiB message limit
            with grpc.insecure_channel(address) as ch:
                ch.unary_unary(f"/{wire.SERVICE}/Pull")(_pull_message(np.arange(200_000, dtype=np.int64), table="emb"),
                                                   metadata=(("x-cardinal-job", JOB), ("x-cardinal-token", TOKEN)),
                                                   timeout=20)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "1048576" in err.value.details()
        assert client.stats()[0]["tables"]["emb"]["rows"] == 100


@pytest.mark.slow
def test_server_refuses_to_start_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CARDINAL_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "cardinal.cli", "server", "--shard", "0/1", "--data-dir", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no job token" in proc.stderr


@contextlib.contextmanager
def frozen_pulls(store):
    """The store's pulls block until the block ends: a servicer that hangs, as a frozen process does."""
    gate, entered = threading.Event(), threading.Event()
    real = store.pull

    def blocked(*args, **kwargs):
        entered.set()
        gate.wait(60)
        return real(*args, **kwargs)
    store.pull = blocked
    try:
        yield entered
    finally:
        gate.set()
        del store.pull


def test_calls_beyond_the_concurrency_limit_are_refused_and_change_nothing(cluster):
    c = cluster(1, max_concurrency=1, threads=4)
    ids = np.arange(1000, dtype=np.int64)
    c.stores[0].pull("item", ids)
    before = c.stores[0].tables["item"].digest(), c.client.pull("item", ids, create=False).wait()
    message = _pull_message(ids, table="item", create=False)

    def call():
        try:
            raw_call(c.addresses[0], "Pull", message)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    with cf.ThreadPoolExecutor(1) as pool, frozen_pulls(c.stores[0]) as entered:
        first = pool.submit(call)
        assert entered.wait(20)  # one call in flight: the limit
        assert call() == "RESOURCE_EXHAUSTED"
    assert first.result(20) == "OK"
    after = c.stores[0].tables["item"].digest(), c.client.pull("item", ids, create=False).wait()
    assert after[0] == before[0] and after[1].tobytes() == before[1].tobytes()


def test_a_client_backs_off_when_its_own_requests_exceed_the_limit(cluster):
    c = cluster(1, max_concurrency=1, threads=4)
    rows = c.client.pull("item", np.arange(600_000, dtype=np.int64)).wait()  # several chunks at once
    assert rows.shape == (600_000, 4)


@pytest.mark.parametrize("in_flight", [1, 2])
def test_a_client_keeps_its_calls_within_the_servers_limit(cluster, monkeypatch, in_flight):
    """Many tables' pulls sent at once (a step's fan-out) wait for a free call at the client
    instead of being refused by the server and backing off (now and then a refusal remains: the
    server counts a call a moment past its answer)."""
    backoffs = []
    monkeypatch.setattr(grpc_transport, "time", types.SimpleNamespace(sleep=backoffs.append))
    c = cluster(1, max_concurrency=2, threads=8)
    transport = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, max_in_flight=in_flight)
    try:
        client, rng = PSClient(transport), np.random.default_rng(0)
        handles = [client.pull("item", rng.integers(0, 10**6, 2000), step=1) for _ in range(60)]
        assert all(h.wait().shape == (2000, 4) for h in handles)
        assert len(backoffs) <= 6, f"{len(backoffs)} calls of 60 were refused and backed off"
    finally:
        transport.close()


def test_a_call_waiting_for_a_free_slot_has_a_deadline(cluster):
    """No slot frees within the transport's timeout (calls held elsewhere): the send fails, naming the shard."""
    c = cluster(1, threads=4)
    transport = GrpcTransport(c.addresses, JOB, TOKEN, timeout=1, max_in_flight=1)
    try:
        assert transport._slots[0].acquire(timeout=1)  # the only slot, as a call stuck in flight holds it
        start = time.monotonic()
        with pytest.raises(grpc_transport.ShardUnavailable, match="shard 0 .* no call to it finished within 1 s"):
            PSClient(transport, retries=0).pull("item", np.arange(10, dtype=np.int64))
        assert time.monotonic() - start < 5
        transport._slots[0].release()
        assert PSClient(transport).pull("item", np.arange(10, dtype=np.int64)).wait().shape == (10, 4)
    finally:
        transport.close()


def _self_signed(key_path, cert_path) -> None:
    """A one-day certificate for localhost and 127.0.0.1, and its key (PEM)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_tls_when_certificates_are_given(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    _self_signed(key, cert)
    store = ShardStore(CONFIG, 0, 1)
    server = ShardServer(store, tmp_path, JOB, TOKEN, ServerOptions(tls_cert=str(cert), tls_key=str(key))).start()
    try:
        client = connect(servers=[f"127.0.0.1:{server.port}"], job=JOB, token=TOKEN, tls_ca=str(cert), timeout=20)
        assert client.pull("user", np.arange(3, dtype=np.int64)).wait().shape == (3, 8)
        plain = connect(servers=[f"127.0.0.1:{server.port}"], job=JOB, token=TOKEN, timeout=5)
        with pytest.raises(Exception, match="shard 0 at 127.0.0.1"):
            plain.pull("user", np.arange(3, dtype=np.int64)).wait()
    finally:
        server.stop(0)


def test_a_frozen_server_is_named_within_the_deadline(cluster):
    c = cluster(2)
    slow = connect(servers=c.addresses, job=JOB, token=TOKEN, timeout=1.5)
    ids = np.arange(100, dtype=np.int64)
    slow.pull("user", ids).wait()
    with frozen_pulls(c.stores[1]):  # connected, listening, never answering
        with pytest.raises(Exception, match=r"shard 1 at 127\.0\.0\.1:\d+.*DEADLINE_EXCEEDED"):
            slow.pull("user", ids).wait(timeout=30)  # the call's own deadline (1.5 s) is what fires


@pytest.mark.slow
def test_a_call_its_caller_abandons_while_sending_is_not_logged_as_a_server_bug(tmp_path, caplog, monkeypatch):
    arrived = threading.Event()  # the handler runs and waits for the message: then the caller gives up
    authorize = ShardServicer._authorize
    monkeypatch.setattr(ShardServicer, "_authorize", lambda self, md: (authorize(self, md), arrived.set())[0])
    server = ShardServer(ShardStore(StoreConfig((TableConfig("t", 4),))), tmp_path, JOB, TOKEN, ServerOptions()).start()
    started = threading.Event()

    def slow_message():  # never sent: the caller cancels first
        started.set()
        time.sleep(8.0)
        yield _pull_message(np.arange(1, dtype=np.int64), table="t")

    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch, \
                caplog.at_level("DEBUG", "cardinal.ps.server.servicer"):
            call = ch.stream_unary(f"/{wire.SERVICE}/Pull").future(
                slow_message(), metadata=(("x-cardinal-job", JOB), ("x-cardinal-token", TOKEN)), timeout=60)
            assert arrived.wait(30), "the handler never started"  # (a deadline raced a loaded machine's scheduler)
            call.cancel()
            with pytest.raises(grpc.FutureCancelledError):
                call.result()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any("cancelled" in r.getMessage() or r.levelname == "ERROR"
                                                          for r in caplog.records):
                time.sleep(0.05)  # the handler notices the cancel on its own thread
    finally:
        server.stop(0)
    assert started.is_set()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    assert any("cancelled by its caller" in r.getMessage() for r in caplog.records)


def test_grpc_delta_checkpoint_chains_onto_the_full_one(cluster):
    c = cluster(2)
    train(c.client, np.random.default_rng(3))
    root = c.data_dir / "ckpt"
    c.client.save(str(root), step=3)
    for table, dim in (("user", 8), ("item", 4)):  # a few rows change after the save: the delta's rows
        ids = np.arange(5, dtype=np.int64)
        c.client.push(table, ids, np.ones((5, dim), np.float32), step=4).wait()
    c.client.save(str(root), step=4, base=3)
    assert chain.base_of(root / "step-0000000004") == 3
    target = connect(CONFIG, 3)
    target.load(root / "step-0000000004")
    want, got = _values(c.client), _values(target)
    assert all(np.array_equal(want[t], got[t]) for t in want)
    c.client.pull("user", np.arange(3, dtype=np.int64), step=2).wait()  # an earlier step than the last save:
    with pytest.raises(Exception, match="save a full one"):              # a delta could miss its rows
        c.client.save(str(root), step=5, base=4)

"""A pull's rows through shared memory on one host (``ps/transport/shared_rows.py``): the same
rows as in the reply, files gone once used, fp32 rows lent in their region until the caller drops
them, a pull of several parts in one region, the reply again where a server cannot open the
region (another host), offers none (a memory budget) or /dev/shm is full, and names and offsets
that are not a region's refused."""

import os

import grpc
import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import PSClient, StoreConfig, StoreLimits
from cardinal.ps.transport import shared_rows, wire
from cardinal.ps.transport.grpc_transport import GrpcTransport
from helpers.cluster import JOB, TOKEN, Cluster, raw_call

pytestmark = pytest.mark.skipif(not shared_rows.available(), reason="no /dev/shm on this host")
CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 3, seed=2)), {"name": "adagrad", "lr": 0.05})


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(n, **kwargs):
        made.append(Cluster(CONFIG, n, tmp_path / "ps", **kwargs))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def _client(c: Cluster, shared: bool, codec: str = "fp32", **options) -> PSClient:
    transport = GrpcTransport(c.addresses, JOB, TOKEN, timeout=20, shared_memory=shared, **options)
    return PSClient(transport, pull_codec=codec, push_codec=codec)


def _regions(client: PSClient) -> list:
    """The client's free regions (given back, or not yet sorted in)."""
    regions = client.transport._regions
    return [g for free in (*regions._free, *regions._back) for g in free]


@pytest.mark.parametrize("codec", ["fp32", "bf16"])
def test_rows_through_shared_memory_are_the_rows_of_the_reply(cluster, codec):
    c = cluster(2)
    shared, plain = _client(c, True, codec), _client(c, False, codec)
    rng = np.random.default_rng(3)
    for step in range(1, 4):
        ids = rng.integers(-3000, 3000, 2000).astype(np.int64)
        rows = shared.pull("user", ids, step=step).wait()
        assert rows.tobytes() == plain.pull("user", ids, create=False).wait().tobytes()
        shared.push("user", ids, rng.standard_normal((len(ids), 8)).astype(np.float32), step=step).wait()
    assert shared.transport._shares == [True, True] and plain.transport._shares == [False, False]
    row_bytes = shared.metrics()["pull_row_bytes"]
    assert shared.metrics()["message_bytes_received"] < row_bytes / 4 < plain.metrics()["message_bytes_received"]
    assert _regions(shared) and not any((shared_rows.DIR / g.name).exists() for g in _regions(shared))


def test_a_pull_waited_on_twice_reads_its_regions_once(cluster):
    client = _client(cluster(1), True)
    ids = np.arange(500, dtype=np.int64)
    handle = client.pull("user", ids)
    first = handle.wait().copy()
    client.pull("user", ids[::-1].copy()).wait()  # the same regions, now free, take other rows
    assert handle.wait().tobytes() == first.tobytes()


def _counted(monkeypatch) -> list:
    """The regions clients make from now on."""
    made, make = [], shared_rows.Region

    def region(size):
        made.append(make(size))
        return made[-1]
    monkeypatch.setattr(shared_rows, "Region", region)
    return made


def test_fp32_rows_are_lent_in_their_region_until_the_caller_drops_them(cluster, monkeypatch):
    client, plain = _client(cluster(1), True), _client(cluster(1), False)
    made = _counted(monkeypatch)
    ids = np.arange(700, dtype=np.int64)
    held = client.pull("user", ids).wait()
    assert np.shares_memory(held, made[0].view) and not _regions(client)
    view = held[100:]
    del held
    assert not _regions(client)  # a view still reads it
    other = client.pull("user", ids[::-1].copy()).wait()  # another region: the first is still lent
    assert len(made) == 2 and view.tobytes() == plain.pull("user", ids[100:]).wait().tobytes()
    del view, other
    for step in range(1, 20):  # rows dropped every step: the same regions serve every pull
        client.pull("user", ids, step=step).wait()
    assert len(made) == 2 and len(_regions(client)) == 2


def test_a_pull_of_several_parts_shares_one_region(cluster):
    c = cluster(1)
    client, plain = _client(c, True, chunk_mb=0.01), _client(c, False)
    client.pull("user", np.arange(1, dtype=np.int64)).wait()  # its server's limits known, a region free
    free, = _regions(client)
    ids = np.arange(-2000, 2000, dtype=np.int64)  # 4,000 ids of 8 + 32 bytes, in parts of at most 10 KiB
    assert len(client.transport._chunks(len(ids), 8 + 32, 0)) > 10
    received = client.metrics()["message_bytes_received"]
    rows = client.pull("user", ids).wait()
    assert rows.tobytes() == plain.pull("user", ids).wait().tobytes() and np.shares_memory(rows, free.view)
    assert client.metrics()["message_bytes_received"] - received < len(ids) * 32 / 4


def test_a_server_that_cannot_open_the_region_answers_in_the_reply(cluster, monkeypatch):
    c = cluster(2)
    client, plain = _client(c, True), _client(c, False)
    monkeypatch.setattr(shared_rows, "_open", lambda path: None)  # as a server on another host finds no such file
    ids = np.arange(-400, 400, dtype=np.int64)
    assert client.pull("user", ids).wait().tobytes() == plain.pull("user", ids).wait().tobytes()
    assert client.transport._shares == [False, False] and not _regions(client)
    received = client.metrics()["message_bytes_received"]
    client.pull("user", ids).wait()  # no region named any more: the rows come in the reply
    assert client.metrics()["message_bytes_received"] - received > len(ids) * 8 * 4


def test_a_full_dev_shm_sends_the_rows_in_the_reply(cluster, monkeypatch):
    c = cluster(1)
    client, plain = _client(c, True), _client(c, False)

    def full(size):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(shared_rows, "Region", full)
    ids = np.arange(300, dtype=np.int64)
    assert client.pull("user", ids).wait().tobytes() == plain.pull("user", ids).wait().tobytes()
    assert client.transport._shares == [True] and client.metrics()["message_bytes_received"] > len(ids) * 8 * 4


def test_a_pull_larger_than_any_region_comes_in_the_reply(cluster, monkeypatch):
    c = cluster(1)
    client, plain = _client(c, True), _client(c, False)
    monkeypatch.setattr(shared_rows, "MAX_REGION", 1000)  # 250 fp32 values
    ids = np.arange(300, dtype=np.int64)  # 300 x 8 values
    received = client.metrics()["message_bytes_received"]
    assert client.pull("user", ids).wait().tobytes() == plain.pull("user", ids).wait().tobytes()
    assert client.metrics()["message_bytes_received"] - received > ids.size * 8 * 4
    assert client.transport._shares == [True]  # not a server on another host: regions again for what fits


def test_a_server_under_a_memory_budget_offers_no_region(cluster):
    client = _client(cluster(1, limits=StoreLimits(memory_budget=64 << 20)), True)
    client.pull("user", np.arange(10, dtype=np.int64)).wait()
    assert client.transport._shares == [False]


def test_names_that_are_not_a_regions_are_refused_and_unknown_ones_answered_in_the_reply(cluster):
    c = cluster(1)
    ids = np.arange(4, dtype=np.int64)
    base = {"v": 1, "shard": 0, "n_shards": 1, "table": "user", "ids_bytes": ids.nbytes, "ids_dtype": "int64"}
    for name, at in (("../../etc/passwd", 0), ("cardinal-xyz", 0), (7, 0), ("cardinal-" + "0" * 32, -1),
                     ("cardinal-" + "0" * 32, 1 << 40)):
        with pytest.raises(grpc.RpcError) as err:
            raw_call(c.addresses[0], "Pull", wire.encode({**base, "shm": name, "shm_at": at}, ids))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("shm")
    header, payload = wire.decode(raw_call(c.addresses[0], "Pull", wire.encode({**base, "shm": "cardinal-" + "0" * 32},
                                                                               ids)))
    assert "shm" not in header and len(payload) == 4 * 8 * 4


def test_a_server_opens_only_its_own_users_regular_files(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_rows, "DIR", tmp_path)
    mapped = shared_rows.Mapped()
    region = shared_rows.Region(100)
    assert mapped.get(region.name, 100) is not None and mapped.get(region.name, region.size + 1) is None
    assert mapped.get(region.name, 100, region.size - 100) is not None and mapped.get(region.name, 100, region.size - 99) is None
    target = tmp_path / "elsewhere"
    target.write_bytes(b"\0" * 4096)
    link = "cardinal-" + "1" * 32
    os.symlink(target, tmp_path / link)
    assert mapped.get(link, 10) is None  # not through a link
    region.shared()
    assert not (tmp_path / region.name).exists()

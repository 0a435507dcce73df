"""The call a client holds open to each server (``ps/transport/held_calls.py``): gRPC's thread
for a channel started once for many calls, a stopping server not kept waiting by its clients'
holds, holds only for a job's clients, and servers without ``Hold`` served as before."""

import time

import grpc
import numpy as np
import pytest
from grpc import _channel

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.transport import held_calls, wire
from helpers.cluster import AUTH, JOB, TOKEN, Cluster

CONFIG = StoreConfig((TableConfig("user", 8, seed=1),), {"name": "adagrad", "lr": 0.05})


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(CONFIG, 2, tmp_path / "ps")
    yield c
    c.stop()


def _client(c: Cluster):
    return connect(servers=c.addresses, job=JOB, token=TOKEN, timeout=20)


@pytest.mark.skipif(not hasattr(_channel, "_run_channel_spin_thread"), reason="gRPC Python starts its thread elsewhere")
def test_a_channels_thread_is_started_once_for_many_calls(cluster, monkeypatch):
    started = []
    spin = _channel._run_channel_spin_thread
    monkeypatch.setattr(_channel, "_run_channel_spin_thread", lambda state: started.append(state) or spin(state))
    client = _client(cluster)
    for step in range(1, 21):
        client.pull("user", np.arange(step * 10, dtype=np.int64), step=step).wait()
    assert len(started) == 2  # one a server's channel (before holds: one a call, 40 and more)
    client.transport.close()


def test_a_server_stops_without_waiting_for_its_clients_holds(cluster):
    client = _client(cluster)
    client.pull("user", np.arange(10, dtype=np.int64)).wait()
    assert all(call and not call.done() for call in client.transport._holds._calls)
    start = time.perf_counter()
    cluster.servers[0].stop(20)  # a grace a hold would have kept it waiting out
    assert time.perf_counter() - start < 10
    deadline = time.time() + 10
    while not client.transport._holds._calls[0].done() and time.time() < deadline:
        time.sleep(0.01)
    assert client.transport._holds._calls[0].code() == grpc.StatusCode.OK
    client.transport.close()


@pytest.mark.parametrize("metadata", [(), (("x-cardinal-job", JOB), ("x-cardinal-token", "wrong"))])
def test_only_a_jobs_clients_hold_a_call(cluster, metadata):
    with grpc.insecure_channel(cluster.addresses[0]) as ch:
        call = ch.unary_stream(f"/{wire.SERVICE}/{held_calls.METHOD}")(b"", metadata=metadata, timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            next(call)
        assert err.value.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
        held = ch.unary_stream(f"/{wire.SERVICE}/{held_calls.METHOD}")(b"", metadata=AUTH, timeout=0.5)
        with pytest.raises(grpc.RpcError) as err:
            next(held)  # held open: nothing comes until its deadline
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_server_without_holds_is_called_as_before(cluster, monkeypatch):
    monkeypatch.setattr(held_calls, "METHOD", "NoSuchMethod")  # as a server from before Hold answers
    client = _client(cluster)
    for step in range(1, 4):
        assert client.pull("user", np.arange(50, dtype=np.int64), step=step).wait().shape == (50, 8)
    assert client.transport._holds._calls == [False, False]
    client.transport.close()

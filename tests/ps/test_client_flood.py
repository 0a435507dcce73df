"""A flood of made-up client names over gRPC, sent by a token holder as raw requests: it once
filled ps.limits.max_clients in under two seconds and shut every restarted worker out for ten minutes.
Now the least recently heard quiet client makes room (``ps/server/request_log.py``): real workers
train on, a restarted one gets in, and nothing is applied twice."""

import os

import grpc
import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, StoreLimits, connect
from helpers.cluster import JOB, TOKEN, Cluster, raw_call
from test_wire_corpus import GRADS, IDS, push

CONFIG = StoreConfig((TableConfig("user", 8, seed=1),), {"name": "adagrad", "lr": 0.1})
ROWS = np.arange(100, dtype=np.int64)


def step(client, s: int) -> None:
    rows = client.pull("user", ROWS, step=s).wait()
    client.push("user", ROWS, np.full_like(rows, 0.01), step=s).wait()


def test_a_flood_of_client_names_cannot_shut_workers_out(tmp_path):
    c = Cluster(CONFIG, 1, tmp_path, limits=StoreLimits(max_clients=16))
    try:
        for s in range(1, 41):  # a worker that has trained a while
            step(c.client, s)
        flood = [f"{os.urandom(6).hex()}-1" for _ in range(64)]  # four times ps.limits.max_clients
        for k, rid in enumerate(flood):
            raw_call(c.addresses[0], "Push", push(IDS, GRADS, step=40, request_id=rid))
            if k % 8 == 0:
                step(c.client, 41 + k // 8)  # the worker trains on through the flood
        restarted = connect(servers=c.addresses, job=JOB, token=TOKEN, timeout=20, max_message_mb=64)
        for s in range(50, 53):
            step(restarted, s)  # not refused
        step(c.client, 53)
        before = c.client.pull("user", IDS_ARRAY, create=False).wait()
        with pytest.raises(grpc.RpcError) as err:  # a flood name sent again: it may have been applied
            raw_call(c.addresses[0], "Push", push(IDS, GRADS, step=40, request_id=flood[0]))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "forgotten" in err.value.details()
        np.testing.assert_array_equal(c.client.pull("user", IDS_ARRAY, create=False).wait(), before)
    finally:
        c.stop()


IDS_ARRAY = np.frombuffer(IDS, np.int64)

"""The end of a job on its servers (``Finish``, ps/server/process.py): taken only after the job's
final checkpoint and only from the job itself; then the server refuses the job's requests while it
stops. And a new run refuses servers another run has used (``PSClient.check_unused``)."""

import re

import grpc
import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, connect
from cardinal.ps.transport import wire
from cardinal.ps.transport.grpc_transport import ShardRequestError
from helpers.cluster import JOB, TOKEN, Cluster, raw_call

CONFIG = StoreConfig((TableConfig("user", 8, seed=1),), {"name": "adagrad", "lr": 0.05})
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(CONFIG, 2, tmp_path / "ps")
    yield c
    c.stop()


def train(client, steps: range):
    rng = np.random.default_rng(steps.start)
    for step in steps:
        ids = rng.integers(0, 500, 64).astype(np.int64)
        client.pull("user", ids, step=step).wait()
        client.push("user", ids, rng.standard_normal((64, 8)).astype(np.float32), step=step).wait()


def finish_message(step=3, shard=0, n_shards=2):
    return wire.encode({"v": wire.PROTOCOL, "shard": shard, "n_shards": n_shards, "step": step})


def test_after_the_final_checkpoint_every_server_ends_and_refuses_the_job_from_then_on(cluster, tmp_path):
    train(cluster.client, range(1, 4))
    cluster.client.save(str(tmp_path / "ps" / "run"), step=3)
    assert cluster.client.finish(3) == []
    assert all(s.ended.is_set() for s in cluster.servers)  # the process stops on it (test_job_end.py)
    with pytest.raises(ShardRequestError, match=r"FAILED_PRECONDITION: job 'test-job' finished with its checkpoint "
                                                 r"of step 3, and this server ends with it"):
        cluster.client.stats()
    with pytest.raises(ShardRequestError, match="FAILED_PRECONDITION"):
        cluster.client.pull("user", np.arange(4, dtype=np.int64), step=4).wait()
    assert cluster.client.finish(3) == []  # a resend (a reply lost) is answered again
    refused = cluster.client.finish(4)
    assert len(refused) == 2 and "finished with its checkpoint of step 3, not 4" in refused[0]


def test_a_finish_before_the_final_checkpoint_is_refused_and_the_servers_go_on(cluster, tmp_path):
    train(cluster.client, range(1, 3))
    refused = cluster.client.finish(2)  # nothing saved yet
    assert len(refused) == 2 and re.search(r"shard 0 at 127\.0\.0\.1:\d+ refused Finish: INVALID_ARGUMENT: step: "
                                           r"the job's final checkpoint is step 2, but shard 0 last saved or loaded "
                                           r"step None", refused[0]), refused
    cluster.client.save(str(tmp_path / "ps" / "run"), step=2)
    train(cluster.client, range(3, 4))  # a step past the checkpoint: its rows are in no checkpoint
    assert "has taken requests up to step 3" in cluster.client.finish(2)[0]
    assert not any(s.ended.is_set() for s in cluster.servers)
    train(cluster.client, range(4, 5))  # still serving


@pytest.mark.parametrize("metadata, code", [
    ((), grpc.StatusCode.UNAUTHENTICATED),
    ((("x-cardinal-job", JOB), ("x-cardinal-token", "guess")), grpc.StatusCode.PERMISSION_DENIED),
    ((("x-cardinal-job", "another-job"), ("x-cardinal-token", TOKEN)), grpc.StatusCode.PERMISSION_DENIED),
], ids=["no-credentials", "wrong-token", "another-job"])
def test_a_finish_not_from_the_job_is_refused_and_changes_nothing(cluster, tmp_path, metadata, code):
    train(cluster.client, range(1, 4))
    cluster.client.save(str(tmp_path / "ps" / "run"), step=3)
    before = cluster.client.digest("user")
    with pytest.raises(grpc.RpcError) as err:
        raw_call(cluster.addresses[0], "Finish", finish_message(), metadata)
    assert err.value.code() == code and TOKEN not in err.value.details()
    assert not cluster.servers[0].ended.is_set()
    assert cluster.client.digest("user") == before
    train(cluster.client, range(4, 5))  # the job goes on


def test_a_finish_with_an_unknown_field_or_for_another_shard_is_refused(cluster, tmp_path):
    train(cluster.client, range(1, 4))
    cluster.client.save(str(tmp_path / "ps" / "run"), step=3)
    cases = [(wire.encode({"v": 1, "shard": 0, "n_shards": 2, "step": 3, "now": True}), INVALID),
             (finish_message(shard=1), grpc.StatusCode.FAILED_PRECONDITION),
             (wire.encode({"v": 1, "shard": 0, "n_shards": 2}), INVALID)]
    for message, code in cases:
        with pytest.raises(grpc.RpcError) as err:
            raw_call(cluster.addresses[0], "Finish", message)
        assert err.value.code() == code, err.value.details()
    assert not cluster.servers[0].ended.is_set()


def test_embedded_stores_check_the_finish_as_servers_do():
    client = connect(CONFIG, 2)
    train(client, range(1, 3))
    assert "shard 0 last saved or loaded step None" in client.finish(2)[0]


def test_a_new_run_refuses_servers_another_run_has_used(cluster):
    cluster.client.check_unused()  # fresh
    train(cluster.client, range(1, 2))
    with pytest.raises(ValueError, match=r"server 127\.0\.0\.1:\d+ \(shard 0\) has served another run \(up to "
                                         r"step 1, \d+ rows\): a new run starts on fresh servers"):
        cluster.client.check_unused()

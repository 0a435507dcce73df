"""No shared filesystem: each server saves its part on its own disk, the workers' rank 0 the commit.

In-process gRPC servers, each with a data directory of its own, and a checkpoint root outside all
of them (the workers' run directory): the commit holds a copy of each server's manifest, a load
sends each server the commits of its chain, and each checks its own part against them.
"""

import json

import numpy as np
import pytest

from cardinal.checkpoint.layout import COMMIT, committed_steps, step_dir
from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig
from helpers.cluster import JOB, Cluster

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adagrad", "lr": 0.05})


@pytest.fixture
def hosts(tmp_path):
    """make(n): n servers, server s with its own data directory tmp/host-s; stopped at the end."""
    made = []

    def make(n, **kwargs):
        made.append(Cluster(CONFIG, n, [tmp_path / f"host-{s}" for s in range(n)], **kwargs))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def train(client, seed, steps, first=1):
    rng = np.random.default_rng(seed)
    for step in range(first, first + steps):
        for table, dim in (("user", 8), ("item", 4)):
            ids = rng.integers(-500, 500, 200).astype(np.int64)
            client.pull(table, ids, step=step).wait()
            client.push(table, ids, rng.standard_normal((200, dim)).astype(np.float32), step=step).wait()


def digests(client):
    return [client.digest(t) for t in ("user", "item")]


def own(tmp_path, shard, step=None):
    root = tmp_path / f"host-{shard}" / "checkpoints" / JOB
    return root if step is None else step_dir(root, step)


def test_each_server_saves_its_part_on_its_own_disk_and_loads_it_back(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"  # outside every server's data directory
    a = hosts(2)
    train(a.client, 1, 3)
    saved = digests(a.client)
    path = a.client.save(str(root), 3)
    marker = json.loads((path / COMMIT).read_text())
    assert sorted(marker["remote"]) == ["shard-00000-of-00002", "shard-00001-of-00002"]
    assert [marker["remote"][f"shard-0000{s}-of-00002"]["server"] for s in range(2)] == a.addresses
    assert not any(p.name.startswith("shard-") for p in path.iterdir())  # no shard file here
    for s in range(2):
        assert (own(tmp_path, s, 3) / f"shard-0000{s}-of-00002" / "manifest.json").is_file()
        assert not (own(tmp_path, s, 3) / COMMIT).exists()  # the commit is rank 0's alone
    a.stop()

    b = hosts(2)  # both servers restarted on their disks
    assert digests(b.client) != saved
    info = b.client.load(str(root))
    assert info["step"] == 3 and digests(b.client) == saved


def test_a_delta_chain_on_own_disks_resumes_bitwise_and_old_steps_leave_every_disk(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(2)
    for step in range(1, 6):
        train(a.client, step, 1, first=step)
        a.client.save(str(root), step, keep=2, base=step - 1 if step > 1 else None)
    saved = digests(a.client)
    assert committed_steps(root) == [1, 2, 3, 4, 5]  # deltas keep their chain down to step 1
    a.stop()

    b = hosts(2)
    assert b.client.load(str(root))["step"] == 5 and digests(b.client) == saved  # the chain, from each disk
    b.client.save(str(root), 6, keep=1)  # a full one: the chain can go
    assert committed_steps(root) == [6]
    train(b.client, 7, 1, first=7)
    b.client.save(str(root), 7, keep=1)  # the servers learn what rank 0 kept, one save behind
    for s in range(2):
        assert sorted(p.name for p in own(tmp_path, s).iterdir()) == ["step-0000000006", "step-0000000007"]


def test_a_server_refuses_a_part_that_is_not_the_one_its_commit_names(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(2)
    train(a.client, 1, 2)
    a.client.save(str(root), 2)
    manifest = own(tmp_path, 1, 2) / "shard-00001-of-00002" / "manifest.json"
    a.stop()
    edited = json.loads(manifest.read_text())
    edited["tables"]["user"]["rows"] += 1
    manifest.write_text(json.dumps(edited))

    b = hosts(2)
    train(b.client, 9, 1)
    before = digests(b.client)
    with pytest.raises(ValueError, match=r"shard 1 refused it: .*manifest.json"):
        b.client.load(str(root))
    assert digests(b.client) == before  # shard 0 prepared and aborted: nothing changed


def test_a_checkpoint_of_two_own_disks_on_three_servers_is_refused_naming_the_shard(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(2)
    train(a.client, 1, 2)
    a.client.save(str(root), 2)
    a.stop()
    b = hosts(3)
    train(b.client, 3, 1)
    before = digests(b.client)
    with pytest.raises(ValueError, match=r"shard 1's files are on the disk of its server \(127\.0\.0\.1:\d+\)"):
        b.client.load(str(root))
    assert digests(b.client) == before


def test_a_dry_save_names_the_server_that_cannot_write(hosts, tmp_path):
    c = hosts(2)
    (tmp_path / "host-1").mkdir(exist_ok=True)
    (tmp_path / "host-1" / "checkpoints").write_text("a file where its checkpoints would go")
    root = tmp_path / "worker" / "checkpoints"
    with pytest.raises(ValueError, match=rf"server {c.addresses[1]} \(shard 1\) cannot write checkpoints: .*"
                                         r"cardinal server --data-dir"):
        c.client.check_checkpoints(str(root))
    assert not (tmp_path / "host-0" / "checkpoints").exists() and not root.exists()  # a probe leaves nothing
    (tmp_path / "worker-2").write_text("a file where the run's directory would be")
    with pytest.raises(ValueError, match=r"the worker on .* cannot write checkpoints under .*CARDINAL_RUN_DIR, or train.run_dir"):
        c.client.check_checkpoints(str(tmp_path / "worker-2" / "checkpoints"))


def test_a_shared_directory_keeps_every_file_in_one_place(hosts, tmp_path):
    c = Cluster(CONFIG, 2, tmp_path / "shared")
    try:
        train(c.client, 1, 2)
        path = c.client.save(str(tmp_path / "shared" / "run" / "checkpoints"), 2)
        assert "remote" not in json.loads((path / COMMIT).read_text())
        assert (path / "shard-00001-of-00002" / "manifest.json").is_file()
        assert c.client.check_checkpoints(str(tmp_path / "shared" / "run" / "checkpoints")) == \
            [str((tmp_path / "shared" / "run" / "checkpoints").resolve())] * 2
    finally:
        c.stop()

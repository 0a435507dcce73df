"""No shared filesystem: each server saves its part on its own disk, the workers' rank 0 the commit.

In-process gRPC servers, each with a data directory of its own, and a checkpoint root outside all
of them (the workers' run directory): the commit holds a copy of each server's manifest, a load
sends each server the commits of its chain, and each checks its own part against them. Onto
another server count the rows travel: each server holding an old part reads, on its own disk, the
rows another shard needs, and the client passes them on; bitwise what a shared directory loads.
"""

import json
import shutil

import numpy as np
import pytest

from cardinal.checkpoint.layout import COMMIT, committed_steps, step_dir
from cardinal.embedding import TableConfig
from cardinal.embedding.table_config import SaecSpec
from cardinal.ps import StoreConfig, connect
from cardinal.recipe.admission import AdmissionConfig
from cardinal.sharding.plan import Piece, ShardingPlan
from helpers.cluster import JOB, Cluster

CONFIG = StoreConfig((TableConfig("user", 8, seed=1), TableConfig("item", 4, seed=2)), {"name": "adagrad", "lr": 0.05})
ADMITTING = StoreConfig(CONFIG.tables, CONFIG.optimizer, {"user": AdmissionConfig(policy="count", threshold=2),
                                                          "item": AdmissionConfig(policy="bloom", threshold=2)})


@pytest.fixture
def hosts(tmp_path):
    """make(n): n servers, server s with its own data directory tmp/host-s (or ``dirs``); stopped at the end."""
    made = []

    def make(n, dirs=None, config=CONFIG, **kwargs):
        made.append(Cluster(config, n, dirs or [tmp_path / f"host-{s}" for s in range(n)], **kwargs))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def train(client, seed, steps, first=1, n=200):
    rng = np.random.default_rng(seed)
    for step in range(first, first + steps):
        for table, dim in (("user", 8), ("item", 4)):
            ids = rng.integers(-5 * n // 2, 5 * n // 2, n).astype(np.int64)
            client.pull(table, ids, step=step).wait()
            client.push(table, ids, rng.standard_normal((n, dim)).astype(np.float32), step=step).wait()


def digests(client):
    return [client.digest(t) for t in ("user", "item")]


def trained_and_saved(hosts, tmp_path, servers, steps, n=200, **options):
    """``servers`` on disks of their own, trained ``steps`` steps and saved under the worker's root
    (outside every server's data directory): (the hosts, still up; the root; their table digests)."""
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(servers, **options)
    train(a.client, 1, steps, n=n)
    saved = digests(a.client)
    a.client.save(str(root), steps)
    return a, root, saved


def own(tmp_path, shard, step=None, host=None):
    root = tmp_path / f"host-{shard if host is None else host}" / "checkpoints" / JOB
    return root if step is None else step_dir(root, step)


def shared_reshard(tmp_path, root, n_hosts, n, config=CONFIG):
    """Digests of ``n`` shards loading the newest checkpoint under ``root`` from one directory that
    holds every part (copied from each host's disk beside the commits): a shared directory's reshard."""
    shared = tmp_path / "shared"
    for k in committed_steps(root):
        shutil.copytree(step_dir(root, k), step_dir(shared, k))
        for h in range(n_hosts):
            for part in own(tmp_path, h, k).glob("shard-*"):
                shutil.copytree(part, step_dir(shared, k) / part.name)
    client = connect(config, n)
    client.load(str(shared))
    return digests(client)


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


def test_two_own_disks_resume_on_three_servers_bitwise_to_the_shared_directory_reshard(hosts, tmp_path):
    # a block of rows crosses in several messages
    a, root, saved = trained_and_saved(hosts, tmp_path, 2, 2, n=20_000, max_message_mb=1)
    a.stop()

    b = hosts(3, max_message_mb=1)  # two servers on their disks, a third on a new one
    train(b.client, 3, 1)
    assert b.client.load(str(root))["step"] == 2
    assert digests(b.client) == saved == shared_reshard(tmp_path, root, 2, 3)
    assert not own(tmp_path, 2).exists()  # no part was copied to the new server's disk
    for s in range(3):
        b.stores[s].check()


def test_three_own_disks_resume_on_two_servers_one_holding_two_parts(hosts, tmp_path):
    a, root, saved = trained_and_saved(hosts, tmp_path, 3, 3)
    a.stop()
    expected = shared_reshard(tmp_path, root, 3, 2)
    moved = "shard-00002-of-00003"  # host 2 is gone; its disk now on host 1
    shutil.move(own(tmp_path, 2, 3) / moved, own(tmp_path, 1, 3) / moved)
    shutil.rmtree(tmp_path / "host-2")

    b = hosts(2)
    assert b.client.load(str(root))["step"] == 3
    assert digests(b.client) == saved == expected


def test_a_delta_chain_with_deleted_ids_and_admission_state_resumes_on_three_servers(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(2, config=ADMITTING)
    rng = np.random.default_rng(7)
    for step in range(1, 4):
        train(a.client, step, 2, first=2 * step - 1)
        if step > 1:  # deleted since the last save: each delta lists them
            for store in a.stores:
                held = store.tables["user"].export()["ids"]
                store.tables["user"].delete(rng.choice(held, len(held) // 4, replace=False))
        a.client.save(str(root), 2 * step, base=2 * step - 2 if step > 1 else None)
    saved = digests(a.client)
    seen = np.arange(10**6, 10**6 + 300)  # counted by both filters, once: not yet admitted
    for table in ("user", "item"):
        a.client.pull(table, seen, step=7).wait()
    a.client.save(str(root), 7, base=6)
    a.stop()
    assert json.loads((step_dir(root, 7) / COMMIT).read_text())["base"] == 6

    b = hosts(3, config=ADMITTING)
    assert b.client.load(str(root))["step"] == 7
    assert digests(b.client) == saved == shared_reshard(tmp_path, root, 2, 3, ADMITTING)
    admitted = [b.client.pull(t, seen, step=8).wait() for t in ("user", "item")]  # seen twice now: admitted
    assert all(np.abs(rows).sum(axis=1).all() for rows in admitted)


def test_a_table_split_by_columns_on_own_disks_is_joined_on_three_servers(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    plan = ShardingPlan(2, {"user": (Piece((0,), (0, 3)), Piece((1,), (3, 8)))})
    a = hosts(2, plan=plan)
    train(a.client, 1, 2)
    rows = a.client.pull("user", np.arange(-300, 300), create=False).wait()
    a.client.save(str(root), 2)
    a.stop()

    b = hosts(3)
    b.client.load(str(root))
    assert digests(b.client) == shared_reshard(tmp_path, root, 2, 3)
    np.testing.assert_array_equal(b.client.pull("user", np.arange(-300, 300), create=False).wait(), rows)


def test_servers_restarted_on_each_others_disks_load_over_the_wire_but_a_clustered_table_is_refused(hosts, tmp_path):
    a, root, saved = trained_and_saved(hosts, tmp_path, 2, 2)
    a.stop()
    b = hosts(2, [tmp_path / "host-1", tmp_path / "host-0"])  # shard 0 on host 1's disk, shard 1 on host 0's
    b.client.load(str(root))
    assert digests(b.client) == saved
    b.stop()

    clustered = StoreConfig(CONFIG.tables, CONFIG.optimizer, saec={"user": SaecSpec(5.0, 2)})
    c = hosts(2, config=clustered)
    train(c.client, 1, 3)
    c.client.save(str(root), 3)
    c.stop()
    d = hosts(2, [tmp_path / "host-1", tmp_path / "host-0"], config=clustered)
    with pytest.raises(ValueError, match=r"table 'user' is clustered \(Saec\), and shard 0's files are on the disk of "
                                         rf"its server \({c.addresses[0]}\), not this one's"):
        d.client.load(str(root))


def test_a_part_on_no_servers_disk_is_refused_naming_the_shard_and_its_server(hosts, tmp_path):
    root = tmp_path / "worker" / "checkpoints"
    a = hosts(2)
    train(a.client, 1, 2)
    a.client.save(str(root), 2)
    a.stop()
    shutil.rmtree(tmp_path / "host-1")  # a host gone with its disk
    b = hosts(3, [tmp_path / "host-0", tmp_path / "host-3", tmp_path / "host-4"])
    train(b.client, 3, 1)
    before = digests(b.client)
    with pytest.raises(ValueError, match=rf"not loaded, no shard changed: shard 1 of 2 of step-0000000002 is on no "
                                         rf"server's disk \(saved by the server at {a.addresses[1]}"):
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
    assert not any(p.name.startswith(".probe") for p in (tmp_path / "host-0").rglob("*"))  # no probe is left
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

"""Hosts and no shared directory, as most clusters give each pod its own volume: a server on each
of two hosts with its own --data-dir, two torchrun workers on a third with the run directory. The
job trains and commits; a killed server is named by every worker within seconds; both servers
restart on their disks and the run resumes, its workers on two hosts, each with the run directory
of its own host (worker 1's absent: worker 0's is the run's), bitwise equal to a run that went
straight on. A job whose server cannot write checkpoints fails at its start, naming the server and
the flag. A 2-server checkpoint resumes on 3 servers: the rows of the old parts travel between the
servers.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cardinal.checkpoint import layout
from helpers.hosts import Hosts, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]

ME = [sys.executable, "-m", "cardinal.cli"]
JOB = "own-disks"
ENV = {**os.environ, "CARDINAL_TOKEN": "t0ken", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "eth0"}
MODEL = ["--set", f'ps.job="{JOB}"', "--set", "embedding.dim=4", "--set", "model.hidden=[16]",
         "--set", 'train.baseline="none"']


def start_servers(hosts, dirs: list[Path]) -> list[subprocess.Popen]:
    """A server on each of the first len(dirs) hosts, server i with its own --data-dir dirs[i]."""
    servers = [hosts[i].popen([*ME, "server", "--shard", f"{i}/{len(dirs)}", "--host", "0.0.0.0", "--port", "7000",
                               "--data-dir", str(d), *MODEL], env=ENV, stdout=subprocess.PIPE, text=True)
               for i, d in enumerate(dirs)]
    for s in servers:
        assert s.stdout.readline().startswith("CARDINAL_SERVER_READY"), "a server did not start"
    return servers


RUN = ["--set", "data.synthetic.rows=4000", "--set", "data.batch_size=250", "--set", 'consistency.mode="sync"',
       "--set", "checkpoint.every=3", "--set", "metrics.log_every=1"]


def train_sets(hosts, servers: int, at: int) -> list[str]:
    """The train command's settings for a worker on host ``at``, the servers on the first ``servers`` hosts."""
    return [*MODEL, *RUN, "--set", "ps.servers=" + ",".join(f"{hosts[i].address}:7000" for i in range(servers)),
            "--set", f'data.cache_dir="{hosts[at].dir / "data"}"', "--set", "ps.timeout_s=8"]


def workers(hosts, run_dir: Path, *args: str, log: Path, servers: int = 2, at: int = 2,
            n: int = 2) -> subprocess.Popen:
    """``n`` workers on host ``at`` through torchrun, the servers on the first ``servers`` hosts;
    ``args``: the train command's."""
    with open(log, "w") as out:
        return hosts[at].popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                str(n), "-m", "cardinal.cli", "train", *args, *train_sets(hosts, servers, at)],
                               env={**ENV, "CARDINAL_RUN_DIR": str(run_dir)}, stdout=out, stderr=out)


def resumed_on_hosts(hosts, name: str, *args: str, logs: list[Path], at: tuple = (2, 3)) -> list[subprocess.Popen]:
    """``cardinal train --resume`` by one worker on each host of ``at``, rank r on host ``at[r]``
    with that host's own run directory ``dir / name``; ``args``: the train command's."""
    job = {**ENV, "WORLD_SIZE": str(len(at)), "MASTER_ADDR": hosts[at[0]].address, "MASTER_PORT": "7100"}
    procs = []
    for r, (i, log) in enumerate(zip(at, logs)):
        run_dir = hosts[i].dir / name
        with open(log, "w") as out:
            procs.append(hosts[i].popen([*ME, "train", "--resume", str(run_dir), *args, *train_sets(hosts, 2, i)],
                                        env={**job, "RANK": str(r), "LOCAL_RANK": "0", "CARDINAL_RUN_DIR": str(run_dir)},
                                        stdout=out, stderr=out))
    return procs


def kill(procs) -> None:
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)


def gathered_state(run_dir: Path, server_dirs: list[Path]):
    """The newest checkpoint's table digest and dense tensors, read back in this process after its
    parts are copied from each server's disk beside the commit (which then checks them)."""
    from cardinal.checkpoint.reader import Reader
    from cardinal.ps import connect
    from cardinal.recipe import load
    from cardinal.train import tables

    found = layout.latest(run_dir / "checkpoints")
    for d in server_dirs:
        own = layout.step_dir(layout.own_root(d, JOB), layout.step_of(found))
        for part in own.glob("shard-*"):
            shutil.copytree(part, found / part.name)
    client = connect(tables.store_config(load("criteo_synthetic", ["embedding.dim=4", "model.hidden=[16]",
                                                                    'train.baseline="none"'])), 1)
    client.load(found)
    return found.name, client.digest("emb"), Reader(found).dense_state()["model"]


@pytest.mark.timeout(300)
def test_hosts_without_a_shared_directory_commit_restart_and_resume_bitwise(tmp_path):
    with Hosts(4, tmp_path) as hosts:
        straight_dirs = [hosts[i].dir / "straight" for i in range(2)]
        servers = start_servers(hosts, straight_dirs)
        straight = workers(hosts, hosts[2].dir / "straight", "--set", "train.steps=9", log=tmp_path / "straight.log")
        assert straight.wait(timeout=120) == 0, (tmp_path / "straight.log").read_text()[-3000:]
        kill(servers)

        dirs = [hosts[i].dir / "stopped" for i in range(2)]
        run_dir = hosts[2].dir / "stopped"
        servers = start_servers(hosts, dirs)
        stopped = workers(hosts, run_dir, "--set", "train.epochs=1000", log=tmp_path / "stopped.log")
        deadline = time.monotonic() + 120
        while not layout.committed_steps(run_dir / "checkpoints") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert layout.committed_steps(run_dir / "checkpoints"), (tmp_path / "stopped.log").read_text()[-3000:]
        assert not any(p.name.startswith("shard-") for p in (run_dir / "checkpoints").rglob("*"))  # on the servers
        killed = time.monotonic()
        servers[1].kill()
        assert stopped.wait(timeout=60) != 0
        named = time.monotonic() - killed
        text = (tmp_path / "stopped.log").read_text()
        said = [line for line in text.splitlines() if line.startswith("cardinal train: error:")]
        assert len(said) == 2 and all(f"shard 1 at {hosts[1].address}:7000" in line for line in said), text[-3000:]
        assert named < 30, named
        kill(servers)

        servers = start_servers(hosts, dirs)  # both servers restarted on their own disks
        logs = [tmp_path / f"resumed-{r}.log" for r in range(2)]
        resumed = resumed_on_hosts(hosts, "stopped", "--set", "train.steps=9", logs=logs)
        assert [p.wait(timeout=120) for p in resumed] == [0, 0], [log.read_text()[-3000:] for log in logs]
        assert not (hosts[3].dir / "stopped").exists()  # worker 1 read, and wrote, nothing of the run
        kill(servers)
    assert hosts.leftovers() == []
    a, b = gathered_state(hosts[2].dir / "straight", straight_dirs), gathered_state(run_dir, dirs)
    assert a[0] == b[0] == "step-0000000009" and a[1] == b[1]
    assert all(torch.equal(a[2][k], b[2][k]) for k in a[2])


@pytest.mark.timeout(120)
def test_a_server_that_cannot_write_checkpoints_fails_the_job_at_its_start_naming_it(tmp_path):
    with Hosts(3, tmp_path) as hosts:
        dirs = [hosts[i].dir / "ps" for i in range(2)]
        for d in dirs:
            d.mkdir()
        (dirs[1] / "checkpoints").write_text("a file where the server's checkpoints would go")
        servers = start_servers(hosts, dirs)
        started = time.monotonic()
        job = workers(hosts, hosts[2].dir / "run", "--set", "train.steps=9", log=tmp_path / "job.log")
        assert job.wait(timeout=60) != 0
        took = time.monotonic() - started  # torchrun's start and torch's import included
        print(f"the misconfigured job failed {took:.1f} s after its workers were started")
        kill(servers)
    text = (tmp_path / "job.log").read_text()
    said = [line for line in text.splitlines() if line.startswith("cardinal train: error:")]
    assert said and all(f"server {hosts[1].address}:7000 (shard 1) cannot write checkpoints" in line
                        and "cardinal server --data-dir" in line for line in said), text[-3000:]
    assert "step 1" not in json.dumps(said) and took < 30, took


@pytest.mark.timeout(240)
def test_a_two_server_checkpoint_resumed_on_three_servers_with_no_shared_directory(tmp_path):
    """The rows of the old servers' parts travel to the new shards, no file to the new server's disk,
    and the run ends bitwise where one worker of the embedded default ends straight on (one sync
    worker against servers trains its model, bit for bit: docs/distributed.md)."""
    with Hosts(4, tmp_path) as hosts:
        dirs, run_dir = [hosts[i].dir / "ps" for i in range(3)], hosts[3].dir / "run"
        servers = start_servers(hosts, dirs[:2])
        first = workers(hosts, run_dir, "--set", "train.steps=6", log=tmp_path / "first.log", at=3, n=1)
        assert first.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()[-3000:]
        assert layout.latest(run_dir / "checkpoints").name == "step-0000000006"
        kill(servers)
        servers = start_servers(hosts, dirs)  # the two on their disks, a third on a new one
        resumed = workers(hosts, run_dir, "--resume", str(run_dir), "--set", "train.steps=9",
                          log=tmp_path / "resumed.log", servers=3, at=3, n=1)
        assert resumed.wait(timeout=120) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
        kill(servers)
    assert hosts.leftovers() == []
    assert not list(dirs[2].rglob("shard-*-of-00002"))  # no old part's file on the new server's disk
    name, digest, dense = gathered_state(run_dir, dirs)

    from cardinal.recipe import load
    from cardinal.train import Trainer

    sets = [v for k, v in zip([*MODEL, *RUN][::2], [*MODEL, *RUN][1::2]) if k == "--set" and "ps.job" not in v]
    straight = Trainer(load("criteo_synthetic", [*sets, f'data.cache_dir="{tmp_path / "data"}"', "train.steps=9"]),
                       tmp_path / "straight", progress=False)
    straight.fit()
    assert name == "step-0000000009" and digest == straight.client.digest("emb")
    assert all(torch.equal(dense[k], v) for k, v in straight.model.state_dict().items())
    straight.close()

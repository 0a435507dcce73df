"""A job's life and its servers' (ps/server/process.py, train/job_servers.py): the servers end with
the job's final checkpoint, a crashed or killed worker leaves them up for the resume, and a new run
never trains on rows another run left on them."""

import os
import subprocess
import sys
import time

import pytest

from cardinal.checkpoint.layout import committed_steps
from cardinal.jobs.launch import free_port
from cardinal.ps.transport.grpc_transport import ShardRequestError
from cardinal.train import Trainer, job_servers, tables
from helpers.cluster import JOB, TOKEN, Cluster
from helpers.processes import reaped
from helpers.recipes import tiny_recipe

ME = [sys.executable, "-m", "cardinal.cli"]


def test_the_next_job_on_a_jobs_servers_is_refused_before_it_changes_anything(tmp_path, monkeypatch):
    """Before servers ended with their job, job B on job A's servers trained on A's rows (one
    worker) or was refused at step 1 (several: "this shard has applied that worker's pushes")."""
    monkeypatch.setenv("CARDINAL_TOKEN", TOKEN)
    cluster = Cluster(tables.store_config(tiny_recipe(tmp_path)), 2, tmp_path)
    try:
        servers = "ps.servers=[" + ",".join(f'"{a}"' for a in cluster.addresses) + "]"
        recipe = tiny_recipe(tmp_path, "train.steps=4", servers, f'ps.job="{JOB}"')
        a = Trainer(recipe, tmp_path / "a", progress=False)
        a.fit()
        digest = a.client.digest("emb")
        b = Trainer(recipe, tmp_path / "b", progress=False)  # job A crashed before its end: the servers are up
        with pytest.raises(ValueError, match=r"server 127\.0\.0\.1:\d+ \(shard 0\) has served another run \(up to step 4"):
            b.fit()
        assert a.client.digest("emb") == digest and not committed_steps(tmp_path / "b" / "checkpoints")
        job_servers.end(a)  # job A's end, as `cardinal train` does after fit
        assert all(s.ended.is_set() for s in cluster.servers)
        with pytest.raises(ShardRequestError, match=f"job '{JOB}' finished with its checkpoint of step 4"):
            Trainer(recipe, tmp_path / "c", progress=False)
    finally:
        cluster.stop()


def _server(tmp_path, i: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([*ME, "server", "--shard", f"{i}/2", "--data-dir", str(tmp_path), "--set",
                             f'ps.job="{JOB}"', "--set", "embedding.dim=4", "--set", "model.hidden=[16]"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.timeout(300)
def test_a_killed_worker_leaves_the_servers_up_and_the_resumed_jobs_end_ends_them(tmp_path):
    env = {**os.environ, "CARDINAL_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    run = tmp_path / "run"
    with reaped([_server(tmp_path, i, env) for i in range(2)]) as servers:
        ports = [dict(p.split("=", 1) for p in s.stdout.readline().split()[1:])["port"] for s in servers]
        sets = [f'ps.job="{JOB}"', "embedding.dim=4", "model.hidden=[16]", "checkpoint.every=4",
                "ps.servers=[" + ",".join(f'"127.0.0.1:{p}"' for p in ports) + "]", "train.epochs=50",
                f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=8000", "data.batch_size=250"]
        args = sum((["--set", s] for s in sets), [])
        worker_env = {**env, "CARDINAL_RUN_DIR": str(run)}
        with reaped([subprocess.Popen([*ME, "train", *args], env=worker_env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)]) as (worker,):
            deadline, first = time.monotonic() + 150, run / "checkpoints" / "step-0000000004" / "commit.json"
            while time.monotonic() < deadline and not first.exists():
                assert worker.poll() is None, "the worker ended before it could be killed"
                time.sleep(0.1)
            worker.kill()  # a crash: it tells the servers nothing
            worker.wait()
        time.sleep(1.0)
        assert [s.poll() for s in servers] == [None, None]
        # the job resumed onto the same servers, as two workers, to its end
        resume = [*ME, "train", "--resume", str(run), "--set", "train.steps=12"]
        two = {**worker_env, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        workers = [subprocess.Popen(resume, env={**two, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for r in range(2)]
        with reaped(workers):
            outs = [w.communicate(timeout=180)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], [o[-3000:] for o in outs]
        ended = time.monotonic()
        codes = [s.wait(timeout=15) for s in servers]
        logs = [s.stdout.read() for s in servers]
        assert codes == [0, 0] and time.monotonic() - ended < 10, logs
        for i, text in enumerate(logs):
            assert f"shard {i}: job {JOB} finished with its checkpoint of step 12; stopping" in text, text[-2000:]

"""Training against parameter servers in other processes: equality with the embedded default,
the launcher, and the faults a job must survive (real processes, bounded in time)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from cardinal.recipe import load
from cardinal.train import Trainer, tables
from helpers.cluster import JOB, TOKEN, Cluster
from helpers.launch import launch_cmd, leftovers, run_launch
from helpers.recipes import tiny_recipe
from helpers.processes import reaped

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "data.synthetic.rows=4000", "data.batch_size=250", *extra)


def test_sync_worker_against_servers_is_bitwise_equal_to_the_embedded_default(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDINAL_TOKEN", TOKEN)
    sync = ['consistency.mode="sync"', "train.steps=10", "checkpoint.every=5"]
    local = Trainer(recipe(tmp_path, *sync), tmp_path / "local", progress=False)
    local.fit()
    cluster = Cluster(tables.store_config(recipe(tmp_path)), 3, tmp_path)
    try:
        servers = "ps.servers=[" + ",".join(f'"{a}"' for a in cluster.addresses) + "]"
        remote = Trainer(recipe(tmp_path, *sync, servers, f'ps.job="{JOB}"'), tmp_path / "remote", progress=False)
        summary = remote.fit()
        assert remote.client.digest("emb") == local.client.digest("emb")
        for k, v in local.model.state_dict().items():
            assert torch.equal(v, remote.model.state_dict()[k]), k
        assert Path(summary["checkpoint"]).parent == (tmp_path / "remote" / "checkpoints").resolve()
    finally:
        cluster.stop()


# --- the launcher, as a user runs it ------------------------------------------------------

@pytest.mark.timeout(300)
def test_launch_resume_with_only_the_run_directory_serves_the_runs_tables(tmp_path):
    """`cardinal launch -- --resume RUN`, without the first launch's --set values: the servers hold
    the run's tables (RUN/recipe.json), not the default recipe's, and a frozen override is refused
    before anything starts."""
    code, out = run_launch(launch_cmd(tmp_path, 1, 1, "train.steps=3"))
    assert code == 0, out
    (run_dir,) = (tmp_path / "runs").iterdir()
    resume = [sys.executable, "-m", "cardinal.cli", "launch", "--servers", "1", "--workers", "1", "--",
              "--set", "train.steps=5", "--resume", str(run_dir)]
    code, out = run_launch(resume)
    assert code == 0, out[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 5
    code, out = run_launch([*resume[:-2], "--set", "embedding.dim=8", "--resume", str(run_dir)])
    assert code == 2 and "--resume cannot change embedding.dim" in out, out[-3000:]
    assert "servers at" not in out
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(300)
def test_launch_two_servers_two_workers_trains_and_leaves_nothing_behind(tmp_path):
    code, out = run_launch(launch_cmd(tmp_path, 2, 2))
    assert code == 0, out
    run_dir = Path(re.search(r"run directory (\S+)", out).group(1))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["eval_auc"] > 0.55
    assert (run_dir / "checkpoints").is_dir() and "[server 1]" in out and "[worker 1]" in out
    assert re.search(r"watch it with: cardinal top 127\.0\.0\.1:\d+ 127\.0\.0\.1:\d+\n", out)  # servers' metrics
    last = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r][-1]
    assert last["step"] == summary["steps"]  # the last step's line: nothing was pulled for training since
    for key in ("pull_bytes_per_sample", "push_bytes_per_sample"):  # all workers' bytes over all workers' samples
        assert summary[key] > 0 and summary[key] == pytest.approx(last[key], rel=1e-9), key
    assert leftovers(tmp_path) == []


def wait_for_checkpoint(proc, step: int, out: list, limit_s: float = 180) -> Path | None:
    """Read the launcher's output until checkpoint ``step`` is committed; returns the run directory."""
    run_dir, deadline = None, time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        out.append(line)
        if m := re.search(r"run directory (\S+)", line):
            run_dir = Path(m.group(1))
        if run_dir and (run_dir / "checkpoints" / f"step-{step:010d}" / "commit.json").exists():
            return run_dir
    return None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_a_failed_server_fails_the_job_naming_it_and_the_job_resumes_from_its_checkpoint(tmp_path, sig):
    cmd = launch_cmd(tmp_path, 2, 1, "train.epochs=50", "checkpoint.every=4")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out = []
        run_dir = wait_for_checkpoint(proc, 8, out)
        assert run_dir is not None, "".join(out)
        victim = [p for p in leftovers(tmp_path) if "--shard 1/2" in p]
        assert victim, "server 1 not found"
        os.kill(int(victim[0].split()[0]), sig)
        rest, _ = proc.communicate(timeout=60)  # the deadline: a hung job raises TimeoutExpired here
        out.append(rest)
        text = "".join(out)
        assert proc.returncode not in (0, None)
        assert re.search(r"shard 1 at 127\.0\.0\.1:\d+", text), text[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert leftovers(tmp_path) == []
    if sig == signal.SIGSTOP:
        return  # resuming is the same as after a kill
    code, out = run_launch(launch_cmd(tmp_path, 3, 1, "train.epochs=50", "checkpoint.every=4", "train.steps=14",
                                      resume=run_dir))
    assert code == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 14  # went on from a checkpoint >= 8, resharded from 2 servers to 3
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point, committed", [
    ("save.shard_file_written=exit@9", [4]),     # a server, in the first file of its second save (8 a save:
                                                 # 4 columns of emb and of the lr baseline's lr_emb)
    ("save.before_shard_manifest=exit@2", [4]),  # a server, before its second shard manifest
    ("save.before_commit=exit@2", [4]),          # worker 0, with every shard of step 8 written
    ("save.before_cleanup=exit@2", [4, 8]),      # worker 0, step 8 committed, step 4 not yet removed
])
def test_a_crash_at_each_step_of_a_save_leaves_a_loadable_checkpoint_and_the_job_resumes(
        tmp_path, monkeypatch, point, committed):
    monkeypatch.setenv("CARDINAL_FAILPOINTS", point)
    code, out = run_launch(launch_cmd(tmp_path, 2, 1, "train.epochs=50", "checkpoint.every=4"))
    assert code != 0, out
    run_dir = Path(re.search(r"run directory (\S+)", out).group(1))
    assert config_steps(run_dir) == committed
    monkeypatch.delenv("CARDINAL_FAILPOINTS")
    code, out = run_launch(launch_cmd(tmp_path, 1, 1, "train.epochs=50", "checkpoint.every=4", "train.steps=10",
                                      resume=run_dir))
    assert code == 0, out
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 10
    assert leftovers(tmp_path) == []


def config_steps(run_dir: Path) -> list[int]:
    from cardinal.checkpoint import layout

    return layout.committed_steps(run_dir / "checkpoints")


@pytest.mark.timeout(240)
def test_a_worker_killed_mid_training_leaves_the_servers_running_and_whole(tmp_path):
    env = {**os.environ, "CARDINAL_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    sets = [f'ps.job="{JOB}"', "embedding.dim=4", 'model.hidden=[16]']
    me = [sys.executable, "-m", "cardinal.cli"]
    servers = [subprocess.Popen([*me, "server", "--shard", f"{i}/2", "--data-dir", str(tmp_path),
                                 *sum((["--set", s] for s in sets), [])], env=env, stdout=subprocess.PIPE, text=True)
               for i in range(2)]
    worker = None
    try:
        ports = [dict(p.split("=", 1) for p in s.stdout.readline().split()[1:])["port"] for s in servers]
        addresses = [f"127.0.0.1:{p}" for p in ports]
        train_sets = [*sets, "ps.servers=[" + ",".join(f'"{a}"' for a in addresses) + "]",
                      f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=200000", "data.batch_size=500",
                      "metrics.log_every=1"]
        worker = subprocess.Popen([*me, "train", *sum((["--set", s] for s in train_sets), [])],
                                  env={**env, "CARDINAL_RUN_DIR": str(tmp_path / "run")},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
            time.sleep(0.1)
        assert worker.poll() is None, "the worker ended before it could be killed"
        worker.kill()  # in the middle of its pulls and pushes
        worker.wait()
        from cardinal.ps import connect

        client = connect(servers=addresses, job=JOB, token=TOKEN, timeout=20)
        stats = client.stats(check=True)  # every shard's invariants hold
        assert sum(s["tables"]["emb"]["rows"] for s in stats) > 0
        before = client.digest("emb")
        time.sleep(1.0)  # any request of the dead worker still on its way would land in this second
        assert client.digest("emb") == before  # nothing half-applied still moving
        ids = np.arange(50, dtype=np.int64)
        rows = client.pull("emb", ids, step=1).wait()
        client.push("emb", ids, np.ones((50, 5), np.float32), step=1).wait()
        after = client.pull("emb", ids, create=False).wait()
        assert (after < rows).all()  # the servers still apply updates: every value stepped down
        assert client.digest("emb") != before
        assert all(s.poll() is None for s in servers)
    finally:
        for p in [*servers, *([worker] if worker else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.timeout(240)
def test_every_worker_whose_server_dies_exits_2_naming_it_on_one_line(tmp_path):
    """Two workers (ranks 0 and 1) against two real servers; server 1 is killed mid-run: each
    worker exits 2 with one line naming shard 1 and its address, and no traceback."""
    from cardinal.jobs.launch import free_port

    env = {**os.environ, "CARDINAL_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    sets = [f'ps.job="{JOB}"', "embedding.dim=4", 'model.hidden=[16]']
    me = [sys.executable, "-m", "cardinal.cli"]
    servers = [subprocess.Popen([*me, "server", "--shard", f"{i}/2", "--data-dir", str(tmp_path),
                                 *sum((["--set", s] for s in sets), [])], env=env, stdout=subprocess.PIPE, text=True)
               for i in range(2)]
    workers, logs = [], [tmp_path / f"worker{r}.log" for r in range(2)]
    with reaped(servers), reaped(workers):
        ports = [dict(p.split("=", 1) for p in s.stdout.readline().split()[1:])["port"] for s in servers]
        train_sets = [*sets, "ps.servers=[" + ",".join(f'"127.0.0.1:{p}"' for p in ports) + "]", "ps.timeout_s=8",
                      f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=6000", "data.batch_size=250",
                      "train.epochs=1000", "metrics.log_every=1"]
        job = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "CARDINAL_RUN_DIR": str(tmp_path / "run")}
        for r, log in enumerate(logs):
            with open(log, "w") as out:
                workers.append(subprocess.Popen([*me, "train", *sum((["--set", s] for s in train_sets), [])],
                                                env={**env, **job, "RANK": str(r)}, stdout=out, stderr=out))
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
            time.sleep(0.1)
        assert all(w.poll() is None for w in workers), [log.read_text()[-2000:] for log in logs]
        servers[1].kill()  # in the middle of the workers' pulls and pushes
        codes = [w.wait(timeout=90) for w in workers]
    for r, log in enumerate(logs):
        text = log.read_text()
        said = [line for line in text.splitlines() if "error" in line.lower()]
        assert codes[r] == 2 and "Traceback" not in text, (r, codes[r], text[-3000:])
        assert len(said) == 1 and said[0].startswith(f"cardinal train: error: shard 1 at 127.0.0.1:{ports[1]}: "), \
            (r, said)
        assert said[0].endswith("start it again and resume the run (cardinal train --resume RUN_DIR))"), said


def final_state(run_dir: Path, recipe_obj):
    """Table digest and dense tensors of a run's newest checkpoint, read back in this process."""
    from cardinal.checkpoint import layout
    from cardinal.checkpoint.reader import Reader
    from cardinal.ps import connect

    found = layout.latest(run_dir / "checkpoints")
    client = connect(tables.store_config(recipe_obj), 1)
    client.load(found)
    return found.name, client.digest("emb"), Reader(found).dense_state()["model"]


SYNC = ['consistency.mode="sync"', "checkpoint.every=3", "train.epochs=5"]


@pytest.fixture(scope="module")
def straight_and_stopped(tmp_path_factory):
    """Two launches shared by the restarts: one straight to step 9, one stopped after its save at 6."""
    tmp_path = tmp_path_factory.mktemp("stopped")
    runs = []
    for steps in (9, 6):
        code, out = run_launch(launch_cmd(tmp_path, 2, 1, *SYNC, f"train.steps={steps}"))
        assert code == 0, out
        runs.append(Path(re.search(r"run directory (\S+)", out).group(1)))
    return runs


@pytest.mark.timeout(400)
@pytest.mark.parametrize("restart_servers", [3, 1])
def test_stopping_everything_after_a_save_and_restarting_is_bitwise_equal(tmp_path, straight_and_stopped,
                                                                          restart_servers):
    straight, stopped_run = straight_and_stopped
    stopped = tmp_path / stopped_run.name  # each restart resumes its own copy of the stopped run
    shutil.copytree(stopped_run, stopped)
    code, out = run_launch(launch_cmd(tmp_path, restart_servers, 1, *SYNC, "train.steps=9", resume=stopped))
    assert code == 0, out
    recipe_obj = load("criteo_synthetic", ["embedding.dim=4", "model.hidden=[16]"])
    a, b = final_state(straight, recipe_obj), final_state(stopped, recipe_obj)
    assert a[0] == b[0] == "step-0000000009" and a[1] == b[1]
    assert all(torch.equal(a[2][k], b[2][k]) for k in a[2])
    assert leftovers(tmp_path) == []

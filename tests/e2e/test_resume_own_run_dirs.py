"""Workers whose hosts hold no copy of the run directory: two ``cardinal train`` workers (ranks 0
and 1, a gloo group) against two servers, each worker with a run directory of its own. Worker 0's
is the run's; worker 1's stays empty, yet the job trains, checkpoints and resumes bitwise equal to
a run that went straight on: what a resume reads (recipe.json, the checkpoint, its data position,
best.json) worker 1 takes from worker 0 (``train/leader_reads.py``). When worker 0's directory
holds no checkpoint, both fail with the one line naming it, whatever worker 1's holds."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cardinal.checkpoint import layout
from cardinal.checkpoint.reader import Reader
from cardinal.jobs.launch import free_port
from cardinal.ps import connect
from cardinal.recipe import load
from cardinal.train import tables
from helpers.cluster import JOB, TOKEN, Cluster
from helpers.processes import reaped

pytestmark = pytest.mark.slow  # processes and whole runs

ME = [sys.executable, "-m", "cardinal.cli", "train"]
MODEL = ["embedding.dim=4", "model.hidden=[16]", 'train.baseline="none"']
RUN = [f'ps.job="{JOB}"', 'consistency.mode="sync"', "data.synthetic.rows=4000", "data.synthetic.eval_rows=1000",
       "data.synthetic.vocab=300", "data.batch_size=250", "checkpoint.every=3", "eval.every=3", "ps.timeout_s=8"]


def two_workers(tmp_path, run_dirs: list[Path], *args: str, servers: list[str] | None = None) -> list[tuple]:
    """(exit code, output) of ranks 0 and 1 of ``cardinal train ARGS``, rank r with its run directory
    ``run_dirs[r]`` (CARDINAL_RUN_DIR), against ``servers``."""
    sets = [*MODEL, *RUN, f'data.cache_dir="{tmp_path / "data"}"',
            *(["ps.servers=[" + ",".join(f'"{a}"' for a in servers) + "]"] if servers else [])]
    job = {**os.environ, "CARDINAL_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([*ME, *[a.replace("{run}", str(d)) for a in args], *sum((["--set", s] for s in sets), [])],
                              env={**job, "RANK": str(r), "LOCAL_RANK": str(r), "CARDINAL_RUN_DIR": str(d)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r, d in enumerate(run_dirs)]
    with reaped(procs):
        outs = [p.communicate(timeout=240)[0] for p in procs]
    return [(p.returncode, out) for p, out in zip(procs, outs)]


def trained(tmp_path, run_dirs: list[Path], *args: str) -> None:
    """Two workers to their end on two fresh servers, whose own directory is ``tmp_path``."""
    cluster = Cluster(tables.store_config(load(None, MODEL)), 2, tmp_path)
    try:
        done = two_workers(tmp_path, run_dirs, *args, servers=cluster.addresses)
    finally:
        cluster.stop()
    assert [code for code, _ in done] == [0, 0], [out[-3000:] for _, out in done]


def final_state(run_dir: Path):
    found = layout.latest(run_dir / "checkpoints")
    client = connect(tables.store_config(load(None, MODEL)), 1)
    client.load(found)
    return found.name, client.digest("emb"), Reader(found).dense_state()["model"]


@pytest.mark.timeout(600)
def test_a_worker_with_an_empty_run_directory_resumes_bitwise(tmp_path):
    straight = tmp_path / "straight"
    trained(tmp_path, [straight, tmp_path / "straight-1"], "--set", "train.steps=9")
    run, own = tmp_path / "run", tmp_path / "worker-1"
    trained(tmp_path, [run, own], "--set", "train.steps=6")
    assert layout.latest(run / "checkpoints").name == "step-0000000006"
    assert not own.exists() or not any(own.iterdir())  # worker 1 wrote nothing of the run
    elsewhere = tmp_path / "elsewhere"  # another host's directory: empty
    elsewhere.mkdir()
    trained(tmp_path, [run, elsewhere], "--resume", "{run}", "--set", "train.steps=9")
    assert not any(elsewhere.iterdir())
    a, b = final_state(straight), final_state(run)
    assert a[0] == b[0] == "step-0000000009" and a[1] == b[1]
    assert a[2].keys() == b[2].keys() and all(torch.equal(a[2][k], b[2][k]) for k in a[2])

    # worker 0's directory lacks the checkpoint, worker 1's holds the whole run: both fail, naming worker 0's
    bare, full = tmp_path / "bare", tmp_path / "full"
    bare.mkdir()
    shutil.copy(run / "recipe.json", bare / "recipe.json")
    shutil.copytree(run, full)
    failed = two_workers(tmp_path, [bare, full], "--resume", "{run}", "--set", "train.steps=12")
    line = f"cardinal train: error: no committed checkpoint in {bare / 'checkpoints'}: nothing to resume"
    for code, out in failed:
        said = [s for s in out.splitlines() if s.startswith("cardinal train: error:")]
        assert code == 2 and said == [line], out[-3000:]

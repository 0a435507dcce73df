"""``cardinal launch`` as a user runs it, from a test: the command over tiny generated data, the run
bounded in time and its process group killed whatever happens, what it left running, and a
finished run's model read back from its last checkpoint (to compare runs)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from cardinal.checkpoint.reader import Reader
from cardinal.ps import ShardStore
from cardinal.sharding.plan import ShardingPlan
from cardinal.recipe import from_dict, load
from cardinal.train import Trainer, tables

def launch_cmd(tmp_path, servers, workers, *sets, resume=None):
    base = [f'data.cache_dir="{tmp_path / "data"}"', f'train.run_dir="{tmp_path / "runs"}"',
            "data.synthetic.rows=6000", "data.synthetic.eval_rows=1000", "data.synthetic.vocab=300",
            "data.batch_size=250", "model.hidden=[16]", "embedding.dim=4", "metrics.log_every=1", "ps.timeout_s=8", *sets]
    args = sum((["--set", s] for s in base), [])
    tail = ["--resume", str(resume)] if resume else []
    return [sys.executable, "-m", "cardinal.cli", "launch", "--servers", str(servers), "--workers", str(workers),
            "--", *args, *tail]


def leftovers(marker: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", str(marker)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def run_launch(cmd, timeout=240):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


STEPS = ["train.steps=12", "eval.every=0"]


def model_of(tmp_path, run_dir: Path) -> tuple[dict, dict, dict]:
    """(summary, dense weights, {id: row values}) of a finished run."""
    summary = json.loads((run_dir / "summary.json").read_text())
    step = Path(summary["checkpoint"])
    saved = Reader(step)
    dense = saved.dense_state()["model"]
    recipe = from_dict(json.loads((run_dir / "recipe.json").read_text()))
    fresh = ShardStore(tables.store_config(recipe))._fresh_tables()
    rows = {}
    for name, cols in saved.shard_rows(ShardingPlan(1), 0, fresh).items():
        dim = fresh[name].dim
        rows.update({(name, int(i)): d[:dim] for i, d in zip(cols["ids"], cols["data"])})
    return summary, dense, rows


def embedded(tmp_path, *sets):
    base = launch_cmd(tmp_path, 1, 1, *sets)
    overrides = [base[i + 1] for i, a in enumerate(base) if a == "--set"]
    recipe = load("criteo_synthetic", [*overrides, f'train.run_dir="{tmp_path / "alone"}"'])
    Trainer(recipe, tmp_path / "alone", progress=False).fit()
    return model_of(tmp_path, tmp_path / "alone")


def launched(tmp_path, servers: int, workers: int, *sets):
    code, out = run_launch(launch_cmd(tmp_path, servers, workers, *sets), timeout=280)
    assert code == 0, out[-3000:]
    return model_of(tmp_path, Path(re.search(r"run directory (\S+)", out).group(1)))


CACHE = ["cache.bytes=\"1MiB\"", "cache.staleness=0"]  # a worker cache that changes no bit (sync)


def equal_models(a: tuple, b: tuple) -> None:
    """Two runs' dense weights and every row (``model_of``), bitwise."""
    assert a[1].keys() == b[1].keys() and a[2].keys() == b[2].keys()
    for k in a[1]:
        assert bool((a[1][k] == b[1][k]).all()), k
    for k in a[2]:
        np.testing.assert_array_equal(a[2][k], b[2][k])


def largest_difference(a: tuple, b: tuple) -> tuple[float, float]:
    """(dense, rows): the largest absolute difference between two runs' weights."""
    dense = max(float((a[1][k] - b[1][k]).abs().max()) for k in a[1])
    assert a[2].keys() == b[2].keys(), "the runs created different ids"
    rows = max(float(np.abs(a[2][k] - b[2][k]).max()) for k in a[2])
    return dense, rows

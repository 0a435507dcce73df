"""The recipe defines the math, the cluster only the speed: W workers on a global batch train the
model one process trains (sync: servers combine each step's pushes), and async workers keep to
the staleness bound. Real processes through ``cardinal launch``, bounded in time."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cardinal.checkpoint.reader import Reader
from cardinal.ps import ShardStore
from cardinal.recipe import from_dict, load
from cardinal.sharding.plan import ShardingPlan
from cardinal.train import Trainer, tables
from test_distributed import launch_cmd, leftovers, run_launch

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

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


def largest_difference(a: tuple, b: tuple) -> tuple[float, float]:
    """(dense, rows): the largest absolute difference between two runs' weights."""
    dense = max(float((a[1][k] - b[1][k]).abs().max()) for k in a[1])
    assert a[2].keys() == b[2].keys(), "the runs created different ids"
    rows = max(float(np.abs(a[2][k] - b[2][k]).max()) for k in a[2])
    return dense, rows


@pytest.mark.timeout(600)
@pytest.mark.parametrize("servers,workers", [(2, 2), (1, 3)])
def test_sync_workers_on_a_global_batch_train_the_embedded_model(tmp_path, servers, workers):
    """Same data per step, one combined update per step: equal to one process up to the order of
    float additions (each worker sums its share, the server sums the shares; DDP sums the dense
    parts). After 12 steps the weights differ by float rounding only (< 1e-5; the values are ~1e-2)."""
    sets = ['consistency.mode="sync"', *STEPS]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, servers, workers, *sets)
    assert together[0]["workers"] == workers and together[0]["steps"] == alone[0]["steps"] == 12
    assert together[0]["samples"] == alone[0]["samples"]
    dense, rows = largest_difference(alone, together)
    assert dense < 1e-5 and rows < 1e-5, (dense, rows)
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 1e-4
    assert together[0]["staleness_p99"] == 0
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(400)
def test_async_workers_keep_the_staleness_bound_and_report_it(tmp_path):
    sets = ['consistency.mode="async"', "consistency.async.staleness=1", 'consistency.async.compensation="lr"', *STEPS]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, 2, 2, *sets)
    assert together[0]["steps"] == 12 and together[0]["samples"] == alone[0]["samples"]
    assert 1 <= together[0]["staleness_p50"] <= together[0]["staleness_p99"] <= 2  # bound k = 1, plus the prefetch
    assert abs(together[0]["eval_auc"] - alone[0]["eval_auc"]) < 0.02  # close, not equal: pushes apply as they come
    assert leftovers(tmp_path) == []

"""Reloads read in a child process (``serve/follow_process.py``) make the model an in-process
``Follower`` makes, bit for bit; a reload that fails there fails here, and the next one goes on."""

import json

import numpy as np
import pytest

from cardinal.checkpoint import layout
from cardinal.serve.export import export_run
from cardinal.serve.follow import Follower
from cardinal.serve.follow_process import FollowerProcess
from cardinal.serve.model import ServingModel
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

# 12 steps; a checkpoint every 4 (4 full, 8 and 12 deltas on it)
FLAGS = ("checkpoint.every=4", "checkpoint.full_every=3", "checkpoint.keep=5", 'eval.early_stop="none"',
         "sparse_optimizer.lr=0.3")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("follow")
    trainer = Trainer(tiny_recipe(tmp, *FLAGS), tmp / "run", progress=False)
    trainer.fit()
    trainer.close()
    return tmp / "run"


def rows(model: ServingModel, name: str, ids: np.ndarray):
    return model.tables[name].lookup(ids)


@pytest.mark.slow
def test_a_reload_read_in_a_child_process_is_the_one_read_here(run, tmp_path):
    export_run(run, tmp_path / "x", checkpoint=layout.step_dir(run / "checkpoints", 4))
    old = ServingModel.load(tmp_path / "x")
    here = Follower(run).next_model(old)
    follower = FollowerProcess(run)
    try:
        follower.warm(old)
        there = follower.next_model(old)
        assert follower.next_model(there) is None  # nothing newer
    finally:
        follower.close()
    assert there.step == here.step == 12 and there.manifest == here.manifest
    probe = np.concatenate([np.arange(-5, 1000, dtype=np.int64), *(t.ids for t in old.tables.values())])
    for name in old.tables:
        for a, b in zip(rows(there, name, probe), rows(here, name, probe)):
            np.testing.assert_array_equal(a, b)
    feed = {"dense": np.ones((3, len(old.manifest["dense_fields"])), np.float32),
            "emb": np.ones((3, len(old.manifest["features"]), old.manifest["dim"]), np.float32),
            "wide": np.ones((3, len(old.manifest["features"])), np.float32)}
    np.testing.assert_array_equal(there.runner.predict(feed), here.runner.predict(feed))


@pytest.mark.slow
def test_a_reload_that_fails_in_the_child_fails_here_and_the_next_goes_on(run, tmp_path):
    export_run(run, tmp_path / "x", checkpoint=layout.step_dir(run / "checkpoints", 4))
    old = ServingModel.load(tmp_path / "x")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recipe.json").write_text(json.dumps(old.manifest["recipe"]))
    bad = layout.step_dir(tmp_path / "run" / "checkpoints", 20)
    bad.mkdir(parents=True)
    (bad / layout.COMMIT).write_text("{torn")
    follower = FollowerProcess(tmp_path / "run")
    try:
        with pytest.raises(ValueError):
            follower.next_model(old)
        follower._child.kill()  # a child gone (killed, out of memory): that reload fails, the next starts one
        follower._child.wait()
        bad.joinpath(layout.COMMIT).unlink()
        assert follower.next_model(old) is None
    finally:
        follower.close()

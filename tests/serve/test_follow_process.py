"""Reloads read in a child process (``serve/follow_process.py``) make the model an in-process
``Follower`` makes, bit for bit; a reload that fails there fails here, and the next one goes on."""

import json
import shutil

import numpy as np
import pytest

from cardinal.checkpoint import layout
from cardinal.serve.export import export_run
from cardinal.serve import overlay
from cardinal.serve.follow import Follower, Served
from cardinal.serve.follow_process import FollowerProcess, Mirror
from cardinal.serve.model import ServingModel
from cardinal.serve.overlay import Overlaid
from cardinal.serve.tables import SnapshotTable
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
    assert here.step == 12
    assert_same(there, here, np.concatenate([np.arange(-5, 1000, dtype=np.int64),
                                             *(t.ids for t in old.tables.values())]))


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


def assert_same(a: ServingModel, b: ServingModel, probe: np.ndarray) -> None:
    assert a.step == b.step and a.manifest == b.manifest
    for name in b.tables:
        assert len(a.tables[name]) == len(b.tables[name])
        for x, y in zip(rows(a, name, probe), rows(b, name, probe)):
            np.testing.assert_array_equal(x, y)
    feed = {"dense": np.ones((3, len(b.manifest["dense_fields"])), np.float32),
            "emb": np.ones((3, len(b.manifest["features"]), b.manifest["dim"]), np.float32),
            "wide": np.ones((3, len(b.manifest["features"])), np.float32)}
    np.testing.assert_array_equal(a.runner.predict(feed), b.runner.predict(feed))


@pytest.mark.slow
def test_the_child_merges_and_folds_each_delta_and_the_server_only_swaps_them_in(run, tmp_path, monkeypatch):
    """Checkpoints appear one at a time; each reload through the child (which holds the served
    tables) is the in-process follower's model, bit for bit, with no merge in this process: after a
    reload prepared and not applied, and after the child is killed and another sent the tables."""
    followed = tmp_path / "run"
    shutil.copytree(run, followed)
    aside = tmp_path / "aside"
    aside.mkdir()
    for s in (8, 12):
        shutil.move(layout.step_dir(followed / "checkpoints", s), aside)
    export_run(followed, tmp_path / "x", checkpoint=layout.step_dir(followed / "checkpoints", 4))
    served = here = ServingModel.load(tmp_path / "x")
    probe = np.concatenate([np.arange(-5, 1000, dtype=np.int64), *(t.ids for t in served.tables.values())])
    follower = FollowerProcess(followed)
    try:
        follower.warm(served)
        for s in (8, 12):
            shutil.move(aside / layout.step_dir(followed / "checkpoints", s).name, followed / "checkpoints")
            here = Follower(followed).next_model(here)
            with monkeypatch.context() as m:  # a merge or fold here fails the reload
                for cls in (Overlaid, SnapshotTable):
                    m.setattr(cls, "merged", lambda *a: pytest.fail("the server merged a delta"))
                if s == 8:
                    assert follower._ask("prepare", served).merged  # prepared, never applied
                served = follower.next_model(served)
            assert_same(served, here, probe)
            follower._child.kill()  # the next reload starts another child, and sends it the served tables
            follower._child.wait()
    finally:
        follower.close()


@pytest.mark.slow
@pytest.mark.parametrize("fold", [0.0, 10.0])
def test_a_delta_the_mirror_merged_or_folded_applies_as_one_merged_here(run, tmp_path, monkeypatch, fold):
    monkeypatch.setattr(overlay, "FOLD", fold)  # 0: every reload folds; 10: none does
    export_run(run, tmp_path / "x", checkpoint=layout.step_dir(run / "checkpoints", 4))
    old = ServingModel.load(tmp_path / "x")
    here = Follower(run).next_model(old)
    served, mirror = Served.of(old), Mirror()
    assert mirror.finish(served, Follower(run).prepare(served)).merged is False  # tables not held: merged here
    mirror.sync(served, old.tables)
    prepared = mirror.finish(served, Follower(run).prepare(served))
    assert prepared.merged
    for cls in (Overlaid, SnapshotTable):
        monkeypatch.setattr(cls, "merged", lambda *a: pytest.fail("the server merged a delta"))
    there = prepared.apply(old)
    assert all(isinstance(t, SnapshotTable if fold == 0 else Overlaid) for t in there.tables.values())
    assert_same(there, here, np.concatenate([np.arange(-5, 1000, dtype=np.int64),
                                              *(t.ids for t in old.tables.values())]))

"""The trainer's dense state in a checkpoint, tampered with: ``cardinal eval`` exits non-zero
naming the file, and a trainer's tables and dense parameters stay as they were."""

import json
import shutil

import numpy as np
import pytest
import torch

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.recipe import from_dict
from cardinal.train import Trainer
from helpers.checkpoint_edit import edit_json, reseal
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dense")
    run = tmp / "run"
    Trainer(tiny_recipe(tmp, "ps.shards=2", "train.steps=4"), run, progress=False).fit()
    return run


def _first_tensor(tree):
    """The node of the first saved tensor of the model's state."""
    return tree["__dict__"][0][1]["__dict__"][0][1]


def unlisted_tensor(dense):
    name = _first_tensor(json.loads((dense / "state.json").read_text())["tree"])["__tensor__"]
    np.save(dense / "t999.npy", np.load(dense / name) + 1)
    edit_json(dense / "state.json", lambda m: _first_tensor(m["tree"]).update(__tensor__="t999.npy"))
    reseal(dense.parent)


def tensor_outside(dense):
    name = _first_tensor(json.loads((dense / "state.json").read_text())["tree"])["__tensor__"]
    shutil.copy(dense / name, dense.parent / "outside.npy")

    def point(m):
        _first_tensor(m["tree"]).update(__tensor__="../outside.npy")
        m["files"]["../outside.npy"] = m["files"][name]
    edit_json(dense / "state.json", point)
    reseal(dense.parent)


def state_edited_unsealed(dense):
    edit_json(dense / "state.json", lambda m: m.update(note="edited by hand"))


def nan_tensor(dense):
    name = _first_tensor(json.loads((dense / "state.json").read_text())["tree"])["__tensor__"]
    values = np.load(dense / name)
    values.flat[0] = np.nan
    np.save(dense / name, values)
    reseal(dense.parent)


def wrong_shape(dense):
    name = _first_tensor(json.loads((dense / "state.json").read_text())["tree"])["__tensor__"]
    np.save(dense / name, np.load(dense / name)[..., :1].copy())
    reseal(dense.parent)


CASES = [unlisted_tensor, tensor_outside, state_edited_unsealed, nan_tensor, wrong_shape]


def _tampered_copy(saved_run, tmp_path, edit):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    edit(layout.latest(run / "checkpoints") / "dense")
    return run


@pytest.mark.parametrize("edit", CASES, ids=[f.__name__ for f in CASES])
def test_eval_exits_non_zero_on_a_tampered_dense_state(saved_run, tmp_path, capsys, edit):
    run = _tampered_copy(saved_run, tmp_path, edit)
    assert cli.main(["eval", str(run)]) == 2
    assert "state.json" in capsys.readouterr().err or edit is nan_tensor


@pytest.mark.parametrize("edit", CASES, ids=[f.__name__ for f in CASES])
def test_trainer_load_of_a_tampered_dense_state_changes_nothing(saved_run, tmp_path, edit):
    run = _tampered_copy(saved_run, tmp_path, edit)
    trainer = Trainer(from_dict(json.loads((run / "recipe.json").read_text())), run, progress=False)
    digest = trainer.client.digest("emb")
    model = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(ValueError, match=r"state\.json|t\d+\.npy"):
        trainer.load(run / "checkpoints")
    assert trainer.client.digest("emb") == digest and trainer.step == 0
    assert all(torch.equal(model[k], v) for k, v in trainer.model.state_dict().items())


def test_an_untampered_run_evaluates(saved_run, capsys):
    assert cli.main(["eval", str(saved_run)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 4

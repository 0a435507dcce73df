"""A MovieLens run exports (its fields' ids over two tables, no dense features) and the export predicts
what eval predicts; serving, which parses requests in the Criteo layout, refuses it by name."""

import numpy as np
import pytest

from cardinal import cli
from cardinal.recipe import load
from cardinal.serve.http import PredictionServer
from cardinal.serve.model import ServingModel
from cardinal.train import Trainer
from helpers.movielens_copy import write_movielens
from helpers.serving import eval_probabilities

pytestmark = pytest.mark.slow  # a whole run


def test_a_movielens_run_exports_what_eval_predicts_and_serving_refuses_it_by_name(tmp_path, capsys):
    folder = write_movielens(tmp_path / "movielens", users=200, movies=300, ratings=10_000)
    recipe = load("movielens", [f'data.train="{folder}"'])
    trainer = Trainer(recipe, tmp_path / "run", progress=False)
    trainer.fit()
    trainer.close()

    assert cli.main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "x")]) == 0
    said = capsys.readouterr().out
    assert "cardinal serve parses Criteo-layout requests only" in said and "serve it with" not in said
    model = ServingModel.load(tmp_path / "x")
    assert model.manifest["data_format"] == "movielens" and {"emb", "user"} <= set(model.tables)
    expected, batches = eval_probabilities(recipe, model.manifest["checkpoint"], tmp_path)
    got = np.concatenate([model.predict(b) for b in batches])
    assert np.abs(got - expected).max() <= 1e-5
    with pytest.raises(ValueError, match="trained on 'movielens' data; serving parses requests in the Criteo"):
        PredictionServer(model)

"""DeepFwFM's second-order term: each field pair weighted, against a slow pair-by-pair sum; at its
start it is DeepFM's FM; the weights learn to quiet a pair that carries no signal."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cardinal import cli
from cardinal.models import DeepFM, DeepFwFM
from cardinal.serve.model import ServingModel
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe
from helpers.serving import eval_probabilities


def slow_second_order(model: DeepFwFM, emb: torch.Tensor) -> torch.Tensor:
    n = emb.shape[1]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return torch.stack([sum(model.pair_weights[k] * (e[i] @ e[j]) for k, (i, j) in enumerate(pairs)) for e in emb])


def test_each_pair_is_weighted_by_its_own_weight():
    torch.manual_seed(0)
    model, emb = DeepFwFM(3, 5, 4, [8]), torch.randn(6, 5, 4)
    with torch.no_grad():
        model.pair_weights.uniform_(-2, 2)
    torch.testing.assert_close(model.second_order(emb), slow_second_order(model, emb), rtol=1e-5, atol=1e-5)


def test_it_starts_as_deepfms_fm():
    torch.manual_seed(0)
    model, emb = DeepFwFM(3, 7, 4, [8]), torch.randn(16, 7, 4)
    torch.testing.assert_close(model.second_order(emb), DeepFM.second_order(model, emb), rtol=1e-5, atol=1e-5)
    assert "pairs" not in model.state_dict()  # derived from the field count: a checkpoint holds only the weights


def test_the_weights_of_pairs_without_signal_shrink():
    """Labels drawn from <emb_0, emb_1> alone: that pair's weight grows past 1, every other falls below 0.3."""
    torch.manual_seed(0)
    model, emb = DeepFwFM(0, 4, 3, [4]), torch.randn(512, 4, 3)
    labels = torch.bernoulli(torch.sigmoid(2 * (emb[:, 0] * emb[:, 1]).sum(1)))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        loss = F.binary_cross_entropy_with_logits(model(torch.zeros(512, 0), emb, torch.zeros(512, 4)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights = dict(zip(map(tuple, model.pairs.T.tolist()), model.pair_weights.tolist()))
    assert weights.pop((0, 1)) > 1.5 and all(abs(w) < 0.3 for w in weights.values())


@pytest.mark.slow
def test_a_run_trains_exports_and_serves_what_eval_predicts(tmp_path):
    recipe = tiny_recipe(tmp_path, 'model={name="deepfwfm", hidden=[16]}', "checkpoint.every=12")
    trainer = Trainer(recipe, tmp_path / "run", progress=False)
    trainer.fit()
    weights = trainer.model.pair_weights.detach().clone()
    trainer.close()
    assert not torch.equal(weights, torch.ones_like(weights))  # the pairs' weights trained
    assert cli.main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "x")]) == 0
    model = ServingModel.load(tmp_path / "x")
    expected, batches = eval_probabilities(recipe, model.manifest["checkpoint"], tmp_path)
    got = np.concatenate([model.predict(b) for b in batches])
    assert np.abs(got - expected).max() <= 1e-5

"""The `lr` baseline: a model of its own (model.name = "lr"), and trained beside every run's model
on the same batches (train.baseline = "lr"), reported in the summary."""

import json

import pytest
import torch

from cardinal.recipe import load
from cardinal.train import Trainer, tables, trainer as trainer_module
from cardinal.worker.device import DeviceRows
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

LEARNS = ["ps.shards=3", "data.synthetic.vocab=30", "train.epochs=3", "dense_optimizer.lr=0.01", "eval.every=12"]


@pytest.mark.parametrize("extra", [[], ["embedding.clip_ratio=0.5", "dense_optimizer.warmup_steps=20",
                                        'dense_optimizer.decay="linear"'], ["staged"]],
                         ids=["plain", "clip-warmup-decay", "staged"])
def test_the_baseline_is_what_a_separate_lr_run_of_the_same_batches_trains(tmp_path, extra, monkeypatch):
    """Bitwise, though it shares the model's dedup, its pulls go out with the model's and one backward
    sends both collections' pushes (step.py); "staged": both runs' rows staged as on a GPU (on the CPU)."""
    if extra == ["staged"]:
        monkeypatch.setattr(trainer_module, "staging_for", lambda device: DeviceRows(device, staged=True))
        extra = []
    deep = Trainer(tiny_recipe(tmp_path, *LEARNS, *extra), tmp_path / "deep", progress=False)
    summary = deep.fit()
    layouts = deep.embedding.layouts  # each batch de-duplicated once, for both collections
    assert layouts is deep.baseline.embedding.layouts and layouts.hits >= deep.step
    # tiny_recipe without model.hidden (the `lr` model takes no settings)
    sets = [f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=3000", "data.synthetic.eval_rows=1000",
            "data.synthetic.vocab=300", "data.batch_size=256", "data.eval_batch_size=1000", "embedding.dim=4",
            "metrics.log_every=2", *LEARNS, *extra, 'model.name="lr"']
    lr = Trainer(load(None, sets), tmp_path / "lr", progress=False)
    alone = lr.fit()
    assert lr.baseline is None and tables.row_width(lr.recipe, "emb") == 1  # one weight per id
    assert summary["baseline_lr_auc"] > 0.6, "logistic regression learns the tiny data well above chance"
    # the same math on the same batches: equal, not just close
    assert summary["baseline_lr_auc"] == alone["eval_auc"]
    assert summary["baseline_lr_logloss"] == alone["eval_logloss"]
    assert deep.client.digest("lr_emb") == lr.client.digest("emb")
    a, b = deep.baseline.model.state_dict(), lr.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    saved = json.loads((tmp_path / "deep" / "summary.json").read_text())
    assert saved["baseline_lr_auc"] == summary["baseline_lr_auc"] and "baseline" in saved["timings_s"]


def test_the_baseline_changes_nothing_of_the_model(tmp_path):
    """Its rows, dense layer and random draws are its own: the model trains the same bits without it."""
    with_lr = Trainer(tiny_recipe(tmp_path, *LEARNS), tmp_path / "a", progress=False)
    with_lr.fit()
    without = Trainer(tiny_recipe(tmp_path, *LEARNS, 'train.baseline="none"'), tmp_path / "b", progress=False)
    summary = without.fit()
    assert "baseline_lr_auc" not in summary
    assert with_lr.client.digest("emb") == without.client.digest("emb")
    a, b = with_lr.model.state_dict(), without.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_without_the_baseline_is_refused_by_a_run_with_it(tmp_path):
    Trainer(tiny_recipe(tmp_path, 'train.baseline="none"', "train.steps=2"), tmp_path / "a", progress=False).fit()
    with pytest.raises(ValueError, match="baseline"):
        Trainer(tiny_recipe(tmp_path, "train.steps=4"), tmp_path / "a", progress=False).fit(resume=True)

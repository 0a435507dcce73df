"""The regularisation knobs in a training run: each changes the run, and all off is the default. (A
run with all of them on resumes bitwise, dropout masks and the lr schedule following the step:
test_resume_bitwise.py.)"""

import pytest

from cardinal.train import Trainer
from helpers.recipes import tiny_recipe
from helpers.runs import same, state

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

ALL_ON = ["sparse_optimizer.l2=1e-3", "embedding.clip_ratio=1.0", "embedding.clip_min=1e-4", "model.dropout=0.3",
          "dense_optimizer.warmup_steps=5", 'dense_optimizer.decay="cosine"', "dense_optimizer.min_lr_ratio=0.1"]


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "ps.shards=2", "train.epochs=3", *extra)


@pytest.mark.slow
def test_each_regulariser_changes_the_run_and_all_are_off_by_default(tmp_path):
    def run(name, *extra):
        trainer = Trainer(recipe(tmp_path, "train.steps=6", *extra), tmp_path / name, progress=False)
        trainer.fit()
        return trainer
    default = run("default")
    assert default.embedding.clip is None and not default.schedule.active and not default.model_seeds
    assert default.model.deep.dropout == 0  # deepfm's MLP
    base = state(default)
    for i, flags in enumerate([ALL_ON[:1], ALL_ON[1:3], ALL_ON[3:4], ALL_ON[4:5], ALL_ON[5:7]]):
        other = state(run(f"on{i}", *flags))
        assert not same(base, other), flags
        if flags[0].startswith(("sparse_optimizer", "embedding")):
            assert other[0] != base[0], flags  # the servers' rows differ
    warm = run("warm", "dense_optimizer.warmup_steps=10")
    assert [g["lr"] for g in warm.optimizer.param_groups] == [pytest.approx(0.001 * 6 / 10, rel=1e-12)]

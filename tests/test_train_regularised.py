"""The regularisation knobs in a training run: each changes the run, all off is the default, and a
run with all of them on resumes bitwise (dropout masks and the lr schedule follow the step)."""

import pytest
import torch

from cardinal.train import Trainer
from conftest import tiny_recipe

ALL_ON = ["sparse_optimizer.l2=1e-3", "embedding.clip_ratio=1.0", "embedding.clip_min=1e-4", "model.dropout=0.3",
          "dense_optimizer.warmup_steps=5", 'dense_optimizer.decay="cosine"', "dense_optimizer.min_lr_ratio=0.1"]


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "ps.shards=2", "train.epochs=3", *extra)


def state(trainer):
    return trainer.client.digest("emb"), {k: v.clone() for k, v in trainer.model.state_dict().items()}


def same(a, b) -> bool:
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


class Crash(Exception):
    pass


def test_resume_with_every_regulariser_on_is_bitwise(tmp_path, monkeypatch):
    flags = [*ALL_ON, "checkpoint.every=7", "train.steps=17"]
    straight = Trainer(recipe(tmp_path, *flags), tmp_path / "a", progress=False)
    straight.fit()
    crashing = Trainer(recipe(tmp_path, *flags), tmp_path / "b", progress=False)
    save = crashing.save

    def save_then_crash():
        step = save()
        if step == 7:
            raise Crash  # the process dies right after its first checkpoint
        return step
    monkeypatch.setattr(crashing, "save", save_then_crash)
    with pytest.raises(Crash):
        crashing.fit()
    resumed = Trainer(recipe(tmp_path, *flags), tmp_path / "b", progress=False)
    assert resumed.fit(resume=True)["steps"] == 17
    assert same(state(straight), state(resumed))
    lr = [g["lr"] for g in resumed.optimizer.param_groups]
    assert lr == [pytest.approx(resumed.schedule.lr(17), rel=1e-12)] * len(lr)


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

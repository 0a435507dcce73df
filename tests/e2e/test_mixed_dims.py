"""Mixed-dimension embeddings (``embedding.dims``, ``models/projection.py``): one table per field,
C5 at dim 32 and the rest at 16, trains, resumes bitwise, evaluates, exports and serves what
eval predicts; bad settings are refused by name; runs without it keep their dense state as before."""

import json

import numpy as np
import pytest
import torch

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.models.projection import Projected
from cardinal.recipe import load
from cardinal.serve.export import export_run
from cardinal.serve.follow import Follower
from cardinal.serve.model import ServingModel
from cardinal.train import Trainer, tables
from cardinal.train.resume import resumed_recipe
from helpers.recipes import tiny_recipe
from helpers.serving import eval_probabilities

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

MIXED = ["embedding.dim=16", "embedding.shared=false", "embedding.dims={C5=32}"]
# the tiny recipe that learns (test_train.LEARNS): 36 steps, eval AUC well above 0.5
LEARNS = ["data.synthetic.vocab=30", "train.epochs=3", "dense_optimizer.lr=0.01", 'eval.early_stop="none"']


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "ps.shards=2", *MIXED, *extra)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished mixed run: 36 steps, checkpoints at 12, 24 (a delta) and 36 (a delta)."""
    tmp = tmp_path_factory.mktemp("mixed")
    r = recipe(tmp, *LEARNS, "checkpoint.every=12", "checkpoint.full_every=3", "checkpoint.keep=5")
    trainer = Trainer(r, tmp / "run", progress=False)
    start = trainer.model.projections["C5"].weight.detach().clone()
    summary = trainer.fit()
    yield trainer, summary, start, tmp / "run", r
    trainer.close()


def test_a_mixed_run_learns_with_each_table_at_its_own_width(run, capsys):
    trainer, summary, start, run_dir, _ = run
    assert summary["steps"] == 36 and summary["eval_auc"] > 0.6, "the tiny mixed run should learn well above 0.5"
    assert summary["baseline_lr_auc"] > 0.6
    losses = [r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    # every row pulled back has its table's width: dim + 1 (DeepFM's wide weight); the baseline's 1
    batch = next(iter(trainer.eval_data))
    for table, width in [("C5", 33), ("C6", 17), ("C1", 17), ("lr_C5", 1), ("lr_C6", 1)]:
        ids = np.unique(batch.sparse[table.removeprefix("lr_")].values)
        rows = trainer.client.pull(table, ids, create=False).wait()
        assert rows.shape == (len(ids), width) and np.abs(rows).sum() > 0, table
    # the projection C5 -> 16 is the dense optimizer's, and it trained
    weight = trainer.model.projections["C5"].weight
    assert isinstance(trainer.model, Projected) and list(trainer.model.projections) == ["C5"]
    assert weight.shape == (16, 32) and not torch.equal(weight.detach(), start)
    assert any(p is weight for g in trainer.optimizer.param_groups for p in g["params"])
    assert set(trainer.model.state_dict()) == {"projections.C5.weight"} | {
        f"model.{k}" for k in trainer.model.model.state_dict()}
    # `cardinal eval` reads the kept checkpoint back, projection included
    assert cli.main(["eval", str(run_dir)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["eval_auc"] == pytest.approx(summary["eval_auc"], abs=1e-6)


def test_a_resume_may_not_change_the_dims(tmp_path):
    """(Resuming a mixed run is bitwise: test_resume_bitwise.py.)"""
    (tmp_path / "recipe.json").write_text(json.dumps(recipe(tmp_path).to_dict()))
    for override, key in [("embedding.dims.C5=64", "embedding.dims.C5"), ("embedding.dims.C6=8", "embedding.dims.C6"),
                          ("embedding.dims={}", "embedding.dims.C5")]:
        with pytest.raises(ValueError, match=f"--resume cannot change {key} "):
            resumed_recipe(tmp_path, [override])


def test_export_serves_what_eval_predicts_and_follows_new_checkpoints(run, tmp_path):
    _, _, _, run_dir, r = run
    root = run_dir / "checkpoints"
    m = export_run(run_dir, tmp_path / "x", checkpoint=layout.step_dir(root, 36))
    assert m["dims"] == tables.table_dims(r) and m["dims"]["C5"] == 32 and m["dims"]["C6"] == 16
    assert m["tables"]["C5"]["width"] == 33 and m["tables"]["C6"]["width"] == 17 and "lr_C5" not in m["tables"]
    model = ServingModel.load(tmp_path / "x")
    expected, batches = eval_probabilities(r, m["checkpoint"], tmp_path)
    got = np.concatenate([model.predict(b) for b in batches])
    assert np.abs(got - expected).max() <= 1e-5
    # a served model following the run: the new dense weights (projection included) swap into the graph
    export_run(run_dir, tmp_path / "at12", checkpoint=layout.step_dir(root, 12))
    old = ServingModel.load(tmp_path / "at12")
    new = Follower(run_dir).next_model(old)
    assert new.step == 36
    np.testing.assert_allclose(np.concatenate([new.predict(b) for b in batches]), got, atol=1e-6)


@pytest.mark.parametrize("sets, says", [
    (["embedding.dims={C5=0}"], "embedding.dims maps table names to their dims"),
    (["embedding.dims={C5=true}"], "embedding.dims maps table names to their dims"),
    (["embedding.dims={C5=2.5}"], "embedding.dims maps table names to their dims"),
    (["embedding.dims=32"], "embedding.dims maps table names to their dims"),
    (["embedding.dims={C5=32}", "compression.fiited.chunks=2"],
     "embedding.dims with compression.fiited.chunks > 1 is not supported"),
    (["embedding.dims={C5=32}", "compression.saec.ratio=20", "compression.saec.at=5", "checkpoint.full_every=1"],
     "embedding.dims with compression.saec.ratio is not supported"),
])
def test_bad_dims_are_refused_by_the_recipe(tmp_path, sets, says):
    with pytest.raises(ValueError, match=says):
        tiny_recipe(tmp_path, "embedding.shared=false", *sets)


@pytest.mark.parametrize("sets, says", [
    (["embedding.shared=false", "embedding.dims={C99=32}"], "embedding.dims names 'C99', not a table of this recipe"),
    (["embedding.shared=false", "embedding.dims={lr_C5=32}"], "embedding.dims names 'lr_C5', not a table"),
    (["embedding.dims={C5=32}"], "embedding.dims names 'C5'.*embedding.shared = true: every field reads table 'emb'"),
    (['model.name="lr"', "embedding.shared=false", "embedding.dims={C5=32}"], "model 'lr' has no embedding values"),
])
def test_dims_naming_no_table_of_the_recipe_are_refused(tmp_path, sets, says):
    r = load(None, [f'data.cache_dir="{tmp_path}"', *sets])
    with pytest.raises(ValueError, match=says):
        tables.store_config(r)


def test_shared_table_may_have_its_own_dim(tmp_path):
    r = load(None, ["embedding.dim=16", "embedding.dims={emb=32}"])
    widths = {t.name: t.dim for t in tables.store_config(r).tables}
    assert widths == {"emb": 33, "lr_emb": 1}


def test_without_dims_the_dense_state_is_the_models_own(tmp_path):
    """No projection module, and the state dict keys of today, for runs whose tables all have embedding.dim."""
    from cardinal.models import DeepFM

    plain = Trainer(tiny_recipe(tmp_path), tmp_path / "a", progress=False)
    same = Trainer(tiny_recipe(tmp_path, "embedding.shared=false", "embedding.dims={C5=4}"), tmp_path / "b",
                   progress=False)
    reference = DeepFM(13, 26, 4, hidden=[16]).state_dict()
    for trainer in (plain, same):
        assert type(trainer.model) is DeepFM
        assert {k: v.shape for k, v in trainer.model.state_dict().items()} == {k: v.shape for k, v in reference.items()}
        trainer.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_sync_workers_train_the_projection_one_process_trains(tmp_path):
    """The projections are dense parameters like the rest (DDP sums their gradients): two workers on
    a global batch end where one process does, up to float rounding (as tests/e2e/test_global_batch.py)."""
    from helpers.launch import STEPS, embedded, launched, largest_difference

    sets = ['consistency.mode="sync"', *STEPS, *MIXED]
    alone = embedded(tmp_path, *sets)
    together = launched(tmp_path, 1, 2, *sets)
    assert together[0]["workers"] == 2 and "projections.C5.weight" in together[1]
    dense, rows = largest_difference(alone, together)
    assert dense < 1e-5 and rows < 1e-5, (dense, rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the device path is checked on a GPU machine")
def test_a_mixed_run_on_cuda_equals_the_cpu_run_within_tolerance(tmp_path):
    """Rows of each table's width staged onto the device, split and projected there (as tests/e2e/test_gpu.py)."""
    runs = {}
    for device in ("cpu", "cuda"):
        trainer = Trainer(recipe(tmp_path, f'train.device="{device}"'), tmp_path / device, progress=False)
        runs[device] = (trainer, trainer.fit())
    (cpu, s_cpu), (gpu, s_gpu) = runs["cpu"], runs["cuda"]
    assert s_gpu["device"].startswith("cuda") and s_gpu["eval_auc"] == pytest.approx(s_cpu["eval_auc"], abs=1e-3)
    for k, v in cpu.model.state_dict().items():
        torch.testing.assert_close(gpu.model.state_dict()[k].cpu(), v, rtol=1e-3, atol=1e-4)
    for trainer, _ in runs.values():
        trainer.close()

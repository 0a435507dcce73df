"""Training end to end on tiny generated data: outputs and the command line (bitwise resume:
test_resume_bitwise.py)."""

import json

import pytest

from cardinal import cli
from cardinal.recipe import RECIPES, load
from cardinal.recipe.consistency import ConsistencyConfig
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def recipe(tmp_path, *extra):
    return tiny_recipe(tmp_path, "ps.shards=3", *extra)


# A tiny recipe that learns: 30 ids per field at most, 3 epochs (36 steps), dense lr 0.01. Measured
# eval AUC over train.seed = data.synthetic.seed = 0..5: 0.656 0.722 0.691 0.627 0.727 0.688 (teacher
# ~0.87); a model that learns nothing scores 0.5 +- 0.02 on 1,000 rows, so 0.6 is 5 sigma above chance.
LEARNS = ["data.synthetic.vocab=30", "train.epochs=3", "dense_optimizer.lr=0.01"]


def test_a_run_learns_and_writes_metrics_curves_summary_and_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    summary = Trainer(recipe(tmp_path, *LEARNS, "eval.every=18"), run, progress=False).fit()
    assert summary["steps"] == 36 and summary["teacher_eval_auc"] > 0.75
    assert 0.6 < summary["eval_auc"] <= 1, "the tiny recipe should learn well above chance (0.5)"
    assert set(summary["timings_s"]) >= {"data", "compute", "dedup", "pull_wait", "push"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval_auc" in r] == [18, 36]
    assert all(r["loss"] > 0 for r in records if "loss" in r)
    assert (run / "curves.png").stat().st_size > 1000
    assert json.loads((run / "summary.json").read_text())["eval_auc"] == summary["eval_auc"]
    assert json.loads((run / "recipe.json").read_text())["model"]["hidden"] == [16]
    assert summary["checkpoint"].endswith("step-0000000036")
    with pytest.raises(ValueError, match="already holds checkpoints"):
        Trainer(recipe(tmp_path), run, progress=False).fit()


def test_eval_command_reproduces_the_final_evaluation(tmp_path, capsys):
    run = tmp_path / "run"
    summary = Trainer(recipe(tmp_path), run, progress=False).fit()
    assert cli.main(["eval", str(run)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["step"] == 12 and printed["eval_auc"] == pytest.approx(summary["eval_auc"], abs=1e-6)


def test_train_command_and_resume(tmp_path, capsys):
    sets = [f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=2000", "data.synthetic.eval_rows=500",
            "data.batch_size=500", "model.hidden=[8]", "embedding.dim=4", f'train.run_dir="{tmp_path / "runs"}"',
            "train.steps=2"]
    assert cli.main(["train", *sum((["--set", s] for s in sets), [])]) == 0
    out = capsys.readouterr().out
    assert "AUC" in out and "teacher AUC" in out
    run_dir = next((tmp_path / "runs").iterdir())
    assert cli.main(["train", "--resume", str(run_dir), "--set", "train.steps=4"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4


def test_bad_recipe_values_are_named_errors(capsys):
    assert cli.main(["train", "--set", "model.depth=3"]) == 2
    assert "model 'deepfm' has no setting 'depth'" in capsys.readouterr().err
    assert cli.main(["train", "no_such_recipe"]) == 2
    assert "recipe 'no_such_recipe' not found" in capsys.readouterr().err


def test_switching_model_by_override_starts_from_its_defaults():
    r = load("criteo_synthetic", ["model.top=[32]", 'model.name="dlrm"'])
    assert r.model == {"name": "dlrm", "top": [32]}


def test_switching_sparse_optimizer_by_override_starts_from_its_defaults():
    # the default recipe's adagrad has initial_accumulator, which adam does not take
    assert load("criteo_synthetic", ['sparse_optimizer.name="adam"']).sparse_optimizer == {"name": "adam"}
    r = load("criteo_synthetic", ["sparse_optimizer.lr=0.5", 'sparse_optimizer.name="ftrl"'])
    assert r.sparse_optimizer == {"name": "ftrl", "lr": 0.5}
    assert load("criteo_synthetic", ['sparse_optimizer.name="adagrad"']).sparse_optimizer["lr"] == 0.03


def test_shipped_recipes_load():
    for path in sorted(RECIPES.glob("*.toml")):
        load(path)
    assert {p.stem for p in RECIPES.glob("*.toml")} >= {"criteo_synthetic", "movielens"}


def test_no_new_cli_options():
    """Knobs belong in recipes (--set section.key=value), not in flags: adding one is a decision."""
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    options = {name: sorted(o for a in p._actions for o in a.option_strings) for name, p in sub.choices.items()}
    assert options == {"train": ["--help", "--resume", "--set", "-h"], "recipe": ["--help", "-h"],
                       "eval": ["--checkpoint", "--help", "--set", "-h"],
                       "generate": ["--help", "--set", "-h"], "convert": ["--help", "--out", "--strict", "-h"],
                       "server": ["--data-dir", "--help", "--host", "--port", "--set", "--shard", "-h"],
                       "launch": ["--help", "--servers", "--workers", "-h"], "data": ["--help", "-h"],
                       "sweep": ["--grid", "--help", "--out", "--parallel", "--set", "-h"],
                       # serving is not training: its few knobs are the server's, not a recipe's
                       "export": ["--checkpoint", "--help", "--out", "--ratio", "--tables", "-h"],
                       # its limits (max_body_mb, timeouts, max_connections) are --set KEY=VALUE
                       "serve": ["--follow", "--help", "--host", "--max-batch", "--poll", "--port", "--set",
                                 "--threads", "-h"],
                       "top": ["--help", "--interval", "--once", "-h"],
                       "plan": ["--help", "--out", "--set", "--stats", "-h"]}


def test_auto_consistency_is_async_in_one_process_and_sync_with_servers_or_workers(tmp_path):
    c = ConsistencyConfig()
    assert c.mode == "auto"
    assert (c.resolve(distributed=False), c.resolve(distributed=True)) == ("async", "sync")
    assert ConsistencyConfig(mode="async").resolve(distributed=True) == "async"
    assert Trainer(tiny_recipe(tmp_path), tmp_path / "run", progress=False).consistency == "async"

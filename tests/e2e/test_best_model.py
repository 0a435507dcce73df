"""The best model a run saw: evaluation across epochs, the best checkpoint kept, early stopping,
callbacks. A run is made to get worse on purpose: from step 18 a callback sets the dense lr to
1.0 (the tiny recipe learns at 0.01), and eval AUC falls after step 15 (measured: 0.54 0.59
0.63 at steps 5-15, then 0.61 0.55 0.53 0.56 0.59)."""

import json

import pytest
import torch

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.train import Callback, Trainer
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

FLAGS = ["ps.shards=3", "data.synthetic.vocab=30", "train.epochs=3", "dense_optimizer.lr=0.01", "eval.every=5",
         "sparse_optimizer.lr=0.02"]  # improves until step 25 without the noise (at lr 0.05 it peaks at step 5)


class Sabotage(Callback):
    """From step ``at`` on, a dense lr far too large (set again after every step, so a resume keeps it)."""

    def __init__(self, at: int = 18, lr: float = 1.0):
        self.at, self.lr = at, lr

    def on_step(self, trainer, step, loss):
        if step >= self.at:
            for group in trainer.optimizer.param_groups:
                group["lr"] = self.lr


class Noise(Callback):
    """From step ``at`` on, seeded noise added to the dense weights after each step: a function of
    the step alone, so a resumed run is spoiled exactly as the straight one."""

    def __init__(self, at: int = 18, scale: float = 0.3):
        self.at, self.scale = at, scale

    def on_step(self, trainer, step, loss):
        if step >= self.at:
            g = torch.Generator().manual_seed(step)
            with torch.no_grad():
                for p in trainer.model.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * self.scale)


class Record(Callback):
    def __init__(self):
        self.steps, self.evals, self.checkpoints = [], [], []

    def on_step(self, trainer, step, loss):
        self.steps.append((step, loss))

    def on_eval(self, trainer, step, result):
        self.evals.append((step, result["eval_auc"], trainer.best.step))

    def on_checkpoint(self, trainer, step, path, best):
        self.checkpoints.append((step, path.name, best, (path / layout.COMMIT).is_file()))


def evals(run) -> list[tuple[int, float]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["eval_auc"]) for r in map(json.loads, lines) if "eval_auc" in r]


def test_the_kept_model_is_the_best_evaluation_not_the_newest(tmp_path, capsys):
    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, *FLAGS, 'eval.early_stop="none"', "checkpoint.keep=1")
    summary = Trainer(recipe, run, progress=False, callbacks=[Sabotage()]).fit()
    seen = evals(run)
    assert [s for s, _ in seen] == [5, 10, 15, 20, 25, 30, 35, 36]  # every 5 steps across the epochs, and the end
    best_step, best_auc = max(seen, key=lambda e: e[1])
    assert best_step < 36 and seen[-1][1] < best_auc - 0.01, "the sabotage should make the run end worse"
    assert (summary["best_step"], summary["eval_auc"]) == (best_step, best_auc)
    assert summary["last_eval_auc"] == seen[-1][1] and summary["steps"] == 36
    # kept beside the newest although keep_checkpoints = 1; best.json names it
    assert layout.committed_steps(run / "checkpoints") == [best_step, 36]
    assert json.loads((run / "checkpoints" / "best.json").read_text())["step"] == best_step
    assert summary["best_checkpoint"].endswith(f"step-{best_step:010d}")
    # the model on disk is the best one: evaluated again from the checkpoint, it scores the same
    again = Trainer(recipe, tmp_path / "reload", progress=False)
    again.load(summary["best_checkpoint"])
    assert again.evaluate()["eval_auc"] == pytest.approx(best_auc, abs=1e-6)
    # and `cardinal eval RUN` evaluates it by default, saying which
    capsys.readouterr()
    assert cli.main(["eval", str(run)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["step"] == best_step and printed["checkpoint"] == "best"
    assert printed["eval_auc"] == pytest.approx(best_auc, abs=1e-6)
    assert cli.main(["eval", str(run), "--checkpoint", str(run / "checkpoints" / "step-0000000036")]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["step"] == 36 and printed["eval_auc"] == pytest.approx(seen[-1][1], abs=1e-6)


def test_early_stopping_ends_within_patience_of_the_best(tmp_path):
    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, *FLAGS, 'eval.early_stop="auc"', "eval.patience=2")
    summary = Trainer(recipe, run, progress=False, callbacks=[Sabotage()]).fit()
    seen = evals(run)
    best_step = max(seen, key=lambda e: e[1])[0]
    assert summary["steps"] == best_step + 2 * 5 < 36  # two evaluations without improvement, then stop
    assert [s for s, _ in seen][-3:] == [best_step, best_step + 5, best_step + 10]
    assert summary["stopped_early"].startswith(f"early stop at step {best_step + 10}")
    assert json.loads((run / "summary.json").read_text())["stopped_early"] == summary["stopped_early"]
    assert summary["best_step"] == best_step


def test_min_delta_counts_small_gains_as_no_improvement(tmp_path):
    # AUC gains of 0.05 and 0.03 over steps 5-15 (see the module docstring): with min_delta 0.2 only
    # the first evaluation is ever the best, and the run stops at the third
    recipe = tiny_recipe(tmp_path, *FLAGS, 'eval.early_stop="auc"', "eval.patience=2", "eval.min_delta=0.2")
    summary = Trainer(recipe, tmp_path / "run", progress=False).fit()
    assert (summary["best_step"], summary["steps"]) == (5, 15)


def test_early_stopping_state_survives_a_resume(tmp_path):
    """Best and evaluations-since-best travel in the checkpoint: a run resumed between its best
    evaluation and its stop stops where the straight run stops, with the same model."""
    flags = [*FLAGS, 'eval.early_stop="auc"', "eval.patience=2"]  # saves: the best ones and the last
    straight = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "a", progress=False, callbacks=[Noise()])
    done = straight.fit()
    first = Trainer(tiny_recipe(tmp_path, *flags, "train.steps=20"), tmp_path / "b", progress=False,
                    callbacks=[Noise()])
    first.fit()
    resumed = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "b", progress=False, callbacks=[Noise()])
    summary = resumed.fit(resume=True)
    assert (summary["steps"], summary["best_step"]) == (done["steps"], done["best_step"])
    assert done["best_step"] <= 20 < done["steps"] < 36  # resumed between the best and the stop
    assert summary["eval_auc"] == done["eval_auc"] and summary["stopped_early"] == done["stopped_early"]
    assert straight.client.digest("emb") == resumed.client.digest("emb")
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # resumed once more, the stopped run stays stopped
    again = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "b", progress=False).fit(resume=True)
    assert again["steps"] == done["steps"] and "had stopped early" in again["stopped_early"]


def test_callbacks_see_every_step_evaluation_and_checkpoint(tmp_path):
    record = Record()
    recipe = tiny_recipe(tmp_path, *FLAGS, 'eval.early_stop="none"', "checkpoint.every=12")
    Trainer(recipe, tmp_path / "run", progress=False, callbacks=[record, Sabotage()]).fit()
    assert [s for s, _ in record.steps] == list(range(1, 37)) and all(loss > 0 for _, loss in record.steps)
    assert [(s, auc) for s, auc, _ in record.evals] == evals(tmp_path / "run")
    assert all(best <= s for s, _, best in record.evals)
    best_steps = [s for s, _, is_best, committed in record.checkpoints if is_best and committed]
    assert best_steps == [s for s, _, best in record.evals if best == s]  # each new best, checkpointed
    assert {s for s, *_ in record.checkpoints} >= {12, 24, 36}


def test_eval_command_on_other_data_and_only_data_eval_keys(tmp_path, capsys):
    from cardinal.data import SyntheticConfig, generate

    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, "ps.shards=3")
    summary = Trainer(recipe, run, progress=False).fit()
    other = tmp_path / "other"
    generate(other, SyntheticConfig(rows=10, eval_rows=700, vocab=300, seed=5))
    before = (run / "recipe.json").read_bytes()
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--set", f"data.eval={other / 'eval.tsv'}"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["eval_rows"] == 700 and printed["eval_auc"] != pytest.approx(summary["eval_auc"], abs=1e-6)
    direct = Trainer(tiny_recipe(tmp_path, "ps.shards=3", f'data.eval=["{other / "eval.tsv"}"]'), tmp_path / "d",
                     progress=False)
    direct.load(run / "checkpoints")
    assert printed["eval_auc"] == pytest.approx(direct.evaluate()["eval_auc"], abs=1e-6)
    assert cli.main(["eval", str(run), "--set", "model.hidden=[4]"]) == 2
    assert "changes only the eval data" in capsys.readouterr().err
    assert (run / "recipe.json").read_bytes() == before  # the run is left as it was


def test_evaluating_an_older_checkpoint_leaves_best_json_naming_the_best(tmp_path):
    """`cardinal eval RUN --checkpoint OLD` loads a checkpoint whose recorded best is older than the
    run's best: the marker must still name the run's best (it is repaired from the newest only)."""
    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, *FLAGS, "checkpoint.keep=50", "checkpoint.every=5",
                         "eval.early_stop='none'", "train.baseline='none'")
    Trainer(recipe, run, progress=False, callbacks=[Noise()]).fit()
    root = run / "checkpoints"
    before = json.loads((root / "best.json").read_text())
    older = [s for s in layout.committed_steps(root) if s < before["step"]]
    assert older, before
    Trainer(recipe, run, progress=False).load(layout.step_dir(root, older[0]))
    assert json.loads((root / "best.json").read_text()) == before


def test_a_signal_at_an_evaluation_step_is_evaluated_on_resume(tmp_path):
    """A signal read at an evaluation's step saves that step without evaluating it; the resumed run
    evaluates it first, so it judges every evaluation the straight run judges (the best among them)."""
    import os
    import signal

    from cardinal.train.interrupt import Interrupted, StopFlag

    class Kill(Callback):
        def on_step(self, trainer, step, loss):
            if step == 4:  # read at step 5's all-reduce: step 5, an evaluation's step, is saved and the run ends
                os.kill(os.getpid(), signal.SIGINT)

    flags = [*FLAGS, "eval.early_stop='none'", "train.baseline='none'", "checkpoint.every=5"]
    straight = Record()
    Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "a", progress=False, callbacks=[straight]).fit()
    stop = StopFlag()
    with stop.catching_signals(), pytest.raises(Interrupted) as stopped:
        Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "b", progress=False, callbacks=[Kill()], stop=stop).fit()
    assert stopped.value.step == 5
    resumed = Record()
    Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "b", progress=False, callbacks=[resumed]).fit(resume=True)
    assert [e[0] for e in resumed.evals] == [e[0] for e in straight.evals]
    assert resumed.evals == straight.evals


def test_resuming_an_early_stopped_run_is_an_error_not_a_no_op(tmp_path, capsys):
    """`cardinal train --resume RUN` of a run that stopped early, with the same patience, would train
    nothing and overwrite its summary with 0 samples/s: refused, RUN unchanged; a larger patience goes on."""
    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, *FLAGS, 'eval.early_stop="auc"', "eval.patience=2", "eval.min_delta=0.2")
    assert Trainer(recipe, run, progress=False).fit()["steps"] == 15  # stopped early (see above)
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run)]) == 2
    assert f"run {run} stopped early at step 15" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
    assert cli.main(["train", "--resume", str(run), "--set", "eval.patience=3"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 20


def test_eval_command_reads_parquet_eval_files_of_a_tsv_run(tmp_path, capsys):
    """`cardinal eval RUN --set data.eval=X.parquet` of a run trained on TSV reads X as Parquet
    (it was parsed as TSV: every line bad) and scores what the same rows as TSV score."""
    from cardinal.data import SyntheticConfig, convert, generate

    data = tmp_path / "tsv"
    generate(data, SyntheticConfig(rows=1500, eval_rows=600, vocab=100, seed=3))
    convert([data / "eval.tsv"], tmp_path / "eval.parquet")
    run = tmp_path / "run"
    recipe = tiny_recipe(tmp_path, 'data.format="criteo"', f"data.train={data / 'train.tsv'}",
                         f"data.eval={data / 'eval.tsv'}", "train.steps=3")
    Trainer(recipe, run, progress=False).fit()
    scores = []
    for other in (data / "eval.tsv", tmp_path / "eval.parquet"):
        capsys.readouterr()
        assert cli.main(["eval", str(run), "--set", f"data.eval={other}"]) == 0, capsys.readouterr().err
        scores.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert scores[1]["eval_rows"] == 600 and scores[1]["eval_auc"] == pytest.approx(scores[0]["eval_auc"], abs=1e-6)

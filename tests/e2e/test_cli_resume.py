"""``cardinal train --resume RUN`` checks before it writes (issue 10, item 3): an override that
changes a frozen key is refused naming it, a checkpoint that does not load leaves RUN as it was,
and a run already at its train.steps / train.epochs totals is an error, not a silent no-op."""

import json
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.checkpoint import layout

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

FROZEN_OVERRIDES = {  # an override -> the key the refusal names
    "embedding.dim=8": "embedding.dim",
    "model.hidden=[4]": "model.hidden",
    'model.name="dlrm"': "model.name",
    "embedding.shared=false": "embedding.shared",
    'embedding.pooling="mean"': "embedding.pooling",
    'compression.storage="int8"': "compression.storage",
    "compression.hash_buckets=1000": "compression.hash_buckets",
    'sparse_optimizer.name="sgd"': "sparse_optimizer.name",
    'dense_optimizer.name="sgd"': "dense_optimizer.name",
    'data.format="parquet"': "data.format",
    "data.batch_size=100": "data.batch_size",
    "data.holdout=0.2": "data.holdout",
    'data.holdout_by="hash"': "data.holdout_by",
    "train.seed=7": "train.seed",
    'train.baseline="none"': "train.baseline",
}


def train(tmp_path: Path, small_tsv: Path, *sets) -> Path:
    """A finished run of 1200 rows (6 steps of 200 per epoch); its directory."""
    runs = tmp_path / "runs"
    values = ['data.format="criteo"', f"data.train={small_tsv / 'train.tsv'}", f"data.eval={small_tsv / 'eval.tsv'}",
              "data.batch_size=200", "data.eval_batch_size=400", "model.hidden=[8]", "embedding.dim=4",
              'sparse_optimizer.name="adagrad"', f'train.run_dir="{runs}"', *sets]
    assert cli.main(["train", *sum((["--set", v] for v in values), [])]) == 0
    (run,) = runs.iterdir()
    return run


def files(run: Path) -> dict[str, bytes]:
    """Every file of a run directory, bytes included (recipe.json, summary.json, metrics.jsonl, checkpoints)."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def evaluated(run: Path, capsys) -> dict:
    """What ``cardinal eval RUN`` prints: the model read back through the public command."""
    capsys.readouterr()
    assert cli.main(["eval", str(run)]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def resume(run: Path, *sets) -> int:
    return cli.main(["train", "--resume", str(run), *sum((["--set", s] for s in sets), [])])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, small_tsv):
    """One run stopped by train.steps at step 2 (epoch 0)."""
    return train(tmp_path_factory.mktemp("finished"), small_tsv, "train.steps=2")


@pytest.mark.parametrize("override", FROZEN_OVERRIDES)
def test_an_override_of_a_frozen_key_is_refused_naming_it_and_changes_nothing(finished, override, capsys):
    before, scores = files(finished), evaluated(finished, capsys)
    assert resume(finished, override, "train.steps=4") == 2
    err = capsys.readouterr().err
    assert f"--resume cannot change {FROZEN_OVERRIDES[override]} (the run has" in err
    assert "A resume may change learning rates" in err
    assert files(finished) == before  # recipe.json, summary.json, metrics.jsonl, checkpoints: byte for byte
    assert evaluated(finished, capsys) == scores


@pytest.mark.parametrize("override", ["embedding.dim=4", 'model.name="deepfm"', "model.hidden=[8]"])
def test_an_override_that_repeats_the_runs_value_is_no_change(finished, override, capsys):
    assert cli.main(["recipe", "show", "--resume", str(finished), "--set", override, "--set", "train.steps=4"]) == 0


def test_a_checkpoint_that_does_not_load_leaves_the_run_as_it_was(tmp_path, small_tsv, capsys):
    """An allowed override (train.steps) and a damaged checkpoint: the load fails before
    recipe.json is rewritten with the new steps, so RUN and `cardinal eval RUN` stay as they were."""
    run = train(tmp_path, small_tsv, "train.steps=2", "checkpoint.keep=2", "checkpoint.every=1")
    newest = layout.latest(run / "checkpoints")
    shard = next(p for p in sorted(newest.rglob("*")) if p.is_file() and "shard" in str(p.relative_to(newest))
                 and p.name != "manifest.json")
    shard.write_bytes(b"\0" + shard.read_bytes()[1:])  # one byte: the checksum no longer matches
    before = files(run)
    assert resume(run, "train.steps=4", "dense_optimizer.lr=0.0005") == 2
    assert "not loaded, no shard changed: shard 0 refused it" in capsys.readouterr().err
    assert files(run) == before
    assert json.loads((run / "recipe.json").read_text())["train"]["steps"] == 2


def test_a_run_at_its_steps_total_is_an_error_not_a_no_op(finished, capsys):
    before, scores = files(finished), evaluated(finished, capsys)
    assert resume(finished) == 2
    err = capsys.readouterr().err
    assert f"run {finished} is at step 2 (epoch 0) already; raise train.steps / train.epochs to go on" in err
    assert files(finished) == before and evaluated(finished, capsys) == scores


def test_a_run_at_its_epochs_total_is_an_error_and_more_epochs_go_on(tmp_path, small_tsv, capsys):
    run = train(tmp_path, small_tsv)  # one whole epoch: 6 steps
    summary = (run / "summary.json").read_bytes()
    assert resume(run, "train.epochs=1") == 2
    assert f"run {run} is at step 6 (epoch 1) already" in capsys.readouterr().err
    assert (run / "summary.json").read_bytes() == summary
    assert resume(run, "train.epochs=2") == 0  # epochs count from the run's start: one more
    done = json.loads((run / "summary.json").read_text())
    assert done["steps"] == 12 and done["samples"] == 1200 and done["samples_per_s"] > 0
    assert json.loads((run / "recipe.json").read_text())["train"]["epochs"] == 2  # written once it loaded


def test_the_help_says_what_a_resume_may_change_and_that_steps_are_totals(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "train.steps and train.epochs are totals from the run's start" in out
    assert "model.*, embedding.dim" in out and "Learning rates, train.*" in out


def test_a_run_stopped_by_a_signal_at_its_last_step_is_finished_by_its_resume(tmp_path, small_tsv, capsys):
    """A signal read at the run's last step (train.steps) saves it unevaluated and unsummarised; the
    resume the interrupted run prints evaluates and summarises it (it trains nothing), then no more."""
    import os
    import signal

    from cardinal.recipe import load
    from cardinal.train import Callback, Trainer
    from cardinal.train.interrupt import Interrupted, StopFlag

    class Kill(Callback):
        def on_step(self, trainer, step, loss):
            if step == 2:  # read at step 3's all-reduce: the last step
                os.kill(os.getpid(), signal.SIGINT)

    recipe = load(None, ['data.format="criteo"', f"data.train={small_tsv / 'train.tsv'}",
                         f"data.eval={small_tsv / 'eval.tsv'}", "data.batch_size=200", "data.eval_batch_size=400",
                         "model.hidden=[8]", "embedding.dim=4", "train.steps=3"])
    run, stop = tmp_path / "run", StopFlag()
    with stop.catching_signals(), pytest.raises(Interrupted) as stopped:
        Trainer(recipe, run, progress=False, callbacks=[Kill()], stop=stop).fit()
    assert stopped.value.step == 3 and not (run / "summary.json").exists()
    assert resume(run) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["eval_auc"] > 0
    assert layout.committed_steps(run / "checkpoints") == [3]
    assert resume(run) == 2  # now it is done
    assert f"run {run} is at step 3 (epoch 0) already" in capsys.readouterr().err


def test_a_resume_may_change_the_wire_codecs_and_the_refusal_says_so(tmp_path):
    """Codecs are how rows cross, not what a checkpoint holds: a run trained with fp32 may go on
    with bf16 or int8 (its tables and optimizer state stay float32 on the servers)."""
    from cardinal.recipe import load
    from cardinal.train.resume import resumed_recipe

    (tmp_path / "recipe.json").write_text(json.dumps(load(None, []).to_dict()))
    resumed = resumed_recipe(tmp_path, ['wire.pull="bf16"', 'wire.push="int8"'])
    assert (resumed.wire.pull, resumed.wire.push) == ("bf16", "int8")
    with pytest.raises(ValueError, match=r"A resume may change .*wire\.\* \(codecs\)"):
        resumed_recipe(tmp_path, ["embedding.dim=7"])

"""Runs that learn nothing fail loudly: a non-zero exit, a one-line reason, no checkpoint past the
last finite step (the recipe values are the ones of the issue that found each case)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.data import SyntheticConfig, generate
from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("tsv")
    generate(out, SyntheticConfig(rows=1200, eval_rows=400, vocab=30, seed=1))
    (out / "empty.tsv").write_bytes(b"")
    (out / "garbage.tsv").write_bytes(bytes(range(256)) * 40 + b"\n\x00\x01\n" * 30)
    return out


def train(tmp_path, data, *sets, train_file="train.tsv", eval_file="eval.tsv"):
    """``cardinal train`` on Criteo TSV files (data.train as a plain string); (exit code, run dir)."""
    runs = tmp_path / "runs"
    values = ['data.format="criteo"', f"data.train={data / train_file}", f"data.eval={data / eval_file}",
              "data.batch_size=200", "data.eval_batch_size=400", "model.hidden=[8]", "embedding.dim=4",
              f'train.run_dir="{runs}"', *sets]
    code = cli.main(["train", *sum((["--set", v] for v in values), [])])
    run_dirs = list(runs.iterdir()) if runs.exists() else []
    return code, (run_dirs[0] if run_dirs else None)


def committed(run_dir) -> list[int]:
    return layout.committed_steps(run_dir / "checkpoints") if run_dir else []


def test_a_good_run_exits_0(tmp_path, data):
    code, run = train(tmp_path, data)
    assert code == 0 and committed(run) == [6]


def test_zero_training_steps_is_an_error_naming_the_data(tmp_path, data, capsys):
    code, run = train(tmp_path, data, train_file="empty.tsv")
    assert code == 2 and committed(run) == []
    err = capsys.readouterr().err
    assert "no training step" in err and "empty.tsv" in err


def test_a_file_of_garbage_stops_the_run_naming_its_first_bad_lines(tmp_path, data, capsys):
    code, run = train(tmp_path, data, train_file="garbage.tsv")
    assert code == 2 and committed(run) == []
    err = capsys.readouterr().err
    assert "100 of 100 input rows read are bad" in err and "data.max_bad_fraction = 0.01" in err
    assert "garbage.tsv:1: bad label" in err


def test_a_non_finite_loss_stops_the_run_without_a_checkpoint(tmp_path, data, capsys):
    code, run = train(tmp_path, data, "dense_optimizer.lr=1e12", "checkpoint.every=2")
    assert code == 2 and committed(run) == []
    err = capsys.readouterr().err
    assert "the loss at step 2 is inf" in err and "Lower dense_optimizer.lr" in err


def test_rows_gone_huge_are_never_checkpointed(tmp_path, data, capsys):
    # step 1's loss is finite, but its update leaves rows near 1e30: its checkpoint must not commit
    code, run = train(tmp_path, data, "sparse_optimizer.lr=1e30", "checkpoint.every=1")
    assert code == 2 and committed(run) == []
    assert "step 1 left the model non-finite" in capsys.readouterr().err


def test_an_empty_eval_split_is_an_error(tmp_path, data, capsys):
    code, run = train(tmp_path, data, eval_file="empty.tsv")
    assert code == 2
    assert "the eval split is empty: no good rows in" in capsys.readouterr().err


def test_non_finite_eval_metrics_are_an_error(tmp_path):
    trainer = Trainer(tiny_recipe(tmp_path, "train.steps=2"), tmp_path / "run", progress=False)
    trainer.fit()
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(math.inf)
    with pytest.raises(ValueError, match="eval_auc is nan|eval_logloss is (nan|inf)"):
        trainer.evaluate()


@pytest.mark.slow
def test_the_process_exit_code_says_the_run_failed(tmp_path, data):
    """The real command, as a user runs it: exit status 2 and the reason on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    sets = ['data.format="criteo"', f"data.train={data / 'train.tsv'}", f"data.eval={data / 'eval.tsv'}",
            "data.batch_size=200", "model.hidden=[8]", "embedding.dim=4", f'train.run_dir="{tmp_path}"',
            "dense_optimizer.lr=1e12"]
    done = subprocess.run([sys.executable, "-m", "cardinal.cli", "train", *sum((["--set", s] for s in sets), [])],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cardinal train: error: the loss at step" in done.stderr


def test_convert_of_nothing_but_bad_lines_fails(tmp_path, data, capsys):
    assert cli.main(["convert", str(data / "garbage.tsv"), "--out", str(tmp_path / "x.parquet")]) == 2
    assert "no good rows" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()


def test_bad_lines_count_when_train_steps_ends_the_run_early(tmp_path, data, capsys):
    good = (data / "train.tsv").read_bytes().splitlines(keepends=True)[:450]
    (tmp_path / "half_bad.tsv").write_bytes(b"".join(good) + b"\x00\x01 not a line\n" * 500)
    code, run = train(tmp_path, tmp_path, "train.steps=2", train_file="half_bad.tsv",
                      eval_file=str(data / "eval.tsv"))
    assert code == 2 and committed(run) == []
    assert "500 of 950 input rows read are bad" in capsys.readouterr().err


def test_a_resume_takes_the_recipes_dense_learning_rate(tmp_path, data):
    from cardinal.checkpoint.reader import Reader

    code, run = train(tmp_path, data, "train.steps=2", "dense_optimizer.lr=0.05")
    assert code == 0
    assert cli.main(["train", "--resume", str(run), "--set", "dense_optimizer.lr=0.0001",
                     "--set", "train.steps=3"]) == 0
    step = layout.latest(run / "checkpoints")
    dense = Reader(step).dense_state()
    assert [g["lr"] for g in dense["optimizer"]["param_groups"]] == [0.0001]


def test_a_resume_with_another_dense_optimizer_is_refused_before_loading(tmp_path, data, capsys):
    code, run = train(tmp_path, data, "train.steps=2")
    assert code == 0
    code = cli.main(["train", "--resume", str(run), "--set", 'dense_optimizer.name="sgd"', "--set", "train.steps=3"])
    assert code == 2 and committed(run) == [2]
    assert "--resume cannot change dense_optimizer.name (the run has 'adam', the override 'sgd')" \
        in capsys.readouterr().err


def test_a_global_batch_of_only_bad_lines_is_skipped_not_trained_on(tmp_path, data):
    """Batches are batch_size lines; one whose every line is bad takes no step (a mean over no
    examples would be NaN), and the run goes on with the next batch."""
    lines = (data / "train.tsv").read_bytes().splitlines(keepends=True)
    (tmp_path / "holey.tsv").write_bytes(b"".join(lines[:200] + [b"bad\n"] * 200 + lines[200:]))
    code, run = train(tmp_path, tmp_path, "data.max_bad_fraction=0.5", train_file="holey.tsv",
                      eval_file=str(data / "eval.tsv"))
    assert code == 0 and committed(run) == [6]  # 7 batches of 200 lines, one of them all bad


def test_several_workers_judge_the_share_of_bad_lines_over_all_their_lines():
    """Each worker counts only its own share's lines; the run stops, or goes on, on the total,
    as one process would, and on every worker alike."""
    from types import SimpleNamespace

    from cardinal.data.bad_rows import BadRows

    class TwoWorkers:  # the other worker read 1200 lines, none bad
        world = 2

        def sum(self, *values):
            return [values[0], values[1] + 1200]

    bad = BadRows(max_fraction=0.01, min_rows=math.inf)  # as the trainer sets it for several workers
    bad.add([f"a.tsv:{i}: bad label" for i in range(15)], 1200)  # 1.25% of this worker's lines
    trainer = SimpleNamespace(train_data=SimpleNamespace(bad=bad), workers=TwoWorkers())
    Trainer._check_bad_rows(trainer)  # 15 of 2400: 0.6%, under 1%
    assert (bad.bad, bad.rows) == (15, 2400)
    bad.reset()
    bad.add([f"a.tsv:{i}: bad label" for i in range(30)], 1200)
    with pytest.raises(ValueError, match="30 of 2400 input rows read are bad"):
        Trainer._check_bad_rows(trainer)


def test_a_last_batch_of_one_line_trains(tmp_path, data):
    """1,201 lines at batch 200: the last global batch holds one example (batch norm has no statistics)."""
    lines = (data / "train.tsv").read_bytes().splitlines(keepends=True)
    assert len(lines) == 1200
    (tmp_path / "odd.tsv").write_bytes(b"".join(lines + lines[:1]))
    code, run = train(tmp_path, tmp_path, train_file="odd.tsv", eval_file=str(data / "eval.tsv"))
    assert code == 0
    assert json.loads((run / "summary.json").read_text())["samples"] == 1201

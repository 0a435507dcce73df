"""Output a person can read: warnings never on the bar's line, plain lines off a terminal, a total
(and an ETA) for TSV and Parquet runs, TensorBoard on request, curves with eval logloss."""

import json
import re
import sys
import types

import pytest

from cardinal import cli, progress
from cardinal.data import convert, sizes
from cardinal.train import Trainer, report
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def train(tmp_path, train_file, eval_file, *sets, fmt="criteo") -> int:
    values = [f'data.format="{fmt}"', f"data.train={train_file}", f"data.eval={eval_file}", "data.batch_size=200",
              "data.eval_batch_size=400", "model.hidden=[8]", "embedding.dim=4", "metrics.log_every=2",
              f'train.run_dir="{tmp_path / "runs"}"', *sets]
    return cli.main(["train", *sum((["--set", v] for v in values), [])])


def one_bad_line(tmp_path, small_tsv):
    """train.tsv with its line 701 (in the fourth batch of 200) replaced by one that is not Criteo."""
    lines = (small_tsv / "train.tsv").read_bytes().splitlines(keepends=True)
    (tmp_path / "one_bad.tsv").write_bytes(b"".join(lines[:700]) + b"not\ta\tcriteo\tline\n" + b"".join(lines[701:]))
    return tmp_path / "one_bad.tsv"


def segments(text: str) -> list[str]:
    """What a terminal shows line by line: a carriage return starts the line again."""
    return [s for s in re.split(r"[\r\n]", text) if s.strip()]


def test_a_warning_during_training_gets_its_own_line_and_the_bar_goes_on(tmp_path, small_tsv, capsys, monkeypatch):
    monkeypatch.setattr(progress, "is_terminal", lambda stream=None: True)  # draw the bar into the captured stderr
    assert train(tmp_path, one_bad_line(tmp_path, small_tsv), small_tsv / "eval.tsv") == 0
    err = capsys.readouterr().err
    shown = segments(err)
    warnings = [s for s in shown if "skipped 1 bad rows" in s]
    assert warnings and all(s.startswith("WARNING cardinal.data.bad_rows: skipped") for s in warnings), err
    bars = [s for s in shown if "%|" in s]
    assert bars and all(s.startswith("training:") for s in bars), err  # nothing printed onto a bar
    assert "training: 100%" in err  # the bar was drawn, and finished, around the warning


def test_a_strict_mode_error_gets_its_own_line(tmp_path, small_tsv, capsys, monkeypatch):
    monkeypatch.setattr(progress, "is_terminal", lambda stream=None: True)
    assert train(tmp_path, one_bad_line(tmp_path, small_tsv), small_tsv / "eval.tsv", "data.strict=true") == 2
    err = capsys.readouterr().err
    errors = [s for s in segments(err) if "error:" in s]
    assert errors and errors[-1].startswith("cardinal train: error: bad input row (data.strict)"), err
    assert segments(err)[-1] == errors[-1], err  # no bar redrawn below it


def test_off_a_terminal_one_plain_line_per_log_interval_with_total_and_eta(tmp_path, small_tsv, capsys):
    assert train(tmp_path, small_tsv / "train.tsv", small_tsv / "eval.tsv") == 0  # capsys: stderr is not a terminal
    err = capsys.readouterr().err
    assert "\r" not in err and "|" not in err, err  # no bar
    logged = [s for s in err.splitlines() if s.startswith("training:")]
    assert [re.match(r"training: step (\d+/\d+)", s).group(1) for s in logged] == ["2/6", "4/6", "6/6"], err
    assert all(" loss 0." in s and "samples/s" in s for s in logged), err
    assert all("ETA" in s for s in logged[1:]), err  # from the second line: it leaves out the start-up


def test_parquet_runs_get_their_total_from_the_row_counts(tmp_path, small_tsv, capsys):
    convert([small_tsv / "train.tsv"], tmp_path / "train.parquet")
    assert sizes.parquet_rows([tmp_path / "train.parquet"]) == 1200
    assert train(tmp_path, tmp_path / "train.parquet", tmp_path / "train.parquet", "train.epochs=2",
                 fmt="parquet") == 0
    logged = [s for s in capsys.readouterr().err.splitlines() if s.startswith("training:")]
    assert logged[0].startswith("training: step 2/12 "), logged  # 6 batches per epoch, 2 epochs


def test_tsv_row_estimate_from_the_size_and_the_first_lines(small_tsv):
    exact = len((small_tsv / "train.tsv").read_bytes().splitlines())
    assert sizes.tsv_rows([small_tsv / "train.tsv"]) == exact  # the file fits in the sample: counted
    for sample in (4096, 20000):  # a sample of the first lines, scaled by the size
        estimate = sizes.tsv_rows([small_tsv / "train.tsv", small_tsv / "eval.tsv"], sample_bytes=sample)
        assert abs(estimate - (exact + 400)) <= 0.05 * (exact + 400), (sample, estimate)
    assert sizes.train_batches("parquet", [small_tsv / "train.tsv"], 200) is None  # not Parquet: no total, no error


def test_tensorboard_without_the_package_is_an_error_naming_pip_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as when tensorboard is not installed
    with pytest.raises(ValueError, match=r"pip install tensorboard"):
        Trainer(tiny_recipe(tmp_path, "metrics.tensorboard=true"), tmp_path / "run", progress=False)


class FakeWriter:
    scalars: list = []

    def __init__(self, log_dir):
        self.log_dir = log_dir

    def add_scalar(self, tag, value, step):
        FakeWriter.scalars.append((tag, step, value))

    def flush(self):
        pass


def test_tensorboard_gets_loss_rate_auc_and_logloss(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=FakeWriter))
    FakeWriter.scalars = []
    run = tmp_path / "run"
    Trainer(tiny_recipe(tmp_path, "metrics.tensorboard=true", "train.steps=4", "eval.every=2"), run,
            progress=False).fit()
    by_tag = {}
    for tag, step, value in FakeWriter.scalars:
        by_tag.setdefault(tag, []).append((step, value))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for tag, key in [("train/loss", "loss"), ("train/samples_per_s", "samples_per_s"), ("eval/auc", "eval_auc"),
                     ("eval/logloss", "eval_logloss")]:
        assert by_tag.get(tag) == [(r["step"], r[key]) for r in records if key in r], tag
    assert [s for s, _ in by_tag["eval/auc"]] == [2, 4]


def test_curves_show_eval_logloss_beside_auc(tmp_path):
    records = [{"step": 1, "loss": 0.7}, {"step": 2, "loss": 0.6}, {"step": 2, "eval_auc": 0.7, "eval_logloss": 0.55},
               {"step": 4, "eval_auc": 0.72, "eval_logloss": 0.53}]
    curves = report.panels(records)
    assert curves["evaluation logloss"] == ([2, 4], [0.55, 0.53])
    assert curves["evaluation AUC"] == ([2, 4], [0.7, 0.72])
    titles = report.plot_curves(records, tmp_path / "curves.png", "t", best_auc=0.9)
    assert "evaluation logloss" in titles and (tmp_path / "curves.png").stat().st_size > 0

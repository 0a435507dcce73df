"""Training with reduced-precision rows and gradients on the wire (recipe section [wire])."""

import json

import pytest

from cardinal.train import Trainer
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`

# the tiny recipe that learns (tests/e2e/test_train.py): eval AUC about 0.66 on 1,000 rows, whose
# noise between seeds is +- 0.04; the same seed with bf16 or int8 both ways moved it by under 1e-4 (measured)
LEARNS = ["ps.shards=2", 'train.baseline="none"', "data.synthetic.vocab=30", "train.epochs=3",
          "dense_optimizer.lr=0.01"]


def run(tmp_path, name, *extra):
    path = tmp_path / name
    summary = Trainer(tiny_recipe(tmp_path, *LEARNS, *extra), path, progress=False).fit()
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return summary, [r for r in records if "loss" in r]


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    return run(tmp_path_factory.mktemp("fp32"), "fp32")


@pytest.mark.parametrize("codec, margin", [("bf16", 0.002), ("int8", 0.005)])
def test_reduced_precision_both_ways_keeps_auc(tmp_path, fp32, codec, margin):
    (base, base_lines), (summary, lines) = fp32, run(tmp_path, codec, f'wire.pull="{codec}"', f'wire.push="{codec}"')
    assert base["eval_auc"] > 0.6 and abs(summary["eval_auc"] - base["eval_auc"]) <= margin
    assert summary["eval_auc"] != base["eval_auc"] or summary["last_eval_logloss"] != base["last_eval_logloss"]
    # bytes per sample each way, in every log line and the summary, at the codec's size
    row = {"bf16": lambda dim: 2 * dim, "int8": lambda dim: dim + 4}[codec]
    for key in ("pull_bytes_per_sample", "push_bytes_per_sample"):  # one table: rows of dim 4 + 1 (DeepFM's wide)
        assert base[key] > 0 and summary[key] == pytest.approx(base[key] * row(5) / 20, rel=0.02)
        assert all(r[key] > 0 for r in lines) and key in base_lines[-1]
    assert "wire_bytes_in_per_sample" not in summary  # in-process: no messages

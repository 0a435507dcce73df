"""benchmarks/criteo_layout.py's file has what raw Criteo logs have (empty fields, negative
integers, malformed lines of each kind), and the reader reads through them: every broken line is
skipped and counted, every other line reaches a batch, and a run trains on them."""

import sys
from pathlib import Path

import pytest

from cardinal.data.criteo import CriteoReader
from cardinal.recipe import load
from cardinal.train import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import criteo_layout  # noqa: E402

ROWS = 4000


def _made(tmp_path: Path) -> tuple[Path, dict]:
    made = criteo_layout.make(tmp_path / "data", rows=ROWS, eval_rows=1000, first_order=0.5, latent=0.3,
                              missing=0.1, bad=0.02)
    return tmp_path / "data", {k: made["broken"][k] for k in criteo_layout.BREAKS} | {
        "negative": made["broken"]["negative"], "empty": made["broken"]["empty"]}


def test_the_file_has_the_defects_and_the_reader_skips_exactly_the_broken_lines(tmp_path):
    folder, seen = _made(tmp_path)
    broken = sum(seen[k] for k in criteo_layout.BREAKS)
    assert all(seen[k] > 0 for k in seen), seen
    lines = (folder / "train.tsv").read_bytes().splitlines()
    assert len(lines) == ROWS
    assert sum(line.split(b"\t")[0] not in (b"0", b"1") for line in lines) >= seen["bad label"]
    reader = CriteoReader([folder / "train.tsv"], 512, max_bad_fraction=0.05)
    assert sum(len(b) for b in reader) == ROWS - broken
    assert reader.bad_lines == broken


@pytest.mark.slow
def test_a_run_trains_through_them(tmp_path):
    folder, seen = _made(tmp_path)
    recipe = load("criteo_synthetic", ['data.format="criteo"', f'data.train=["{folder / "train.tsv"}"]',
                                       f'data.eval=["{folder / "eval.tsv"}"]', "data.batch_size=512",
                                       "model.hidden=[16]", "embedding.dim=4", "ps.shards=1", "eval.every=0",
                                       "data.max_bad_fraction=0.05"])
    s = Trainer(recipe, tmp_path / "run", progress=False).fit()
    assert s["bad_lines"] == sum(seen[k] for k in criteo_layout.BREAKS)
    assert s["eval_auc"] > 0.53  # 8 steps: 0.552; the signal comes through (teacher: about 0.91)

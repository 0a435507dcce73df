"""The worker cache in whole runs: with s = 0 in sync mode the model is bitwise the one trained
without it (one process here; two workers on two servers in test_global_batch.py, beside the plain
launch it compares with), and a cached run reports its numbers."""

import json

import pytest

from cardinal.recipe import load
from cardinal.train import Trainer
from helpers.launch import CACHE, equal_models, model_of
from helpers.recipes import tiny_recipe

pytestmark = pytest.mark.slow  # processes or whole runs: outside `pytest -m "not slow"`


def test_staleness_zero_trains_bitwise_the_model_of_no_cache_in_one_process(tmp_path):
    runs = []
    for name, extra in (("plain", []), ("cached", CACHE)):
        recipe = tiny_recipe(tmp_path, 'consistency.mode="sync"', f'train.run_dir="{tmp_path / name}"',
                             "train.steps=8", *extra)
        summary = Trainer(recipe, tmp_path / name, progress=False).fit()
        runs.append(model_of(tmp_path, tmp_path / name))
        if extra:
            assert summary["cache_staleness_p99"] == 0 and "cache_emb_hit_rate_unique" in summary
            lines = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
            assert any("cache_emb_hit_rate_accesses" in x for x in lines)
    equal_models(*runs)



def test_the_cache_section_reads_sizes_and_refuses_geo():
    assert load(None, ['cache.bytes="64MiB"']).cache.capacity == 64 << 20
    assert load(None, ['cache.bytes="1.5GB"']).cache.capacity == 1_500_000_000
    assert load(None, ["cache.bytes=4096"]).cache.capacity == 4096
    with pytest.raises(ValueError, match="cache.bytes must be an int or a size"):
        load(None, ['cache.bytes="lots"'])
    with pytest.raises(ValueError, match="GEO replica"):
        load(None, ['cache.bytes="1MiB"', 'consistency.mode="geo"'])
    with pytest.raises(ValueError, match="cache.policy"):
        load(None, ['cache.policy="fifo"'])
    assert load(None, ["cache.staleness=4", "cache.hold=2"]).cache.hold == 2
    with pytest.raises(ValueError, match=r"cache.hold must be in \[0, cache.staleness = 1\], got 2"):
        load(None, ["cache.staleness=1", "cache.hold=2"])
    with pytest.raises(ValueError, match="cache.hold = 3 is past 2: .* cost 0.0022 AUC"):
        load(None, ["cache.staleness=4", "cache.hold=3"])

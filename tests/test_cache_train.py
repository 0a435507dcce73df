"""The worker cache in whole runs: with s = 0 in sync mode the model is bitwise the one trained
without it (one process; two workers on two servers), and a cached run reports its numbers."""

import json

import numpy as np
import pytest

from cardinal.recipe import load
from cardinal.train import Trainer
from conftest import tiny_recipe
from test_distributed import leftovers
from test_global_batch import STEPS, launched, model_of

CACHE = ["cache.bytes=\"1MiB\"", "cache.staleness=0"]


def equal(a: tuple, b: tuple) -> None:
    """Two runs' dense weights and every row, bitwise."""
    assert a[1].keys() == b[1].keys() and a[2].keys() == b[2].keys()
    for k in a[1]:
        assert bool((a[1][k] == b[1][k]).all()), k
    for k in a[2]:
        np.testing.assert_array_equal(a[2][k], b[2][k])


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
    equal(*runs)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_staleness_zero_trains_bitwise_the_model_of_no_cache_with_two_workers(tmp_path):
    sets = ['consistency.mode="sync"', *STEPS]
    plain = launched(tmp_path, 2, 2, *sets)
    cached = launched(tmp_path, 2, 2, *sets, *CACHE)
    assert "cache_emb_hit_rate_unique" in cached[0]
    equal(plain, cached)
    assert leftovers(tmp_path) == []


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


@pytest.mark.slow
@pytest.mark.parametrize("consistency", ["async", "sync"])
def test_a_resumed_run_with_a_cache_is_bitwise_the_straight_one(tmp_path, consistency):
    """A checkpoint flushes the cache and drops it, so the run after it starts as the resumed one does."""
    from test_train import recipe, same, state

    flags = [f'consistency.mode="{consistency}"', "train.epochs=3", "checkpoint.every=7",
             'cache.bytes="1MiB"', "cache.staleness=2"]
    straight = Trainer(recipe(tmp_path, *flags, "train.steps=17"), tmp_path / "a", progress=False)
    summary = straight.fit()
    assert summary["cache_emb_hit_rate_unique"] > 0
    Trainer(recipe(tmp_path, *flags, "train.steps=7"), tmp_path / "b", progress=False).fit()
    resumed = Trainer(recipe(tmp_path, *flags, "train.steps=17"), tmp_path / "b", progress=False)
    resumed.fit(resume=True)
    same(state(straight), state(resumed))

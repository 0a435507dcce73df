"""Whole runs with most rows on disk: bitwise the run in RAM. (A run under a memory budget that
evicts, and one with a disk tier, resume bitwise: test_resume_bitwise.py.)"""

import pytest
from helpers.recipes import tiny_recipe
from helpers.runs import same, state

from cardinal.train import Trainer


@pytest.mark.slow
def test_a_run_with_most_rows_on_disk_is_bitwise_the_run_in_ram(tmp_path):
    flags = ["ps.shards=3", 'consistency.mode="sync"', "train.epochs=2"]
    ram = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "ram", progress=False)
    ram.fit()
    tiered = Trainer(tiny_recipe(tmp_path, *flags, 'ps.memory.budget="560KiB"', 'ps.memory.disk_budget="1GiB"', "ps.memory.eviction.protect_steps=0",
                                 f'ps.memory.disk_dir="{tmp_path / "tiers"}"'), tmp_path / "tiered", progress=False)
    summary = tiered.fit()
    assert summary["ps_disk_rows"] > summary["ps_rows"] / 3  # many rows ended on disk (even rows in flight)...
    assert summary["ps_disk_write_amp"] >= 0  # RocksDB's bytes written over the bytes put in it, counted
    assert summary["ps_emb_faulted"] > 0                       # ...and came back when used
    assert 0 < summary["ps_emb_ram_hit_rate"] < 1
    assert same(state(ram), state(tiered))

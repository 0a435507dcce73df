"""Whole runs with admission, a memory budget and a time to live: they evict, report it, and a
resumed run is bitwise the run that went straight through (evictions and counters included)."""

import json

import pytest
from conftest import tiny_recipe
from test_train import same, state

from cardinal.train import Trainer

# 3 shards of about 330 KB of fixed index and filter state each, plus up to 50 KB of rows: a budget
# of 1100 KiB (367 KiB a shard) evicts rows every step and leaves room for the rows of the last two
# steps, which are protected (at 1000 KiB they fill it, and new rows are refused: test_budget_floods.py).
MEMORY = ["ps.shards=3", 'consistency.mode="sync"', 'ps.memory.admission.policy="count"',
          "ps.memory.admission.threshold=2", 'ps.memory.budget="1100KiB"', "ps.memory.eviction.ttl_steps=1",
          "ps.memory.eviction.every=3", "train.epochs=3"]


@pytest.mark.slow
def test_a_run_under_a_budget_evicts_reports_and_resumes_bitwise(tmp_path):
    flags = [*MEMORY, "checkpoint.every=7"]
    straight = Trainer(tiny_recipe(tmp_path, *flags, "train.steps=20"), tmp_path / "a", progress=False)
    summary = straight.fit()
    assert summary["ps_emb_evicted_budget"] > 0 and summary["ps_emb_refused"] > 0
    assert summary["ps_emb_evicted_ttl_steps"] > 0
    logged = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert any("ps_emb_evicted_budget" in r for r in logged)
    Trainer(tiny_recipe(tmp_path, *flags, "train.steps=7"), tmp_path / "b", progress=False).fit()
    resumed = Trainer(tiny_recipe(tmp_path, *flags, "train.steps=20"), tmp_path / "b", progress=False)
    assert resumed.fit(resume=True)["ps_emb_evicted_budget"] > 0
    same(state(straight), state(resumed))


@pytest.mark.slow
def test_a_run_with_most_rows_on_disk_is_bitwise_the_run_in_ram(tmp_path):
    flags = ["ps.shards=3", 'consistency.mode="sync"', "train.epochs=2"]
    ram = Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "ram", progress=False)
    ram.fit()
    tiered = Trainer(tiny_recipe(tmp_path, *flags, 'ps.memory.budget="560KiB"', 'ps.memory.disk_budget="1GiB"',
                                 "ps.memory.eviction.protect_steps=0", f'ps.memory.disk_dir="{tmp_path / "tiers"}"'),
                     tmp_path / "tiered", progress=False)
    summary = tiered.fit()
    assert summary["ps_disk_rows"] > summary["ps_rows"] / 3  # many rows ended on disk (even rows in flight)...
    assert summary["ps_disk_write_amp"] >= 0  # RocksDB's bytes written over the bytes put in it, counted
    assert summary["ps_emb_faulted"] > 0                       # ...and came back when used
    assert 0 < summary["ps_emb_ram_hit_rate"] < 1
    same(state(ram), state(tiered))

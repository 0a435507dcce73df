"""Run as a process by test_checkpoint: save step 1, print its digest, then save step 2.

The test sets CARDINAL_FAILPOINTS for the second step only (SECOND_SAVE_FAILPOINTS: its
training and its save), so the process dies at a chosen point of it, as a crash would. With
a third argument "tiers", most rows live in a disk tier (under ROOT/tiers) and step 2 is
saved as a delta on step 1.
"""

import json
import os
import sys

import numpy as np

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, StoreLimits, connect
from cardinal.recipe.eviction import EvictionConfig

root, n_shards, tiers = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["tiers"]
limits = StoreLimits(memory_budget=180_000, disk_budget=1 << 30) if tiers else None  # 164 KB: the indexes
config = StoreConfig((TableConfig("user", 4), TableConfig("item", 3)), {"name": "adagrad"},
                     eviction=EvictionConfig(protect_steps=0))
client = connect(config, n_shards, limits=limits, tier_dir=f"{root}/tiers")
rng = np.random.default_rng(0)
for step in (1, 2):
    if step == 2:
        os.environ["CARDINAL_FAILPOINTS"] = os.environ.get("SECOND_SAVE_FAILPOINTS", "")
    for table, dim in (("user", 4), ("item", 3)):
        ids = rng.integers(0, 5000, 400).astype(np.int64)
        client.pull(table, ids, step=step).wait()
        client.push(table, ids, rng.standard_normal((400, dim)).astype(np.float32), step=step).wait()
    print(json.dumps({"step": step, "user": client.digest("user"), "item": client.digest("item")}), flush=True)
    client.save(root, step, base=1 if tiers and step == 2 else None)
print("saved", flush=True)

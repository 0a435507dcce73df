"""Run as a process by test_checkpoint: save step 1, print its digest, then save step 2.

The test sets CARDINAL_FAILPOINTS for the second save only (SECOND_SAVE_FAILPOINTS), so the
process dies at a chosen step of it, as a crash would.
"""

import json
import os
import sys

import numpy as np

from cardinal.embedding import TableConfig
from cardinal.ps import StoreConfig, embedded

root, n_shards = sys.argv[1], int(sys.argv[2])
client = embedded(StoreConfig((TableConfig("user", 4), TableConfig("item", 3)), {"name": "adagrad"}), n_shards)
rng = np.random.default_rng(0)
for step in (1, 2):
    for table, dim in (("user", 4), ("item", 3)):
        ids = rng.integers(0, 5000, 400).astype(np.int64)
        client.pull(table, ids, step=step).wait()
        client.push(table, ids, rng.standard_normal((400, dim)).astype(np.float32), step=step).wait()
    if step == 2:
        os.environ["CARDINAL_FAILPOINTS"] = os.environ.get("SECOND_SAVE_FAILPOINTS", "")
    print(json.dumps({"step": step, "user": client.digest("user"), "item": client.digest("item")}), flush=True)
    client.save(root, step)
print("saved", flush=True)

"""The ids a table deleted since its last checkpoint (``embedding/deletion_log.py``): kept once each,
counted with the table's bytes, and bounded under a budget; past the bound the next checkpoint is a
full one (a server at a 256 MiB budget held 90 MB of such ids at its save before)."""

import numpy as np
import pytest
from test_delta_checkpoints import TABLES, everything, save, step

from cardinal.embedding.deletion_log import COMPACT_AT, DeletionLog
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.process_memory import deletion_log_bytes


def test_the_log_keeps_each_id_once_and_lets_go_past_its_cap():
    log = DeletionLog()
    for _ in range(8):  # the same ids deleted again and again (created and evicted between saves)
        log.add(np.arange(COMPACT_AT, dtype=np.int64))
    assert log.nbytes <= 8 * 2 * COMPACT_AT + 8 * COMPACT_AT
    assert np.array_equal(log.take(), np.arange(COMPACT_AT)) and log.nbytes == 0
    capped = DeletionLog(cap=8 * 1000)
    capped.add(np.arange(999, dtype=np.int64))
    assert not capped.overflowed and capped.nbytes == 8 * 999
    capped.add(np.arange(2000, 2002, dtype=np.int64))
    assert capped.overflowed and capped.nbytes == 0 and capped.take() is None
    assert not capped.overflowed and len(capped.take()) == 0  # a full checkpoint: the log starts again


def test_a_table_counts_its_log_among_its_bytes():
    s = ShardStore(StoreConfig(TABLES, {"name": "adagrad", "lr": 0.05}), 0, 1)
    step(s, 1, np.arange(5000, dtype=np.int64))
    t = s.tables["user"]
    before = t.nbytes
    t.delete(np.arange(100, dtype=np.int64))
    assert t.deleted.nbytes == 800 and t.nbytes - t.row_bytes - t.index.nbytes == 800
    assert before > t.nbytes - 800  # rows went, the log came


def test_a_shard_whose_log_let_go_saves_a_full_checkpoint_not_a_delta(tmp_path):
    budget = 1 << 20
    s = ShardStore(StoreConfig(TABLES, {"name": "adagrad", "lr": 0.05}), 0, 1, limits=StoreLimits(memory_budget=budget))
    assert s.tables["user"].deleted.cap == deletion_log_bytes(budget, 2) == budget // 64
    step(s, 1, np.arange(100, dtype=np.int64))
    save(s, tmp_path, 1)
    assert s.health()["delta_safe"]
    s.tables["user"].delete(np.arange(50, dtype=np.int64))  # logged: a delta may follow
    step(s, 2, np.arange(10**6, 10**6 + 20, dtype=np.int64))
    assert s.health()["delta_safe"]
    s.tables["user"].deleted.add(np.arange(10**7, 10**7 + budget // 64 // 8 + 1, dtype=np.int64))  # past the cap
    assert not s.health()["delta_safe"]
    with pytest.raises(ValueError, match="deleted more ids from table 'user' than its log keeps under "
                                         "ps.memory.budget .* save a full one"):
        s.save(str(tmp_path), 2, base=1)
    full = save(s, tmp_path, 2)  # a full one needs no log, and the log starts again
    assert s.health()["delta_safe"]
    again = ShardStore(StoreConfig(TABLES, {"name": "adagrad", "lr": 0.05}), 0, 1)
    again.load(str(full))
    assert everything([again], "user") == everything([s], "user")


@pytest.mark.slow
def test_a_run_saves_in_full_where_a_shard_can_save_no_delta(tmp_path):
    """The trainer asks the shards before it saves a delta: a shard whose log let go (or that
    reshaped its rows) gets a full checkpoint, and the run goes on (it stopped on the refusal)."""
    from helpers.recipes import tiny_recipe

    from cardinal.checkpoint import layout
    from cardinal.checkpoint.reader import Reader
    from cardinal.train import Trainer
    from cardinal.train.callbacks import Callback

    class LogLetGo(Callback):
        def on_step(self, trainer, step, loss):
            if step == 4:
                table = trainer.client.transport.stores[1].tables["emb"]
                table.deleted.cap = 8
                table.deleted.add(np.arange(2, dtype=np.int64))
    flags = ["ps.shards=2", 'consistency.mode="sync"', "checkpoint.every=3", "checkpoint.full_every=3",
             "train.steps=10", "checkpoint.keep=4", "eval.keep_best=false"]
    Trainer(tiny_recipe(tmp_path, *flags), tmp_path / "run", progress=False, callbacks=[LogLetGo()]).fit()
    root = tmp_path / "run" / "checkpoints"
    bases = {k: Reader(layout.step_dir(root, k)).info.get("base") for k in layout.committed_steps(root)}
    assert bases == {3: None, 6: None, 9: 6, 10: 9}, bases

"""Delta checkpoints: only the rows touched since the previous checkpoint and the ids deleted
since; loaded as a chain (full, then each delta), all or nothing, into any shard count; kept
checkpoints keep their chain."""

import shutil

import numpy as np
import pytest

from cardinal.checkpoint import chain, layout, retention, write
from cardinal.embedding import TableConfig
from cardinal.ps import ShardStore, StoreConfig
from cardinal.recipe.admission import AdmissionConfig
from cardinal.sharding.routing import route

TABLES = (TableConfig("user", 8, seed=1), TableConfig("item", 3, seed=2))


def store(shard=0, n=1, **kw):
    admission = {"user": AdmissionConfig(policy="count", threshold=2)}
    return ShardStore(StoreConfig(TABLES, {"name": "adagrad", "lr": 0.05}, admission), shard, n, **kw)


def everything(stores, table):
    out = {}
    for s in stores:
        e = s.tables[table].export()
        out |= {int(i): d.tobytes() + c.tobytes() + t.tobytes()
                for i, d, c, t in zip(e["ids"], e["data"], e["count"], e["last_step"])}
    return out


def step(s, step, ids):
    for table in ("user", "item"):
        got = s.pull(table, ids, step=step)
        s.push(table, ids, np.full_like(got, 0.01), step=step)


def save(s, root, step, base=None):
    s.save(str(root), step, base)
    write.commit(layout.step_dir(root, step), step, s.n_shards, base=base)
    return layout.step_dir(root, step)


@pytest.mark.parametrize("n_after", [1, 3])
def test_a_chain_of_deltas_loads_back_every_row_and_deletion(tmp_path, n_after):
    s = store()
    rng = np.random.default_rng(0)
    everyone = rng.integers(-2**62, 2**62, 20_000).astype(np.int64)
    for k in (1, 2):
        step(s, k, everyone)
    save(s, tmp_path, 2)
    full_bytes = sum(f.stat().st_size for f in layout.step_dir(tmp_path, 2).rglob("*.npy"))
    step(s, 3, everyone[:200])                       # 1% of the rows change...
    s.tables["user"].delete(everyone[200:300])       # ...some are deleted...
    step(s, 3, rng.integers(0, 100, 50).astype(np.int64))  # ...and some are new
    save(s, tmp_path, 3, base=2)
    delta_bytes = sum(f.stat().st_size for f in layout.step_dir(tmp_path, 3).rglob("*.npy"))
    assert delta_bytes < 0.05 * full_bytes
    s.tables["item"].delete(everyone[:10])
    step(s, 4, everyone[5000:5100])
    last = save(s, tmp_path, 4, base=3)
    loaded = [store(k, n_after) for k in range(n_after)]
    for t in loaded:
        t.load(str(last))
        t.check()
    for table in ("user", "item"):
        assert everything(loaded, table) == everything([s], table)
    # a delta saved on the loaded chain records only what changed after it
    for t in (s, *loaded):
        step(t, 5, everyone[7000:7010] if t is s else everyone[7000:7010][route(everyone[7000:7010], n_after) == t.shard])
        t.tables["user"].delete(everyone[8000:8005] if t is s else everyone[8000:8005][route(everyone[8000:8005], n_after) == t.shard])
    for t in loaded:
        t.save(str(tmp_path / "again"), 5, base=4)
    shutil.copytree(last, tmp_path / "again" / last.name)  # the chain the new delta applies on
    for k in (2, 3):
        shutil.copytree(layout.step_dir(tmp_path, k), layout.step_dir(tmp_path / "again", k))
    write.commit(layout.step_dir(tmp_path / "again", 5), 5, n_after, base=4)
    again = [store(k, 2) for k in range(2)]
    for t in again:
        t.load(str(layout.step_dir(tmp_path / "again", 5)))
    for table in ("user", "item"):
        assert everything(again, table) == everything([s], table)
    # the count filter's counters are the newest checkpoint's: the second sighting admits
    probe = np.array([10**15 + 7], np.int64)
    s.pull("user", probe, step=6)
    mine = [t for t in loaded if route(probe, n_after)[0] == t.shard][0]
    mine.pull("user", probe, step=6)
    assert s.pull("user", probe, step=7).any() and mine.pull("user", probe, step=7).any()


def test_a_delta_needs_the_previous_save_as_its_base(tmp_path):
    s = store()
    step(s, 1, np.arange(100, dtype=np.int64))
    with pytest.raises(ValueError, match="last saved or loaded step None"):
        s.save(str(tmp_path), 1, base=0)
    save(s, tmp_path, 1)
    step(s, 2, np.arange(10, dtype=np.int64))
    with pytest.raises(ValueError, match="save a full one"):
        s.save(str(tmp_path), 2, base=0)


def test_a_missing_or_edited_link_is_refused_and_changes_nothing(tmp_path):
    s = store()
    step(s, 1, np.arange(1000, dtype=np.int64))
    save(s, tmp_path, 1)
    s.tables["user"].delete(np.arange(10, dtype=np.int64))
    step(s, 2, np.arange(50, dtype=np.int64))
    last = save(s, tmp_path, 2, base=1)
    target = store()
    step(target, 1, np.array([123456], np.int64))
    before = everything([target], "user")
    deleted = last / "shard-00000-of-00001" / "user.deleted.npy"
    deleted.write_bytes(deleted.read_bytes()[:-8] + np.int64(5).tobytes())
    with pytest.raises(ValueError, match="user.deleted.npy"):
        target.load(str(last))
    shutil.rmtree(layout.step_dir(tmp_path, 1))
    with pytest.raises(ValueError, match="delta on step 1.*missing"):
        target.load(str(last))
    assert everything([target], "user") == before


def test_kept_deltas_keep_their_chain(tmp_path):
    s = store()
    steps = {}
    base = None
    for k in range(1, 8):  # full at 1 and 4 and 7, deltas between
        step(s, k, np.arange(k * 10, dtype=np.int64))
        base = None if k in (1, 4, 7) else k - 1
        save(s, tmp_path, k, base)
        retention.remove_older(tmp_path, keep=1)
        steps[k] = layout.committed_steps(tmp_path)
    assert steps[3] == [1, 2, 3] and steps[4] == [4] and steps[6] == [4, 5, 6] and steps[7] == [7]
    assert chain.deltas_since_full(tmp_path, 7) == 0

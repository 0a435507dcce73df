"""The disk tier: rows leave RAM past ps.memory.budget and come back when used, so a run is bitwise
the run held all in RAM; its own budget evicts; checkpoints hold every tier's rows; a failed
tier write changes nothing."""

import numpy as np
import pytest

from cardinal import failpoints
from cardinal.checkpoint import layout, write
from cardinal.embedding import TableConfig
from cardinal.embedding.storage import Columns
from cardinal.embedding.tiers import RocksTier
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.recipe.eviction import EvictionConfig
from cardinal.sharding.routing import route

TABLES = (TableConfig("user", 8, seed=1), TableConfig("item", 3, seed=2))
CONFIG = StoreConfig(TABLES, {"name": "adagrad", "lr": 0.05})


def rows(n, width, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, width)).astype(np.float32)
    data[0, 0], data[-1, -1] = -0.0, np.float32(1e-42)  # a signed zero and a subnormal keep their bits
    return Columns(rng.choice(2**62, n, replace=False).astype(np.int64) - 2**61, data,
                   rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
                   rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32))


def test_rows_written_to_the_rocks_tier_read_back_bit_for_bit(tmp_path):
    tier = RocksTier(tmp_path / "t", 5)
    try:
        r = rows(1000, 5)
        tier.put(r)
        assert len(tier) == 1000 and tier.nbytes == 1000 * (8 + 20 + 8)
        probe = np.concatenate([r.ids[::-3], [12345]])
        found, got = tier.get(probe)
        assert found.tolist() == [True] * (len(probe) - 1) + [False]
        order = {int(i): k for k, i in enumerate(r.ids)}
        at = [order[int(i)] for i in got.ids]
        assert got.data.tobytes() == r.data[at].tobytes()
        assert np.array_equal(got.count, r.count[at]) and np.array_equal(got.last_step, r.last_step[at])
        taken = tier.take(r.ids[:10])
        assert len(taken.ids) == 10 and len(tier) == 990 and not tier.get(r.ids[:10])[0].any()
        scanned = np.concatenate([c.ids for c in tier.chunks(size=100)])
        assert sorted(scanned.tolist()) == sorted(r.ids[10:].tolist())
    finally:
        tier.close()
    assert not (tmp_path / "t").exists()


def test_a_demotion_hands_the_tier_its_rows_a_memtable_at_a_time(tmp_path):
    """Each put copies its rows twice (portable rows, RocksDB records): a demotion of many rows at
    once (a budget's room-making) goes in pieces of ``put_bytes``, and every row reads back whole."""
    from cardinal.embedding import EmbeddingTable
    from cardinal.optim import make_optimizer

    tier = RocksTier(tmp_path / "t", 16, write_buffer=64 << 10)
    table = EmbeddingTable(TableConfig("user", 8, seed=1), make_optimizer({"name": "adagrad", "lr": 0.05}), cold=tier)
    ids = np.arange(5000, dtype=np.int64)
    before = table.pull(ids, step=1).tobytes()
    sizes, put = [], tier.put
    tier.put = lambda rows: (sizes.append(len(rows.ids)), put(rows))[1]
    assert table.demote(lambda cols, n: np.arange(n - 1, -1, -2)) == 2500  # every other row, named backwards
    per = tier.put_bytes // (4 * 16 + 16)
    assert len(sizes) == -(-2500 // per) and max(sizes) == per and sum(sizes) == 2500
    assert table.storage.size == 2500 and len(tier) == 2500
    assert table.pull(ids, create=False, step=2).tobytes() == before
    table.check()
    tier.close()


def test_the_tier_counts_the_bytes_put_and_written_to_its_files(tmp_path):
    tier = RocksTier(tmp_path / "t", 5)
    try:
        tier.put(rows(20_000, 5))
        put, written = tier.io_bytes()
        assert put >= 20_000 * (8 + 4 * 7) and written == 0  # all in its memtable so far
        tier._db.flush()
        assert tier.io_bytes()[0] == put and tier.io_bytes()[1] > 0  # a file now: its write amplification is > 0
    finally:
        tier.close()


def test_a_tier_under_demotions_and_fault_ins_rewrites_each_row_a_few_times_not_once_a_flush(tmp_path):
    """A small memtable (a budgeted server's) flushes every few demotions; leveled compaction merged
    each small file into every row held (10x the bytes put here, 16x in a budgeted run, RocksDB's
    threads taking a core); universal compaction of 16 sorted runs rewrites each row about 3 times."""
    rng = np.random.default_rng(0)
    tier = RocksTier(tmp_path / "t", 18, write_buffer=64 << 10)
    try:
        held = np.empty(0, np.int64)
        for r in range(100):  # a step: 1,000 rows demoted, 400 of those held faulted back in
            ids = (np.arange(1000, dtype=np.int64) + 1000 * r) * 2654435761 % 2**61
            tier.put(Columns(ids, rng.normal(size=(1000, 18)).astype(np.float32), np.ones(1000, np.uint32),
                             np.ones(1000, np.uint32)))
            held = np.concatenate([held, ids])
            pick = rng.choice(len(held), 400, replace=False)
            assert len(tier.take(held[pick]).ids) == 400
            held = np.delete(held, pick)
        tier.settle()
        put, written = tier.io_bytes()
        assert len(tier) == len(held) == 60_000 and 0 < written < 5 * put
        assert tier.get(held)[0].all()
    finally:
        tier.close()


def test_a_failed_tier_write_writes_nothing(tmp_path, monkeypatch):
    tier = RocksTier(tmp_path / "t", 5)
    try:
        monkeypatch.setenv(failpoints.ENV, "tier.before_put=raise")
        with pytest.raises(failpoints.FailpointError):
            tier.put(rows(100, 5))
        monkeypatch.delenv(failpoints.ENV)
        assert len(tier) == 0 and not list(tier.chunks())
    finally:
        tier.close()


def train(store: ShardStore, steps: int = 40, seed: int = 0) -> ShardStore:
    rng = np.random.default_rng(seed)
    for step in range(1, steps + 1):
        for name, dim in (("user", 8), ("item", 3)):
            ids = rng.zipf(1.2, 2000).astype(np.int64) * (1 if name == "user" else -1)
            got = store.pull(name, ids, step=step)
            store.push(name, ids, (0.1 * got + 0.01 * rng.normal(size=got.shape)).astype(np.float32), step=step)
    return store


def everything(store: ShardStore, table: str) -> dict[int, bytes]:
    e = store.tables[table].export()
    return {int(i): d.tobytes() + c.tobytes() + s.tobytes()
            for i, d, c, s in zip(e["ids"], e["data"], e["count"], e["last_step"])}


@pytest.fixture
def stores(tmp_path):
    made = []

    def make(budget=0, disk=0, shard=0, n=1, **eviction):
        s = ShardStore(StoreConfig(TABLES, CONFIG.optimizer, {}, EvictionConfig(**eviction)), shard, n,
                       StoreLimits(memory_budget=budget, disk_budget=disk), str(tmp_path / "tiers"))
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def test_a_quarter_in_ram_the_rest_on_disk_is_bitwise_all_in_ram(stores):
    ram = train(stores())
    budget = ram.stats()["bytes"] // 4
    tiered = train(stores(budget, 10**9))
    st = tiered.stats()
    assert st["bytes"] <= budget * 1.02 and st["disk_bytes"] > 2 * st["bytes"]
    assert sum(t["faulted"] for t in st["tables"].values()) > 0
    for table in ("user", "item"):
        assert tiered.tables[table].digest() == ram.tables[table].digest()
        assert everything(tiered, table) == everything(ram, table)
        ids = np.array(sorted(everything(ram, table)), np.int64)
        faulted = tiered.tables[table].faulted
        assert np.array_equal(tiered.pull(table, ids, create=False), ram.pull(table, ids, create=False))
        assert tiered.tables[table].faulted == faulted  # an evaluation reads the disk tier, moves nothing
        assert tiered.tables[table].has(ids).all()
    tiered.check()


def test_the_disk_budget_evicts_the_lowest_scored_rows(stores):
    s = stores(250_000, 200_000, policy="lru", protect_steps=0)  # 164 KB of the budget are the two indexes
    for step in range(1, 30):
        s.pull("user", np.arange(step * 500, step * 500 + 500, dtype=np.int64), step=step)
    st = s.stats()
    assert st["disk_bytes"] <= 200_000 and st["bytes"] <= 250_000 * 1.02
    assert s.tables["user"].evicted["disk_budget"] > 0
    kept = np.array(sorted(everything(s, "user")), np.int64)
    assert kept.min() > 2000 and kept.max() == 29 * 500 + 499  # the least recently used went first
    s.check()


def test_ttl_reaches_the_disk_tier(stores):
    s = stores(20_000, 10**9, ttl_steps=3, every=5)
    s.pull("user", np.arange(2000, dtype=np.int64), step=1)
    s.pull("user", np.arange(2000, 2100, dtype=np.int64), step=4)
    assert s.stats()["tables"]["user"]["disk_rows"] > 0
    s.pull("user", np.arange(2000, 2100, dtype=np.int64), step=5)  # sweep at 5: rows of step 1 are 4 old
    assert set(everything(s, "user")) == set(range(2000, 2100))
    s.check()


def test_deleted_ids_leave_every_tier(stores):
    s = train(stores(30_000, 10**9), steps=10)
    t = s.tables["user"]
    ids = np.array(sorted(everything(s, "user")), np.int64)
    assert 0 < t.storage.size < len(ids)
    assert t.delete(ids[::2]) == len(ids[::2])
    assert set(everything(s, "user")) == set(ids[1::2].tolist())
    s.check()


@pytest.mark.parametrize("tiers_after", [False, True])
def test_a_checkpoint_holds_every_tier_and_reshards(stores, tmp_path, tiers_after):
    saved = train(stores(30_000, 10**9), steps=15)
    assert saved.stats()["disk_bytes"] > 0
    saved.save(str(tmp_path / "ck"), 15)
    write.commit(layout.step_dir(tmp_path / "ck", 15), 15, 1)
    budget = (240_000, 10**9) if tiers_after else (0, 0)  # 180 KB of it: the indexes and key filters
    loaded = [stores(*budget, shard=s, n=2) for s in range(2)]
    for s in loaded:
        s.load(str(layout.step_dir(tmp_path / "ck", 15)))
        s.check()
        if tiers_after:  # the load held the budget as the rows arrived: the rest went to disk
            assert s.stats()["bytes"] <= 240_000 * 1.02 and s.stats()["disk_bytes"] > 0
    for table in ("user", "item"):
        want = everything(saved, table)
        got = {}
        for s in loaded:
            got |= everything(s, table)
            assert all(route(np.array([i], np.int64), 2)[0] == s.shard for i in everything(s, table))
        assert got == want
    # training on from the loaded stores demotes again and stays bitwise with the saved store
    rng = np.random.default_rng(9)
    ids = np.unique(rng.zipf(1.2, 3000).astype(np.int64))
    for s in loaded:
        mine = ids[route(ids, 2) == s.shard]
        s.push("user", mine, np.full((len(mine), 8), 0.1, np.float32), step=16)
    saved.push("user", ids, np.full((len(ids), 8), 0.1, np.float32), step=16)
    assert {**everything(loaded[0], "user"), **everything(loaded[1], "user")} == everything(saved, "user")


def test_a_failed_demotion_keeps_the_rows_in_ram_and_the_request_succeeds(stores, monkeypatch):
    s = stores(30_000, 10**9)
    monkeypatch.setenv(failpoints.ENV, "tier.before_put=raise")
    train(s, steps=5)  # every demotion fails: RAM is over its budget, nothing is lost
    assert s.memory.failures > 0 and s.stats()["disk_bytes"] == 0
    monkeypatch.delenv(failpoints.ENV)
    assert everything(s, "user") == everything(train(stores(), steps=5), "user")
    s.check()


def test_disk_budget_without_a_memory_budget_is_an_error():
    with pytest.raises(ValueError, match="ps.memory.disk_budget needs ps.memory.budget"):
        StoreLimits(disk_budget=1 << 30)


def test_a_put_larger_than_the_memtable_goes_in_batches_and_a_failed_one_leaves_nothing(tmp_path):
    tier = RocksTier(tmp_path / "t", 16, write_buffer=64 << 10, cache=64 << 10)
    db, writes = tier._db, []

    class Failing:  # RocksDB failing at the third write of a put
        def __getattr__(self, name):
            return getattr(db, name)

        def write(self, batch, options):
            writes.append(1)
            if len(writes) == 3:
                raise OSError("disk full")
            return db.write(batch, options)
    try:
        put = rows(20_000, 16)  # about 1.4 MB of records: many memtables' worth
        tier._db = Failing()
        with pytest.raises(OSError, match="disk full"):
            tier.put(put)
        tier._db = db
        assert len(writes) == 4  # two batches went in, the third failed, then the undo
        found, _ = tier.get(put.ids)
        assert len(tier) == 0 and not found.any()  # all or nothing, as one batch was
        tier.put(put)
        found, got = tier.get(put.ids)
        assert found.all() and np.array_equal(got.data.view(np.uint32), put.data.view(np.uint32))
        assert db.property_int_value("rocksdb.size-all-mem-tables") <= 3 * (64 << 10)
    finally:
        tier._db = db
        tier.close()


def test_a_growing_key_filter_adds_layers_and_scans_only_when_they_run_out(rng):
    from cardinal.embedding.tiers.membership import MAX_LAYERS, KeyFilter

    f, held, added = KeyFilter(capacity=1000), 0, []
    for _ in range(200):
        keys = rng.integers(0, 2**62, 500)
        held += len(keys)
        if f.needs_rebuild(held):
            break
        f.add(keys, held)
        added.append(keys)
    assert len(f.layers) == MAX_LAYERS and held > f.capacity  # grew by layers, no scan, until they ran out
    assert f.may_have(np.concatenate(added)).all()  # no id lost in any layer
    assert f.may_have(rng.integers(0, 2**62, 100_000)).mean() < MAX_LAYERS / 100  # false positives stay few
    f.rebuild(held, added)
    assert len(f.layers) == 1 and f.may_have(np.concatenate(added)).all()

"""Chunked rows (FIITED, embedding/formats/chunked.py) against a slow reference bit for bit; freed and
revived chunks read zeros; the target holds and the memory goes back; checkpoints, the disk tier,
deletion and refused pushes keep every row exact; the store runs the passes; the recipe checks its keys."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from cardinal.checkpoint import layout, write
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.hashing import init_rows
from cardinal.embedding.table import NonFiniteUpdate
from cardinal.embedding.tiers import RocksTier
from cardinal.optim import make_optimizer
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.recipe import load, load_dict
from cardinal.recipe.eviction import EvictionConfig
from cardinal.train import resume
from cardinal.train.tables import store_config
from helpers.resharded import pulled_resharded

F32_MAX = np.float32(3.4028235e38)


class Ref:
    """The chunked table, slowly: id -> [working row, utilities, live mask], the same rules."""

    def __init__(self, dim, C, tail, opt, target):
        self.dim, self.C, self.s, self.opt, self.target, self.rows = dim, C, (dim - tail) // C, opt, target, {}
        self.a = opt.state_width(2) - opt.state_width(1)
        chunk = (1 + self.a) * self.s  # a new row's chunks: as many as fit in a plain row beside 2 C words
        self.start = min(C, max(1, (C * chunk - 2 * C) // chunk))

    def row(self, id_):
        if id_ not in self.rows:
            work = np.zeros((1, self.dim + self.opt.state_width(self.dim)), np.float32)
            init_rows(np.array([id_], np.int64), work, 0, 1, self.dim, np.int64(0), np.float32(0.01))
            self.opt.init_state(work, 0, 1, self.dim)
            live = np.arange(self.C) < self.start
            work[0, [c for k in np.flatnonzero(~live) for c in self.cols(k)]] = 0
            self.rows[id_] = [work[0], np.zeros(self.C, np.float32), live]
        return self.rows[id_]

    def cols(self, k):  # chunk k's working columns: its values, then its slice of each state block
        return [e * self.dim + k * self.s + j for e in range(1 + self.a) for j in range(self.s)]

    def pull(self, ids):
        return np.stack([self.row(int(i))[0][:self.dim] for i in ids])

    def push(self, ids, g):
        summed = {id_: np.zeros(self.dim, np.float32) for id_ in ids.tolist()}
        for i, id_ in enumerate(ids.tolist()):
            summed[id_] += g[i]
        for id_, gi in summed.items():
            work, util, live = self.row(id_)
            for k in range(self.C):
                acc = np.float32(0)
                for j in range(k * self.s, (k + 1) * self.s):
                    acc = np.float32(acc + gi[j] * gi[j])
                util[k] = min(np.float32(util[k] + acc), F32_MAX)
                if not live[k]:
                    gi[k * self.s:(k + 1) * self.s] = 0
            self.opt.apply(work[None], np.zeros(1, np.int64), gi[None].copy(), self.dim)
            work[[c for k in np.flatnonzero(~live) for c in self.cols(k)]] = 0  # the update of freed chunks: dropped

    def adjust(self):
        ids, C, n = list(self.rows), self.C, len(self.rows)
        prefix = np.minimum.accumulate(np.array([self.rows[i][1] for i in ids]).reshape(n, C), axis=1)
        spare, rest = math.floor(self.target * C * n) - n, np.sort(prefix[:, 1:].ravel())[::-1]
        cut = rest[spare] if spare < len(rest) else -np.inf  # live: above the (spare + 1)-th largest
        freed = revived = 0
        for r, id_ in enumerate(ids):
            work, util, live = self.rows[id_]
            new = np.r_[True, prefix[r, 1:] > cut]
            for k in np.flatnonzero(new != live):
                work[self.cols(k)] = 0  # a freed chunk's contents go; a revived one starts at zero
            freed, revived = freed + int((live & ~new).sum()), revived + int((new & ~live).sum())
            live[:] = new
            util *= np.float32(0.5)
        return {"live": int(sum(self.rows[i][2].sum() for i in ids)), "freed": freed, "revived": revived}

    def portable(self, id_):
        return np.concatenate([*self.rows[id_][:2], self.rows[id_][2].astype(np.float32)])


def by_id(table):
    e = table.export()
    return {int(i): d for i, d in zip(e["ids"], e["data"])}


@pytest.mark.parametrize("optimizer, dim, tail", [("rowwise_adagrad", 8, 0), ("adagrad", 9, 1), ("adam", 9, 1)])
def test_a_chunked_table_is_its_slow_reference_bit_for_bit(optimizer, dim, tail):
    opt = make_optimizer({"name": optimizer, "lr": 0.1})
    table = EmbeddingTable(TableConfig("t", dim, chunks=4, chunk_target=0.5, chunk_tail=tail), opt)
    ref = Ref(dim, 4, tail, opt, 0.5)
    assert table.format.start == ref.start
    rng = np.random.default_rng(7)
    totals = {"freed": 0, "revived": 0}
    for step in range(1, 16):
        ids = rng.integers(0, 60 + 5 * step, 50).astype(np.int64)  # new ids each step, duplicates
        assert table.pull(ids, step=step).tobytes() == ref.pull(ids).tobytes()
        pushed = np.r_[ids[:30], rng.integers(1000, 1100, 5), ids[:5]]  # ids never pulled; duplicates
        scale = rng.choice([1e-3, 1.0, 30.0], size=(len(pushed), 4)).repeat(table.format.s, axis=1)
        g = (rng.normal(size=(len(pushed), dim)) * np.c_[scale, np.ones((len(pushed), tail))]).astype(np.float32)
        table.push(pushed, g, step=step)
        ref.push(pushed, g.copy())
        if step % 3 == 0:
            before = {i: r[2].copy() for i, r in ref.rows.items()}
            got, want = table.adjust_dims(), ref.adjust()
            assert got == want and got["live"] <= 0.5 * 4 * len(table)
            totals = {k: totals[k] + got[k] for k in totals}
            every = np.array(list(ref.rows), np.int64)
            pulled, rows = table.pull(every, create=False), by_id(table)
            for i, id_ in enumerate(every.tolist()):
                for k in np.flatnonzero(~ref.rows[id_][2] | ~before[id_]):  # freed, or revived: zeros
                    assert not pulled[i][ref.cols(k)[:ref.s]].any() and not rows[id_][ref.cols(k)].any()
            g = rng.normal(size=(40, dim)).astype(np.float32)  # old rows only: the pool is exactly full
            table.push(every[:40], g, step=step)
            ref.push(every[:40], g.copy())
        rows = by_id(table)
        assert rows.keys() == ref.rows.keys()
        assert all(rows[i].tobytes() == ref.portable(i).tobytes() for i in rows)
        table.check()
    assert totals["freed"] > 0 and totals["revived"] > 0


def trained(n=20_000, dim=16, optimizer="rowwise_adagrad"):
    table = EmbeddingTable(TableConfig("t", dim, chunks=4, chunk_target=0.35), make_optimizer({"name": optimizer}))
    ids = np.arange(n, dtype=np.int64)
    table.pull(ids, step=1)
    table.push(ids, np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32), step=1)
    return table, ids


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad"])
@pytest.mark.parametrize("dim", [17, 65])  # the recipe's dims 16 and 64 and the wide weight
def test_a_chunked_table_is_never_larger_than_a_plain_one_before_its_first_pass(optimizer, dim):
    ids = np.arange(5000, dtype=np.int64)
    tables = [EmbeddingTable(TableConfig("t", dim, chunks=c, chunk_target=0.35, chunk_tail=1 if c > 1 else 0),
                             make_optimizer({"name": optimizer})) for c in (1, 4)]
    for step, part in enumerate(np.array_split(ids, 5), 1):
        for t in tables:
            t.pull(part, step=step)
            t.push(part[::2], np.random.default_rng(step).normal(size=(len(part[::2]), dim)).astype(np.float32),
                   step=step)
        plain, chunked = (t.nbytes for t in tables)
        assert chunked <= plain, f"step {step}: {chunked:,} bytes chunked > {plain:,} plain"
    assert tables[1].adjust_dims()["live"] <= 0.35 * 4 * len(ids) and tables[1].nbytes < tables[0].nbytes


RSS = """
import ctypes, os, sys
import numpy as np
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.optim import make_optimizer
def make(n, c):  # pushes of 20k rows: a push's backup stays small
    t = EmbeddingTable(TableConfig("t", 64, chunks=c, chunk_target=min(1, 1.4 / c)), make_optimizer({}))
    for lo in range(0, n, 20_000):
        ids = np.arange(lo, min(n, lo + 20_000), dtype=np.int64)
        t.pull(ids, step=1)
        t.push(ids, np.random.default_rng(lo).normal(size=(len(ids), 64)).astype(np.float32), step=1)
    t.adjust_dims()
    return t
def rss():
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
make(1000, int(sys.argv[1]))  # compiles
before, t = rss(), make(300_000, int(sys.argv[1]))
print(rss() - before, t.nbytes)
"""


@pytest.mark.slow
def test_a_large_chunked_table_takes_less_resident_memory_than_a_full_one():
    runs = [subprocess.run([sys.executable, "-c", RSS, str(c)], capture_output=True, text=True, timeout=120)
            for c in (1, 4)]  # a process each: RSS of one table, measured from the same start
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    (full_rss, full_bytes), (rss, nbytes) = ([int(x) for x in r.stdout.split()] for r in runs)
    assert nbytes < 0.6 * full_bytes and rss < 0.7 * full_rss, (full_rss, full_bytes, rss, nbytes)


def chunk_store(chunks=4, shard=0, n=1, every=2):
    table = TableConfig("t", 9, chunks=chunks, chunk_target=0.5, chunk_tail=1 if chunks > 1 else 0)
    return ShardStore(StoreConfig((table,), {"name": "adam", "lr": 0.05}, chunk_every=every), shard, n)


def train(stores, steps, seed=2, ids_max=300):
    rng = np.random.default_rng(seed)
    for step in steps:
        ids = rng.integers(0, ids_max, 400).astype(np.int64)
        g = (rng.normal(size=(400, 9)) * rng.choice([0.01, 1.0], size=(400, 1))).astype(np.float32)
        for s in stores:
            s.pull("t", ids, step=step)
            s.push("t", ids, g, step=step)


def test_the_store_runs_passes_and_a_checkpoint_loads_bitwise_into_any_shard_count(tmp_path):
    s = chunk_store()
    train([s], range(1, 7))
    st = s.stats()["tables"]["t"]
    assert st["live_chunks"] < 4 * st["rows"]  # passes ran after the pushes of steps 2, 4, 6
    s.save(str(tmp_path / "ck"), 6)
    write.commit(layout.step_dir(tmp_path / "ck", 6), 6, 1)
    ids = np.arange(300, dtype=np.int64)
    want = s.pull("t", ids, create=False)
    for n in (1, 2):
        got, shards = pulled_resharded(layout.step_dir(tmp_path / "ck", 6), lambda k, n: chunk_store(4, k, n),
                                       ids, n)
        assert got.tobytes() == want.tobytes()
    assert shards[0].tables["t"].format.live + shards[1].tables["t"].format.live == st["live_chunks"]
    one = chunk_store()
    one.load(str(layout.step_dir(tmp_path / "ck", 6)))
    one.check()
    assert one.tables["t"].digest() == s.tables["t"].digest()
    train([s, one], range(7, 11), seed=3)  # utilities came back too, and the passes fall on the same steps
    assert one.tables["t"].digest() == s.tables["t"].digest()
    with pytest.raises(ValueError, match="chosen which chunks"):
        s.save(str(tmp_path / "ck"), 10, base=6)
    with pytest.raises(ValueError, match="saved with 4 chunks a row .* the store has 1"):
        chunk_store(chunks=1).load(str(layout.step_dir(tmp_path / "ck", 6)))


def test_rows_through_the_disk_tier_come_back_bit_for_bit(tmp_path):
    table, ids = trained(n=3000, dim=8, optimizer="adam")
    table.adjust_dims()
    table.cold = RocksTier(tmp_path / "tier", table.portable_width)  # its files go with tmp_path
    before, live, digest = by_id(table), table.format.live, table.digest()
    assert table.demote(lambda cols, n: np.arange(0, n, 2)) == 1500
    assert table.format.live < live and table.digest() == digest
    table.pull(ids, step=2)  # faults every row back in
    after = by_id(table)
    assert table.format.live == live and all(after[i].tobytes() == before[i].tobytes() for i in before)
    table.check()
    table.cold.close()
    config = chunk_store(every=10**6).config
    ram, tiered = ShardStore(config), ShardStore(config, limits=StoreLimits(memory_budget=30_000, disk_budget=10**9),
                                                 tier_dir=str(tmp_path / "tiers"))
    tiered.memory.budget = 0  # first the passes, all rows in RAM in both; then the budget moves rows out
    for step in (1, 2, 3):
        train([ram, tiered], [step], seed=step, ids_max=1500)
        assert ram.tables["t"].adjust_dims() == tiered.tables["t"].adjust_dims()
    tiered.memory.budget = 30_000
    train([ram, tiered], range(4, 20), seed=4, ids_max=3000)
    cold = np.concatenate([c.data[:, -4:] for c in tiered.tables["t"].cold.chunks()])
    assert len(cold) and (cold == 0).any()  # rows with freed chunks were on disk
    assert tiered.tables["t"].digest() == ram.tables["t"].digest()
    tiered.check()


def test_a_pass_frees_chunks_to_the_target_and_so_does_deleting_or_evicting_rows():
    table, ids = trained()
    full, pool, start = table.nbytes, table.format.pool, table.format.start
    assert start == 2 and pool.live == start * len(ids) and pool.arena.capacity >= start * len(ids)
    got = table.adjust_dims()
    assert got["live"] == pool.live <= 0.35 * 4 * len(ids)
    assert got["freed"] - got["revived"] == start * len(ids) - got["live"]
    assert pool.arena.capacity == got["live"]  # compacted into an arena of exactly the live chunks
    assert full - table.nbytes == (got["freed"] - got["revived"]) * pool.words * 4
    assert (table.pull(ids, create=False) == 0).mean() > 0.5
    rows, live = by_id(table), pool.live
    held = lambda gone: int(sum(rows[int(i)][-4:].sum() for i in gone))  # noqa: E731
    assert table.delete(ids[:300]) == 300 and pool.live == live - held(ids[:300])
    assert table.evict(lambda cols, n: np.flatnonzero(np.isin(cols.ids[:n], ids[300:400])), "test") == 100
    used, live = pool.used, live - held(ids[:400])
    assert pool.live == live
    table.pull(np.arange(10**6, 10**6 + 50, dtype=np.int64), step=3)  # 100 chunks: freed ones, no growth
    assert pool.used == used and pool.live == live + 50 * start
    table.check()
    c = chunk_store(every=10**6).config  # the budget counts chunks: it evicts just enough rows to meet it
    s = ShardStore(StoreConfig(c.tables, c.optimizer, {}, EvictionConfig(protect_steps=0), c.chunk_every),
                   limits=StoreLimits(memory_budget=150_000))
    train([s], range(1, 6), ids_max=3000)
    st, t = s.stats(), s.stats()["tables"]["t"]
    assert t["evicted"]["budget"] > 0 and t["live_chunks"] == 2 * t["rows"]
    assert 0.9 * 150_000 < st["bytes"] <= 150_000 and s.memory.short == 0
    s.check()


def test_a_refused_push_leaves_utilities_and_chunks_as_they_were():
    table, ids = trained(n=100, dim=8, optimizer="sgd")
    table.adjust_dims()
    digest, live = table.digest(), table.format.live
    g = np.ones((102, 8), np.float32)
    g[50, 0] = g[101, 0] = -3e38  # id 50 twice: its first value overflows; id 100 is new
    with pytest.raises(NonFiniteUpdate, match="id 50"):
        table.push(np.r_[ids, 100, 50], g, step=2)
    assert table.digest() == digest and table.format.live == live and len(table) == 100
    table.check()


@pytest.mark.parametrize("optimizer", ["adam", "rowwise_adagrad"])
def test_a_push_block_checks_the_columns_a_row_stores_as_the_stored_rows_would_read(optimizer):
    """``first_nonfinite_held`` on working rows (one gather a block) against ``gather`` of the
    stored rows: a NaN in a freed chunk's columns is not stored, so it is not a refusal."""
    from cardinal.embedding.formats import chunk_kernels as K

    table = EmbeddingTable(TableConfig("t", 10, chunks=4, chunk_tail=2, chunk_target=0.35),
                           make_optimizer({"name": optimizer}))
    ids = np.arange(60, dtype=np.int64)
    table.pull(ids, step=1)
    table.push(ids, np.random.default_rng(0).normal(size=(60, 10)).astype(np.float32), step=1)
    table.adjust_dims()
    f, cols = table.format, table.storage.columns()
    rows = table.index.find(cols.ids, ids)
    bits = cols.data.view(np.int32)
    assert (bits[rows, :f.C] == 0).any(), "some chunks are freed"
    rng = np.random.default_rng(5)
    for trial in range(200):
        work = f.working(cols.data, rows, 10)
        i, j = int(rng.integers(len(rows))), int(rng.integers(work.shape[1]))
        work[i, j] = [np.nan, np.inf, -np.inf][trial % 3]
        pool = f.pool.arena.array
        words, chunks = cols.data.copy(), pool.copy()  # what storing the block, then reading it back, would find
        f.store(cols.data, rows, work, 10, ids, 1)
        want = f.first_nonfinite(cols.data, rows, 0, len(rows), 10)
        cols.data[:], pool[:] = words, chunks
        assert K.first_nonfinite_held(work, bits, rows, *f._args()) == want, (i, j)
    assert table.check() is None


def test_the_recipe_and_the_configs_check_their_chunk_keys(tmp_path):
    for kw, match in [({"dim": 10}, "divisible by chunks"), ({"chunk_target": 0}, "chunk_target must be in"),
                      ({"chunk_target": 0.2}, ">= 1 / chunks"), ({"storage": "int8"}, "storage must be 'fp32'"),
                      ({"chunks": 0}, "chunks must be")]:
        with pytest.raises(ValueError, match=match):
            TableConfig("t", **{"dim": 8, "chunks": 4, **kw})
    with pytest.raises(ValueError, match="chunk_every must be"):
        StoreConfig((TableConfig("t", 8),), chunk_every=0)
    for sets, match in [(["embedding.dim=18"], "must divide embedding.dim"),
                        (["compression.fiited.chunks=1", "compression.fiited.target=0.5"], "only with"),
                        (["compression.fiited.target=0.2"], r"\[1 / chunks, 1\]"),
                        (["compression.fiited.every=0"], "fiited.every must"),
                        (['compression.storage="bf16"'], "set compression.storage = 'fp32'")]:
        with pytest.raises(ValueError, match=match):
            load(None, ["compression.fiited.chunks=4", *sets])
    for recipe, match in [({"checkpoint": {"full_every": 3}}, "checkpoint.full_every = 1"),
                          ({"model": {"name": "lr"}}, "no embedding values to chunk")]:
        with pytest.raises(ValueError, match=match):
            store_config(load_dict({"compression": {"fiited": {"chunks": 4}}, **recipe}))
    recipe = load_dict({"embedding": {"dim": 64}, "compression": {"fiited": {"chunks": 4, "target": 0.35, "every": 50}},
                        "train": {"baseline": "lr"}})
    got = {t.name: (t.dim, t.chunks, t.chunk_target, t.chunk_tail) for t in store_config(recipe).tables}
    assert got == {"emb": (65, 4, 0.35, 1), "lr_emb": (1, 1, 1.0, 0)} and store_config(recipe).chunk_every == 50
    (tmp_path / "recipe.json").write_text(json.dumps(recipe.to_dict()))
    with pytest.raises(ValueError, match="cannot change compression.fiited.chunks"):  # the saved rows' layout
        resume.resumed_recipe(tmp_path, ["compression.fiited.chunks=8"])
    changed = resume.resumed_recipe(tmp_path, ["compression.fiited.target=0.5", "compression.fiited.every=10"])
    assert (changed.compression.fiited.target, changed.compression.fiited.every) == (0.5, 10)  # a run may change them

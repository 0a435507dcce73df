"""Eviction: time to live, a byte budget per server, policies that pick who goes. Rows in
flight are never evicted, survivors read back unchanged, and the same run evicts the same rows."""

import numpy as np
import pytest

from cardinal.checkpoint import layout, write
from cardinal.embedding import TableConfig
from cardinal.embedding import reference
from cardinal.embedding.eviction import Decayed, L2, LFU, LRU, lowest
from cardinal.embedding.eviction_kernels import lowest_keys
from cardinal.embedding.storage import Columns
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.ps.server.memory import Memory
from cardinal.recipe.admission import AdmissionConfig
from cardinal.recipe.eviction import EvictionConfig

TABLES = (TableConfig("user", 8, seed=1), TableConfig("item", 2, seed=2))


def store(budget=0, admission=None, **eviction):
    spec = {} if admission is None else {"user": admission, "item": admission}
    return ShardStore(StoreConfig(TABLES, {"name": "adagrad"}, spec, EvictionConfig(**eviction)),
                      limits=StoreLimits(memory_budget=budget))


def values(s: ShardStore, table: str) -> dict[int, bytes]:
    e = s.tables[table].export()
    return {int(i): d.tobytes() for i, d in zip(e["ids"], e["data"])}


def test_policies_score_as_their_references():
    rng = np.random.default_rng(0)
    n, dim = 50, 3
    cols = Columns(np.arange(n, dtype=np.int64), rng.normal(size=(n, dim + 2)).astype(np.float32),
                   rng.integers(0, 9, n).astype(np.uint32), rng.integers(0, 20, n).astype(np.uint32))
    dim_values = lambda data: data[:, :dim]  # noqa: E731  (fp32 rows: the values are the first dim words)
    assert np.array_equal(LRU().score(cols, n, dim_values, 20), cols.last_step.astype(float))
    assert np.array_equal(LFU().score(cols, n, dim_values, 20), cols.count.astype(float))
    assert np.allclose(L2().score(cols, n, dim_values, 20), np.linalg.norm(cols.data[:, :dim].astype(float), axis=1))
    want = [np.log(1 + c) + (20 - s) * np.log(0.9) for c, s in zip(cols.count, cols.last_step)]
    assert np.allclose(Decayed(0.9).score(cols, n, dim_values, 20), want)


def test_lowest_takes_the_k_lowest_finite_scores():
    scores = np.array([5, 1, np.inf, 3, 2, np.inf, 4], float)
    assert sorted(lowest(scores, 3).tolist()) == [1, 3, 4]
    assert sorted(lowest(scores, 10).tolist()) == [0, 1, 3, 4, 6]  # never a protected (inf) row
    assert len(lowest(scores, 0)) == 0


@pytest.mark.parametrize("spread", [7, 2**32 - 1])  # many ties in one bin; keys over both 16-bit halves
def test_lowest_keys_takes_the_k_lowest_unprotected_keys_ties_by_row_as_its_reference(spread):
    rng = np.random.default_rng(spread)
    for _ in range(40):
        n = int(rng.integers(0, 300))
        key = rng.integers(0, spread, n, dtype=np.uint64, endpoint=True).astype(np.uint32)
        last = rng.integers(0, 30, n).astype(np.uint32)
        cutoff, k = int(rng.integers(-2, 33)), int(rng.integers(0, n + 5))
        got = lowest_keys(key, last, np.int64(cutoff), np.int64(k))
        assert got.tolist() == reference.lowest_keys(key, last, cutoff, k).tolist()


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_a_budget_evicts_the_lowest_keys_of_lru_and_lfu_never_a_protected_row(policy):
    rng = np.random.default_rng(1)
    n = 5000
    cols = Columns(np.arange(n, dtype=np.int64), np.zeros((n, 4), np.float32),
                   rng.integers(0, 50, n).astype(np.uint32), rng.integers(0, 100, n).astype(np.uint32))
    key = cols.last_step if policy == "lru" else cols.count
    memory = Memory(EvictionConfig(policy=policy, protect_steps=3), budget=1)
    for protect, cutoff in [(True, 100 - 3), (False, 2**62)]:
        for k in (0, 1, 700, n):
            got = memory._victims(cols, n, None, 100, k, protect)
            assert got.tolist() == reference.lowest_keys(key, cols.last_step, cutoff, k).tolist()
            scores = memory.policy.score(cols, n, None, 100)
            if protect:
                scores[cols.last_step >= 97] = np.inf
            assert np.array_equal(np.sort(scores[got]), np.sort(scores)[:len(got)])  # as low as lowest() takes


def test_ttl_in_steps_deletes_the_rows_unseen_for_that_long():
    s = store(ttl_steps=5, every=10)
    old, new = np.arange(100, dtype=np.int64), np.arange(100, 200, dtype=np.int64)
    s.pull("user", old, step=1)
    s.push("user", old[:10], np.ones((10, 8), np.float32), step=5)  # 5 steps old at step 10: kept
    s.push("user", old[10:20], np.ones((10, 8), np.float32), step=4)  # 6 steps old: deleted
    s.pull("user", new, step=9)
    kept = {i: v for i, v in values(s, "user").items() if i < 10 or i >= 100}
    s.pull("user", new, step=10)  # the sweep at step 10
    assert set(values(s, "user")) == set(range(10)) | set(range(100, 200))
    assert {i: values(s, "user")[i] for i in kept} == kept  # survivors unchanged
    assert s.tables["user"].evicted == {"ttl_steps": 90}
    s.check()


def test_ttl_in_seconds_uses_the_time_each_step_was_first_seen(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("cardinal.ps.server.memory.time.monotonic", lambda: clock[0])
    s = store(ttl_seconds=60, every=1)
    s.pull("user", np.arange(10, dtype=np.int64), step=1)
    clock[0] += 30
    s.pull("user", np.arange(10, 20, dtype=np.int64), step=2)
    clock[0] += 45  # step 1 is 75 s old, step 2 45 s
    s.pull("user", np.arange(20, 30, dtype=np.int64), step=3)
    assert set(values(s, "user")) == set(range(10, 30))
    assert s.tables["user"].evicted == {"ttl_seconds": 10}


@pytest.mark.parametrize("policy", ["lru", "lfu", "l2", "decayed"])
def test_a_budget_is_held_while_the_id_set_grows(policy):
    budget = 1 << 20
    s = store(budget, policy=policy)
    rng = np.random.default_rng(1)
    worst = 0
    for step in range(1, 80):
        ids = np.concatenate([rng.integers(0, 2000, 300), rng.integers(0, 2**62, 700)]).astype(np.int64)
        for table in ("user", "item"):
            rows = s.pull(table, ids, step=step)
            s.push(table, ids, np.full_like(rows, 0.01), step=step)
        worst = max(worst, s.stats()["bytes"])
        if step > 50:
            assert s.stats()["bytes"] <= budget
            assert s.stats()["bytes"] >= 0.95 * budget
    assert s.tables["user"].evicted["budget"] > 0 and s.tables["item"].evicted["budget"] > 0
    assert worst <= budget * 1.05  # past it by at most one request's new rows
    s.check()


def test_rows_touched_in_the_last_protect_steps_steps_are_never_evicted():
    s = store(400_000, policy="lfu", protect_steps=2)
    old, recent = np.arange(1000, dtype=np.int64), np.arange(1000, 2000, dtype=np.int64)
    for step in range(1, 6):
        s.pull("user", old, step=step)  # seen 5 times, last at step 5
    s.pull("user", recent, step=6)  # seen once (the lowest score), at step 6
    kept = {i: v for i, v in values(s, "user").items() if i >= 1000}
    s.pull("user", np.arange(2000, 3500, dtype=np.int64), step=8)  # room for it: step 6 is 2 steps back, protected
    now = values(s, "user")
    assert all(now.get(i) == v for i, v in kept.items())  # every row of step 6, unchanged
    assert 0 < s.tables["user"].evicted.get("budget", 0) < 1000 and len(s.tables["user"]) > 2500
    assert s.stats()["bytes"] <= 400_000
    s.check()


def test_lru_evicts_the_least_recently_used_and_survivors_read_back_unchanged():
    s = store(300_000, policy="lru", protect_steps=0)
    for step in range(1, 11):
        s.pull("user", np.arange(step * 1000, step * 1000 + 1000, dtype=np.int64), step=step)
    kept = values(s, "user")
    assert min(kept) > 1000 and max(kept) == 10_999  # the oldest steps went first
    s.pull("item", np.array([1], np.int64), step=11)
    assert {i: values(s, "user")[i] for i in kept} == kept


def test_the_same_requests_evict_the_same_rows(tmp_path):
    def run():
        s = store(500_000, policy="decayed", admission=AdmissionConfig(policy="count", threshold=2))
        rng = np.random.default_rng(5)
        for step in range(1, 30):
            ids = rng.zipf(1.2, 3000).astype(np.int64)
            rows = s.pull("user", ids, step=step)
            s.push("user", ids, rng.normal(size=rows.shape).astype(np.float32), step=step)
        return s
    a, b = run(), run()
    assert a.tables["user"].digest() == b.tables["user"].digest()
    assert a.tables["user"].evicted["budget"] > 0
    a.save(str(tmp_path), 29)  # a checkpoint after evictions loads whole
    write.commit(layout.step_dir(tmp_path, 29), 29, 1)
    c = store(500_000)
    c.load(str(layout.step_dir(tmp_path, 29)))
    c.check()
    assert values(c, "user") == values(a, "user")


def test_bad_eviction_settings_are_errors_naming_them():
    with pytest.raises(ValueError, match="ps.memory.eviction.policy"):
        EvictionConfig(policy="random")
    with pytest.raises(ValueError, match="ps.memory.eviction.every"):
        EvictionConfig(every=0)
    with pytest.raises(ValueError, match="ps.memory.admission.threshold"):
        AdmissionConfig(policy="bloom", threshold=300)
    with pytest.raises(ValueError, match="ps.memory.budget"):
        StoreLimits(memory_budget=-1)

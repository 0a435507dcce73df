"""ps.memory.budget under a flood of new ids, sent as a hostile client would: everything a server
keeps stays inside the budget. New rows that protected rows leave no room for are refused
(RESOURCE_EXHAUSTED naming ps.memory.budget) and change nothing, or go to the disk tier when
there is one; admission counters age out; a Bloom filter past its fill decays instead of
admitting every id."""

import threading

import numpy as np
import pytest

from cardinal.embedding import TableConfig
from cardinal.embedding.admission.bloom import MAX_FILL
from cardinal.ps import ShardStore, StoreConfig, StoreFull, StoreLimits
from cardinal.ps.transport.grpc_transport import GrpcTransport, ShardRequestError
from cardinal.ps.transport.requests import PullRequest, PushRequest
from cardinal.recipe.admission import AdmissionConfig
from cardinal.recipe.eviction import EvictionConfig
from helpers.cluster import JOB, TOKEN, Cluster
from test_grpc import server_process

BUDGET = 4 << 20
TABLES = (TableConfig("emb", 8, seed=1), TableConfig("lr", 1, seed=2))


def config(admission: AdmissionConfig | None = None) -> StoreConfig:
    return StoreConfig(TABLES, {"name": "rowwise_adagrad"}, {} if admission is None else {"emb": admission},
                       EvictionConfig(policy="lru"))


def flood(n: int, seed: int, size: int = 20_000):
    """``n`` ids never seen before, ``size`` a request."""
    ids = np.random.default_rng(seed).integers(1 << 40, 1 << 62, n, dtype=np.int64)
    return [ids[i:i + size] for i in range(0, n, size)]


@pytest.mark.slow
def test_a_flood_of_new_ids_at_one_step_is_refused_at_the_budget_over_grpc(tmp_path):
    cluster = Cluster(config(), 1, tmp_path / "ps", limits=StoreLimits(memory_budget=BUDGET))
    raw = GrpcTransport(cluster.addresses, JOB, TOKEN, timeout=30)  # no client-side checks: each piece of the
    raw._follow = lambda shard, limits: None                         # flood one request, whatever the server says
    try:
        trained = np.arange(1000, dtype=np.int64)
        for step in (1, 2, 3):
            raw.pull(0, PullRequest("emb", trained, True, step)).wait()
            raw.push(0, PushRequest("emb", trained, np.full((1000, 8), 0.1, np.float32), step)).wait()
        refusals = []
        for k, ids in enumerate(flood(400_000, 0, 5_000)):  # all at step 5: every row made is protected
            before = raw.stats(0, digest=True).wait()
            try:
                raw.pull(0, PullRequest("emb", ids, True, 5)).wait()
            except ShardRequestError as e:
                refusals.append(str(e))
                after = raw.stats(0, digest=True).wait()
                assert after["tables"] == before["tables"]  # rows, bytes, digests: the refused pull changed nothing
                with pytest.raises(ShardRequestError, match="RESOURCE_EXHAUSTED.*ps.memory.budget"):
                    raw.push(0, PushRequest("emb", ids, np.ones((len(ids), 8), np.float32), 5)).wait()
                assert raw.stats(0, digest=True).wait()["tables"] == before["tables"]
            assert raw.stats(0).wait()["bytes"] <= BUDGET * 1.02
            if len(refusals) == 3:
                break
        assert len(refusals) == 3 and all("RESOURCE_EXHAUSTED" in r and "ps.memory.budget" in r for r in refusals)
        assert k < 48  # the first refusals came once the budget was full, not after the whole flood
        # three steps on the flood's rows are no longer protected: new rows evict them again
        raw.pull(0, PullRequest("emb", flood(5_000, 1)[0], True, 8)).wait()
        stats = raw.stats(0, check=True).wait()
        assert stats["bytes"] <= BUDGET and stats["tables"]["emb"]["evicted"]["budget"] > 0
    finally:
        raw.close()
        cluster.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_real_server_refuses_a_flood_past_its_budget_from_the_recipe(tmp_path):
    with server_process(tmp_path, 'ps.memory.budget="4MiB"') as (_, fields):
        raw = GrpcTransport([f"127.0.0.1:{fields['port']}"], JOB, TOKEN, timeout=30)
        try:
            with pytest.raises(ShardRequestError, match="RESOURCE_EXHAUSTED.*ps.memory.budget is full"):
                for ids in flood(400_000, 9):  # rows of dim 5 (DeepFM's 4 + 1), all at step 1
                    raw.pull(0, PullRequest("emb", ids, True, 1)).wait()
                    assert raw.stats(0).wait()["bytes"] <= BUDGET * 1.02
            assert raw.stats(0, check=True).wait()["bytes"] <= BUDGET
        finally:
            raw.close()


def test_with_a_disk_tier_a_flood_at_one_step_goes_to_disk_and_every_row_reads_back(tmp_path):
    s = ShardStore(config(), limits=StoreLimits(memory_budget=BUDGET, disk_budget=1 << 30), tier_dir=str(tmp_path))
    try:
        sent, made = flood(200_000, 2), []
        for ids in sent:
            made.append(s.pull("emb", ids, step=5))
            assert s.stats()["bytes"] <= BUDGET * 1.02
        assert s.stats()["tables"]["emb"]["disk_rows"] > 100_000
        ids = np.concatenate(sent)
        assert np.array_equal(s.pull("emb", ids, create=False), np.concatenate(made))  # nothing lost
        s.check()
    finally:
        s.close()


def test_count_filter_counters_age_out_inside_the_budget_and_trained_rows_stay():
    s = ShardStore(config(AdmissionConfig(policy="count", threshold=2)), limits=StoreLimits(memory_budget=BUDGET))
    trained = np.arange(5000, dtype=np.int64)
    for step in (1, 2, 3):
        s.pull("emb", trained, step=step)
        s.push("emb", trained, np.full((5000, 8), 0.1, np.float32), step=step)
    kept = s.pull("emb", trained, create=False)
    assert kept.any(axis=1).all()
    for ids in flood(400_000, 3):  # each id once: counters only, 20 bytes each
        assert not s.pull("emb", ids, step=10).any()
        assert s.stats()["bytes"] <= BUDGET * 1.02
    assert np.array_equal(s.pull("emb", trained, create=False), kept)  # counters went first, not the model
    assert s.stats()["tables"]["emb"]["admission_bytes"] < BUDGET / 2
    seen = flood(20_000, 4)[0]
    s.pull("emb", seen, step=11)
    assert s.pull("emb", seen, step=12).any(axis=1).all()  # a second sighting still admits
    s.check()


def test_a_bloom_filter_past_its_fill_decays_and_never_admits_everything():
    s = ShardStore(config(AdmissionConfig(policy="bloom", threshold=2, bloom_bytes=1 << 16)),
                   limits=StoreLimits(memory_budget=BUDGET))
    f = s.tables["emb"].admission
    admitted = []
    for ids in flood(400_000, 5, 10_000):  # 30 ids a counter: saturated many times over without decay
        before = len(s.tables["emb"])
        s.pull("emb", ids, step=10)
        admitted.append((len(s.tables["emb"]) - before) / len(ids))
        assert np.count_nonzero(f.counters) <= MAX_FILL * len(f.counters)
        assert s.stats()["bytes"] <= BUDGET * 1.02
    assert max(admitted) < MAX_FILL ** 3 * 1.6  # a never-seen id reads its 3 counters raised at most 1/8 of the time
    seen = flood(5000, 6)[0]
    s.pull("emb", seen, step=11)
    assert s.pull("emb", seen, step=11).any(axis=1).mean() > 0.9  # a second sighting right after still admits
    s.check()


def test_bloom_filters_must_leave_the_rows_half_the_budget():
    with pytest.raises(ValueError, match="ps.memory.admission.bloom_bytes.*ps.memory.budget"):
        ShardStore(config(AdmissionConfig(policy="bloom", bloom_bytes=3 << 20)),
                   limits=StoreLimits(memory_budget=BUDGET))
    ShardStore(config(AdmissionConfig(policy="bloom", bloom_bytes=1 << 20)), limits=StoreLimits(memory_budget=BUDGET))
    ShardStore(config(AdmissionConfig(policy="bloom", bloom_bytes=3 << 20)))  # no budget: no bound to keep


def test_a_refused_push_is_refused_whole_in_process():
    s = ShardStore(config(), limits=StoreLimits(memory_budget=BUDGET))
    with pytest.raises(StoreFull, match="ps.memory.budget is full"):
        for ids in flood(200_000, 7):
            s.pull("emb", ids, step=3)
    mixed = np.concatenate([s.tables["emb"].export()["ids"][:100], flood(20_000, 8)[0]])  # 100 rows held, the rest new
    before = (s.tables["emb"].digest(), s.tables["lr"].digest(), s.stats()["bytes"])
    with pytest.raises(StoreFull, match="ps.memory.budget is full"):
        s.push("emb", mixed, np.ones((len(mixed), 8), np.float32), step=3)
    assert (s.tables["emb"].digest(), s.tables["lr"].digest(), s.stats()["bytes"]) == before
    s.check()


@pytest.mark.timeout(120)
def test_concurrent_floods_of_many_tables_stay_inside_the_budget():
    tables = tuple(TableConfig(f"t{i}", 8, seed=i) for i in range(8))
    s = ShardStore(StoreConfig(tables, {"name": "rowwise_adagrad"}), limits=StoreLimits(memory_budget=BUDGET))
    start, refused = threading.Barrier(len(tables)), []

    def attack(name: str, seed: int):
        start.wait(timeout=30)
        for ids in flood(200_000, seed, 8000):  # 8,000 rows of 62 bytes: 1/8 of the budget a pull
            try:
                s.pull(name, ids, step=1)
            except StoreFull:
                refused.append(name)

    threads = [threading.Thread(target=attack, args=(t.name, 10 + k)) for k, t in enumerate(tables)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    assert not any(t.is_alive() for t in threads)  # no deadlock between tables making room
    assert refused and s.stats()["bytes"] <= BUDGET * 1.02
    s.check()

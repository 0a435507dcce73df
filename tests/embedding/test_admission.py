"""Admission filters: an id gets a row only once it has been seen often enough; until then it
reads zeros and its gradients are dropped. Counters are all-or-nothing with the request and
travel through checkpoints, resharded with the rows."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardinal.checkpoint import layout, write
from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.admission import make_filter
from cardinal.optim import make_optimizer
from cardinal.ps import ShardStore, StoreConfig, StoreFull, StoreLimits
from cardinal.recipe.admission import AdmissionConfig
from cardinal.sharding.routing import route

TABLES = (TableConfig("user", 4, seed=1), TableConfig("item", 3, seed=2))


def table(**admission):
    return EmbeddingTable(TableConfig("t", 4, init_scale=0.5), make_optimizer({"name": "sgd", "lr": 0.1}),
                          admission=make_filter(AdmissionConfig(**admission)))


def store(shard=0, n=1, limits=None, **admission):
    spec = AdmissionConfig(**admission)
    return ShardStore(StoreConfig(TABLES, {"name": "adagrad"}, {"user": spec, "item": spec}), shard, n, limits)


@pytest.mark.parametrize("policy", ["count", "bloom"])
def test_an_id_gets_its_row_on_the_threshold_th_sighting(policy):
    t = table(policy=policy, threshold=3)
    ids = np.array([7, -1, 2**62], np.int64)
    for step in (1, 2):
        assert not t.pull(ids, step=step).any()  # zeros, no row
        t.push(ids, np.ones((3, 4), np.float32), step=step)  # dropped
        assert len(t) == 0
    rows = t.pull(ids, step=3)
    assert len(t) == 3 and rows.any()
    assert t.refused == 6 and t.dropped == 6
    plain = table()
    assert np.array_equal(rows, plain.pull(ids, step=3))  # a row starts as it would have without the filter


def test_a_threshold_of_one_is_bitwise_no_filter():
    rng = np.random.default_rng(0)
    a, b = table(policy="count", threshold=1), table()
    for step in range(1, 6):
        ids = rng.integers(0, 500, 300).astype(np.int64)
        assert np.array_equal(a.pull(ids, step=step), b.pull(ids, step=step))
        grads = rng.normal(size=(300, 4)).astype(np.float32)
        a.push(ids, grads, step=step)
        b.push(ids, grads, step=step)
    assert a.digest() == b.digest() and a.refused == 0


@given(st.lists(st.lists(st.integers(0, 2000), min_size=1, max_size=60, unique=True), max_size=30))
def test_the_bloom_filter_never_counts_an_id_less_than_it_was_seen(pulls):
    # small enough to share counters, large enough never to pass MAX_FILL (2,001 ids raise at most 6,003
    # counters), past which counts are halved and may fall below the sightings
    f = make_filter(AdmissionConfig(policy="bloom", threshold=255, bloom_bytes=16384))
    seen: dict[int, int] = {}
    for keys in pulls:
        ids = np.array(keys, np.int64)
        f.decide(ids, 0).commit()
        for k in keys:
            seen[k] = seen.get(k, 0) + 1
    if seen:
        ids = np.array(sorted(seen), np.int64)
        assert (f.estimate(ids) >= np.minimum([seen[i] for i in sorted(seen)], 255)).all()


@pytest.mark.parametrize("policy", ["count", "bloom"])
def test_a_decay_halves_every_count_and_forgets_the_ids_seen_once(policy):
    f = make_filter(AdmissionConfig(policy=policy, threshold=9, bloom_bytes=1 << 16))
    ids = np.arange(30, dtype=np.int64)
    for n in range(1, 6):
        f.decide(ids[:n * 6], 0).commit()  # ids 0-5 seen 5 times, 6-11 4 times, ... 24-29 once
    seen = np.repeat(np.arange(5, 0, -1), 6)
    before = f.nbytes
    f.decay()
    want = seen // 2
    got = f.estimate(ids) if policy == "bloom" else f.counts.get(ids).astype(np.int64)
    assert np.array_equal(got, want) if policy == "count" else (got >= want).all() and (got[24:] == 0).mean() > 0.9
    assert f.nbytes < before if policy == "count" else f.nbytes == before  # a bloom filter's bytes are fixed
    f.check()


def test_the_probability_filter_admits_one_minus_one_minus_p_to_the_n():
    p, n_ids = 0.3, 20_000
    t = table(policy="probability", probability=p)
    ids = np.arange(n_ids, dtype=np.int64)
    for n in range(1, 5):
        t.pull(ids, step=n)
        expected = 1 - (1 - p) ** n
        assert abs(len(t) / n_ids - expected) < 4 * np.sqrt(expected * (1 - expected) / n_ids)
    again = table(policy="probability", probability=p)
    for n in range(1, 5):
        again.pull(ids, step=n)
    assert again.digest() == t.digest()  # coins from (seed, step, id): the same run, the same rows


def test_a_refused_request_counts_no_sighting():
    s = store(limits=StoreLimits(max_rows=5), policy="count", threshold=2)
    ids = np.arange(8, dtype=np.int64)
    s.pull("user", ids, step=1)  # first sightings: no rows yet
    before = s.tables["user"].admission.state()
    with pytest.raises(StoreFull):
        s.pull("user", np.arange(20, dtype=np.int64), step=2)  # 8 admitted: past max_rows, refused whole
    after = s.tables["user"].admission.state()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert len(s.tables["user"]) == 0


@pytest.mark.parametrize("policy", ["count", "bloom", "probability"])
def test_counters_survive_a_checkpoint_and_a_reshard(tmp_path, policy):
    saved = [store(s, 2, policy=policy, threshold=3, bloom_bytes=32768) for s in range(2)]
    rng = np.random.default_rng(4)
    ids = rng.integers(-2**63, 2**63 - 1, 3000, dtype=np.int64)
    for step in (1, 2):
        for s in saved:
            mine = ids[route(ids, 2) == s.shard]
            s.pull("user", mine, step=step)
            s.pull("item", mine[:100], step=step)
    for s in saved:
        s.save(str(tmp_path), 2)
    write.commit(layout.step_dir(tmp_path, 2), 2, 2)
    loaded = [store(s, 3, policy=policy, threshold=3, bloom_bytes=32768) for s in range(3)]
    for s in loaded:
        s.load(str(layout.step_dir(tmp_path, 2)))
        s.check()
    # the third sighting admits exactly what it would have admitted without the checkpoint
    want, got = np.zeros(len(ids), bool), np.zeros(len(ids), bool)
    for s in saved:
        mine = route(ids, 2) == s.shard
        want[mine] = s.pull("user", ids[mine], step=3).any(axis=1)
    for s in loaded:
        mine = route(ids, 3) == s.shard
        got[mine] = s.pull("user", ids[mine], step=3).any(axis=1)
    assert want.all() if policy != "probability" else 0 < want.sum() < len(ids)
    assert np.array_equal(got, want)


def saved_store(tmp_path, **admission):
    s = store(**admission)
    s.pull("user", np.arange(50, dtype=np.int64), step=1)
    s.save(str(tmp_path), 1)
    write.commit(layout.step_dir(tmp_path, 1), 1, 1)
    return layout.step_dir(tmp_path, 1)


def test_an_edited_admission_file_is_refused_and_changes_nothing(tmp_path):
    path = saved_store(tmp_path, policy="count", threshold=3)
    target = path / "shard-00000-of-00001" / "user.admission.counts.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.write_bytes(bytes(data))
    s = store(policy="count", threshold=3)
    s.pull("user", np.array([1000], np.int64), step=1)
    before = s.tables["user"].admission.state()
    with pytest.raises(ValueError, match="user.admission.counts.npy"):
        s.load(str(path))
    assert np.array_equal(s.tables["user"].admission.state()["ids"], before["ids"])


def test_counters_of_another_policy_do_not_carry_over(tmp_path):
    path = saved_store(tmp_path, policy="count", threshold=3)
    s = store(policy="bloom", threshold=3)
    s.load(str(path))
    assert not s.tables["user"].admission.state()["counters"].any()
    with pytest.raises(ValueError, match="bloom_bytes = 4096"):
        store(policy="bloom", threshold=3, bloom_bytes=8192).load(str(saved_store(tmp_path / "b", policy="bloom",
                                                                                   bloom_bytes=4096)))

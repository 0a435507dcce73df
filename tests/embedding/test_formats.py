"""Row formats (embedding/formats): values stored as fp16, bf16 or int8 with a per-row scale,
optimizer state float32. Each encoder against a slow reference, bit for bit; stochastic
rounding unbiased and keyed by (id, step); tables, pushes, checks, checkpoints and the disk
tier through every format."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cardinal.checkpoint import layout, write
from cardinal.embedding import EmbeddingTable, TableConfig, formats, segment_sum, unique_inverse
from cardinal.embedding.formats.rounding import INIT_STEP, bits
from cardinal.embedding.hashing import init_rows
from cardinal.embedding.table import NonFiniteUpdate
from cardinal.optim import make_optimizer
from cardinal.ps import ShardStore, StoreConfig, StoreLimits
from cardinal.recipe import load_dict
from cardinal.recipe.compression import STORAGE
from cardinal.recipe.eviction import EvictionConfig
from helpers.resharded import pulled_resharded

CODED = ("fp16", "bf16", "int8")


def noise(ids, step, dim):
    out = np.empty((len(ids), dim), np.uint64)
    bits(ids, np.uint32(step), dim, out)
    return out


def uniform(ids, step, dim):
    return ((noise(ids, step, dim) >> np.uint64(40)).astype(np.float64) / 2**24).astype(np.float32)


def ref_encode(name, values, ids, step):
    """The stored words of ``values`` (n, dim), one value at a time from the rounding rules."""
    n, dim = values.shape
    fmt = formats.get(name)
    out = np.zeros((n, fmt.value_words(dim)), np.float32)
    if name == "bf16":
        b = values.view(np.uint32).astype(np.uint64)
        h = ((b + (noise(ids, step, dim) & np.uint64(0xFFFF))) >> np.uint64(16)).astype(np.uint16)
        h[np.isnan(values)] = 0x7FC0
        out.view(np.uint16)[:, :dim] = h
    elif name == "fp16":  # on the bits: 13 random bits added below a normal half's, truncated; steps of 2**-24 below
        r, u = noise(ids, step, dim), uniform(ids, step, dim)
        for i in range(n):
            for j in range(dim):
                b = int(values[i:i + 1, j].view(np.uint32)[0])
                sign, mag = (b >> 16) & 0x8000, b & 0x7FFFFFFF
                if mag > 0x7F800000:
                    h = 0x7E00
                elif mag >= 0x38800000:
                    h = sign | min((mag - (112 << 23) + (int(r[i, j]) & 0x1FFF)) >> 13, 0x7C00)
                else:
                    x = np.float32(abs(values[i, j])) * np.float32(2**24)
                    h = sign | int(np.floor(np.float32(x + u[i, j])))
                out.view(np.uint16)[i, j] = h
    else:
        u = uniform(ids, step, dim)
        for i in range(n):
            m = np.float32(np.abs(values[i]).max())
            s = np.float32(m / np.float32(127))
            s = np.float32(1e-45) if m > 0 and s == 0 else s
            out[i, 0] = s
            if s > 0:
                q = np.clip(np.floor(values[i] / s + u[i]), -127, 127)
                out.view(np.int8)[i, 4:4 + dim] = q.astype(np.int8)
    return out


def encode(name, values, ids, step):
    fmt = formats.get(name)
    out = np.zeros((len(values), fmt.value_words(values.shape[1])), np.float32)
    fmt.encode(values, ids, step, out, np.arange(len(values), dtype=np.int64))
    return out


def decode(name, data, dim):
    out = np.empty((len(data), dim), np.float32)
    formats.get(name).decode(data, np.arange(len(data), dtype=np.int64), dim, out)
    return out


finite32 = st.floats(-1e4, 1e4, width=32, allow_subnormal=True)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(CODED), st.integers(1, 9), st.integers(1, 6), st.integers(0, 2**32 - 1), st.data())
def test_each_encoder_is_its_reference_bit_for_bit(name, n, dim, step, data):
    values = np.array(data.draw(st.lists(finite32, min_size=n * dim, max_size=n * dim)), np.float32).reshape(n, dim)
    ids = np.array(data.draw(st.lists(st.integers(-2**63, 2**63 - 1), min_size=n, max_size=n)), np.int64)
    got = encode(name, values, ids, step)
    assert got.tobytes() == ref_encode(name, values, ids, step).tobytes()
    decoded = decode(name, got, dim)
    if name == "fp16":  # each value becomes one of the two halves around it
        near = values.astype(np.float16)
        other = np.nextafter(near, np.where(near.astype(np.float32) < values, np.float16(np.inf), np.float16(-np.inf)))
        assert ((decoded == near.astype(np.float32)) | (decoded == other.astype(np.float32))).all()
    elif name == "bf16":  # ... of the two bf16 values around it
        low = values.view(np.uint32) & np.uint32(0xFFFF0000)
        assert ((decoded.view(np.uint32) == low) | (decoded.view(np.uint32) == low + np.uint32(0x10000))).all()


@pytest.mark.parametrize("name, bound", [("fp16", 2**-10), ("bf16", 2**-7), ("int8", 1 / 127)])
def test_a_decoded_value_is_within_one_step_and_exact_values_stay(name, bound):
    rng = np.random.default_rng(0)
    values = (rng.normal(size=(500, 16)) * rng.lognormal(size=(500, 1))).astype(np.float32)
    ids = np.arange(500, dtype=np.int64)
    got = decode(name, encode(name, values, ids, 3), 16)
    scale = np.abs(values).max(axis=1, keepdims=True) if name == "int8" else np.abs(values)
    assert (np.abs(got - values) <= bound * scale + 1e-30).all()
    again = encode(name, got, ids, 4)  # a stored value is encoded as itself (fp16, bf16); int8 within a step
    if name == "int8":
        assert np.allclose(decode(name, again, 16), got, atol=float(np.abs(values).max()) / 127 * 1.01)
    else:
        assert again.tobytes() == encode(name, got, ids, 3).tobytes()


@pytest.mark.parametrize("name", CODED)
def test_stochastic_rounding_is_unbiased_and_small_updates_add_up(name):
    x = np.full((4000, 2), 0.30007, np.float32)
    x[:, 1] = -0.7  # int8: the row's scale is 0.7 / 127, so 0.30007 sits between two steps
    ids = np.arange(4000, dtype=np.int64)
    mean = decode(name, encode(name, x, ids, 9), 2)[:, 0].mean()
    step = {"fp16": 2**-12, "bf16": 2**-9, "int8": 0.7 / 127}[name]
    assert abs(mean - 0.30007) < step / 20  # nearest rounding is off by up to half a step
    row = np.array([[0.25, -0.7]], np.float32)
    for s in range(200):  # 200 updates of a tenth of a step each: nearest rounding would never move
        row = decode(name, encode(name, row + np.float32([[step / 10, 0]]), np.array([5]), s), 2)
    assert abs(row[0, 0] - (0.25 + 20 * step)) < 6 * step


def ref_decode(name, words, dim):
    """(n, dim) float32 values of stored words (n, value_words), from the layouts."""
    if name == "bf16":
        return (words.view(np.uint16)[:, :dim].astype(np.uint32) << 16).view(np.float32)
    if name == "fp16":
        return words.view(np.float16)[:, :dim].astype(np.float32)
    return words.view(np.int8)[:, 4:4 + dim].astype(np.float32) * words[:, :1]


def expected_push(table, ids, g, step):
    """What a push must leave: each row decoded (or made: init values, state), the optimizer's
    float32 kernel run on the working rows, values encoded at ``step``, state as it is."""
    name, dim, opt = table.format.name, table.dim, table.optimizer
    vw = table.format.value_words(dim)
    unique, inverse = unique_inverse(ids)
    summed = segment_sum(g, inverse, len(unique))
    before = table.export()
    at = {int(i): k for k, i in enumerate(before["ids"])}
    work = np.zeros((len(unique), dim + opt.state_width(dim)), np.float32)
    for k, id_ in enumerate(unique):
        if int(id_) in at:
            row = before["data"][at[int(id_)]]
            work[k, :dim], work[k, dim:] = ref_decode(name, row[None, :vw], dim)[0], row[vw:]
        else:
            init_rows(unique, work, k, k + 1, dim, np.int64(table.config.seed), np.float32(table.config.init_scale))
            opt.init_state(work, k, k + 1, dim)
    opt.apply(work, np.arange(len(unique), dtype=np.int64), summed, dim)
    return unique, np.hstack([ref_encode(name, work[:, :dim].copy(), unique, step), work[:, dim:]])


def stored(table, ids):
    e = table.export()
    at = {int(i): k for k, i in enumerate(e["ids"])}
    return e["data"][[at[int(i)] for i in ids]]


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adam", "sgd"])
@pytest.mark.parametrize("name", CODED)
def test_a_coded_table_updates_decoded_rows_and_stores_them_encoded(name, optimizer):
    table = EmbeddingTable(TableConfig("t", 6, seed=3, storage=name), make_optimizer({"name": optimizer, "lr": 0.2}))
    rng = np.random.default_rng(1)
    pulled = np.array([7, -3, 2**40, 11], np.int64)
    got = table.pull(pulled, step=1)
    fresh = np.zeros((4, 6), np.float32)
    init_rows(pulled, fresh, 0, 4, 6, np.int64(3), np.float32(0.01))
    made = ref_encode(name, fresh, pulled, INIT_STEP)  # a pulled row starts as its init values, encoded
    assert stored(table, pulled)[:, :made.shape[1]].tobytes() == made.tobytes()
    assert np.array_equal(got, ref_decode(name, made, 6))
    for step in (1, 2, 3):
        pushed = np.array([7, 2**40, 7, 11, 5 + step, -3], np.int64)  # a duplicate, and a new id
        g = rng.normal(size=(6, 6)).astype(np.float32)
        ids, want = expected_push(table, pushed, g, step)
        table.push(pushed, g, step=step)
        assert stored(table, ids).tobytes() == want.tobytes()
    table.check()


def test_int8_words_that_look_like_nan_are_finite_rows():
    """Packed int8 values read as a float32 word can be a NaN pattern (0x7F in the high byte): the
    checks decode, they never read stored words as floats."""
    table = EmbeddingTable(TableConfig("t", 4, storage="int8"), make_optimizer({"name": "sgd", "lr": 1.0}))
    table.pull(np.array([1], np.int64), step=1)
    table.push(np.array([1], np.int64), np.array([[0.0, 0.0, 0.5, -1.0]], np.float32), step=1)
    word = table.storage.columns().data[0, 1:2]
    assert np.isnan(word).all()  # q = [?, ?, -64, 127]: bytes 0x7F 0xC0.. on top
    table.check()
    assert formats.get("int8").all_finite(table.storage.columns().data[:1], 4)


@pytest.mark.parametrize("name", CODED)
def test_a_push_that_would_store_a_non_finite_value_changes_nothing(name):
    table = EmbeddingTable(TableConfig("t", 4, storage=name), make_optimizer({"name": "sgd", "lr": 1.0}))
    ids = np.arange(10, dtype=np.int64)
    table.pull(ids, step=1)
    before = table.digest()
    big = 1e5 if name == "fp16" else 3e38  # fp16 overflows past 65504; the others past float32's end (twice)
    g = np.zeros((12, 4), np.float32)
    g[3, 1] = g[11, 1] = -big
    with pytest.raises(NonFiniteUpdate, match="id 3"):
        table.push(np.r_[np.arange(11), 3], g, step=2)  # id 10 is new: not made either
    assert table.digest() == before and len(table) == 10
    table.check()


@pytest.mark.parametrize("name", CODED)
def test_rows_take_fewer_bytes_and_the_budget_counts_them(name):
    coded = EmbeddingTable(TableConfig("t", 64, storage=name), make_optimizer({"name": "rowwise_adagrad"}))
    plain = EmbeddingTable(TableConfig("t", 64), make_optimizer({"name": "rowwise_adagrad"}))
    ids = np.arange(5000, dtype=np.int64)
    coded.pull(ids, step=1)
    plain.pull(ids, step=1)
    ratio = (plain.storage.nbytes - coded.storage.nbytes) / 5000 / (64 * 4)  # value bytes saved per value byte
    assert ratio == pytest.approx({"fp16": 0.5, "bf16": 0.5, "int8": 1 - 68 / 256}[name])
    assert coded.nbytes < plain.nbytes


@pytest.mark.parametrize("name", CODED)
def test_a_checkpoint_keeps_the_stored_form_reshards_and_refuses_another_format(name, tmp_path):
    def store(fmt, shard=0, n=1):
        return ShardStore(StoreConfig((TableConfig("t", 5, storage=fmt),), {"name": "adagrad", "lr": 0.1}), shard, n)
    s = store(name)
    rng = np.random.default_rng(2)
    for step in range(1, 6):
        ids = rng.integers(0, 300, 400).astype(np.int64)
        rows = s.pull("t", ids, step=step)
        s.push("t", ids, 0.3 * rows + rng.normal(size=rows.shape).astype(np.float32), step=step)
    s.save(str(tmp_path / "ck"), 5)
    write.commit(layout.step_dir(tmp_path / "ck", 5), 5, 1)
    ids = np.arange(300, dtype=np.int64)
    want = s.pull("t", ids, create=False)
    for n in (1, 2):
        got, shards = pulled_resharded(layout.step_dir(tmp_path / "ck", 5), lambda k, n: store(name, k, n), ids, n)
        assert got.tobytes() == want.tobytes()
        if n == 1:
            assert shards[0].tables["t"].digest() == s.tables["t"].digest()
    other = store("fp32" if name != "fp32" else "bf16")
    with pytest.raises(ValueError, match=f"stores its values as {name}, the store as fp32"):
        other.load(str(layout.step_dir(tmp_path / "ck", 5)))


@pytest.mark.parametrize("name", ["bf16", "int8"])
def test_a_coded_table_with_a_disk_tier_is_bitwise_the_one_all_in_ram(name, tmp_path):
    config = StoreConfig((TableConfig("t", 8, storage=name),), {"name": "rowwise_adagrad", "lr": 0.1}, {},
                         EvictionConfig())
    ram = ShardStore(config)
    tiered = ShardStore(config, limits=StoreLimits(memory_budget=60_000, disk_budget=10**9),
                        tier_dir=str(tmp_path / "tiers"))
    try:
        rng = np.random.default_rng(4)
        for step in range(1, 25):
            ids = rng.zipf(1.2, 1500).astype(np.int64)
            for s in (ram, tiered):
                rows = s.pull("t", ids, step=step)
                s.push("t", ids, (0.1 * rows + 0.01).astype(np.float32), step=step)
        assert tiered.stats()["disk_bytes"] > 0 and tiered.tables["t"].digest() == ram.tables["t"].digest()
        tiered.check()
    finally:
        tiered.close()


def test_recipe_storage_is_checked_and_baseline_tables_stay_exact():
    from cardinal.train.tables import store_config

    assert STORAGE == tuple(formats.FORMATS)
    recipe = load_dict({"compression": {"storage": "int8", "table_storage": {"lr_emb": "bf16"}},
                        "train": {"baseline": "lr"}})
    assert {t.name: t.storage for t in store_config(recipe).tables} == {"emb": "int8", "lr_emb": "bf16"}
    recipe = load_dict({"compression": {"storage": "bf16"}, "train": {"baseline": "lr"}})
    assert {t.name: t.storage for t in store_config(recipe).tables} == {"emb": "bf16", "lr_emb": "fp32"}
    with pytest.raises(ValueError, match="compression.storage must be one of"):
        load_dict({"compression": {"storage": "int4"}})
    with pytest.raises(ValueError, match="compression.table_storage.emb must be one of"):
        load_dict({"compression": {"table_storage": {"emb": "fp8"}}})
    with pytest.raises(ValueError, match="compression.table_storage names 'user'"):
        store_config(load_dict({"compression": {"table_storage": {"user": "fp16"}}}))


def test_the_l2_eviction_score_reads_decoded_values():
    from cardinal.embedding.eviction import L2

    table = EmbeddingTable(TableConfig("t", 6, storage="int8"), make_optimizer({"name": "sgd", "lr": 1.0}))
    ids = np.arange(50, dtype=np.int64)
    table.pull(ids, step=1)
    table.push(ids, np.random.default_rng(5).normal(size=(50, 6)).astype(np.float32), step=1)
    cols, n = table.storage.columns(), table.storage.size
    want = np.linalg.norm(table.pull(cols.ids[:n], create=False).astype(np.float64), axis=1)
    assert np.allclose(L2().score(cols, n, table.values, 2), want)

"""Counted updates (a worker cache's accumulated gradients): each optimizer's compiled kernel
against its numpy reference, counts of all ones bitwise today's update, and the counted forms
against what k separate updates do where they should agree."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.reference import init_row
from cardinal.optim import make_optimizer
from cardinal.optim.reference import counted_update_row, initial_state
from test_optim import CASES, SPECS

NO_L2 = {name: {**spec, "l2": 0.0} for name, spec in SPECS.items()}


def make_table(name, spec=None, dim=4, wide=0):
    spec = SPECS[name] if spec is None else spec
    return EmbeddingTable(TableConfig("t", dim, init_scale=0.5, seed=3, wide=wide), make_optimizer({"name": name, **spec}))


def random_counted_pushes(rng, n_pushes=6, dim=4, id_range=12):
    pushes = []
    for _ in range(n_pushes):
        n = int(rng.integers(1, 20))
        ids = rng.integers(-id_range, id_range, n).astype(np.int64)
        pushes.append((ids, rng.standard_normal((n, dim)).astype(np.float32), rng.integers(1, 6, n).astype(np.int32)))
    return pushes


@pytest.mark.parametrize("spec", [SPECS, NO_L2], ids=["l2", "no-l2"])
@pytest.mark.parametrize("name, wide", CASES)
@given(seed=st.integers(0, 2**32 - 1))
def test_counted_kernel_matches_numpy_reference(name, wide, spec, seed):
    rng = np.random.default_rng(seed)
    dim = 4
    pushes = random_counted_pushes(rng, dim=dim)
    table = make_table(name, spec[name], dim, wide)
    for step, (ids, grads, counts) in enumerate(pushes, 1):
        table.push(ids, grads, step=step, counts=counts)
    cfg, ref = table.optimizer.config, {}
    for ids, grads, counts in pushes:
        summed, count = {}, {}
        for k, g, c in zip(ids.tolist(), grads, counts.tolist()):  # duplicates: sum, and the largest count
            summed[k] = summed[k] + g if k in summed else g.copy()
            count[k] = max(count.get(k, 0), c)
        for k, g in summed.items():
            if k not in ref:
                ref[k] = np.concatenate([init_row(3, k, dim, 0.5), initial_state(name, cfg, dim, wide)])
            counted_update_row(name, cfg, ref[k], g, dim, count[k], wide)
    got = table.export()
    assert sorted(got["ids"].tolist()) == sorted(ref)
    for k, row in zip(got["ids"].tolist(), got["data"]):
        np.testing.assert_allclose(row, ref[k], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("spec", [SPECS, NO_L2], ids=["l2", "no-l2"])
@pytest.mark.parametrize("name, wide", CASES)
def test_counts_of_all_ones_are_bitwise_the_uncounted_update(name, wide, spec, rng):
    plain, ones = make_table(name, spec[name], wide=wide), make_table(name, spec[name], wide=wide)
    for step, (ids, grads, _) in enumerate(random_counted_pushes(rng, n_pushes=10, id_range=200), 1):
        plain.push(ids, grads, step=step)
        ones.push(ids, grads, step=step, counts=np.ones(len(ids), np.int32))
    a, b = plain.export(), ones.export()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert plain.digest() == ones.digest()


def test_sgd_one_counted_push_equals_k_pushes_of_its_parts(rng):
    ids = np.arange(-6, 6, dtype=np.int64)
    k = rng.integers(1, 6, len(ids)).astype(np.int32)
    parts = [rng.standard_normal((len(ids), 4)).astype(np.float32) for _ in range(5)]
    apart, counted = make_table("sgd", NO_L2["sgd"]), make_table("sgd", NO_L2["sgd"])
    summed = np.zeros((len(ids), 4), np.float32)
    for step, g in enumerate(parts, 1):
        held = step <= k  # row i holds parts 1..k[i]
        apart.push(ids[held], g[held], step=step)
        summed[held] += g[held]
    counted.push(ids, summed, step=1, counts=k)
    np.testing.assert_allclose(counted.pull(ids, create=False), apart.pull(ids, create=False), rtol=1e-6, atol=1e-7)
    assert not np.array_equal(counted.pull(ids, create=False), make_table("sgd").pull(ids, create=False))


ADAPTIVE_STATE = {  # the state k equal updates leave exactly, as slices of [values | state]
    "adagrad": lambda dim: slice(dim, 2 * dim),
    "rowwise_adagrad": lambda dim: slice(dim, dim + 1),
    "adam": lambda dim: slice(dim, 3 * dim + 1),  # m, v and t
    "ftrl": lambda dim: slice(2 * dim, 3 * dim),  # n (z depends on the weights in between)
}


@pytest.mark.parametrize("name", sorted(ADAPTIVE_STATE))
def test_equal_parts_leave_the_state_of_k_separate_updates(name, rng):
    """Where the k parts are equal, the counted update's accumulators are those k updates leave:
    not those of one update of their sum (the bug counts exist to avoid)."""
    dim, ids = 4, np.arange(8, dtype=np.int64)
    k = np.array([1, 2, 3, 4, 5, 6, 7, 8], np.int32)
    part = rng.standard_normal((len(ids), dim)).astype(np.float32)
    apart, counted, summed = (make_table(name, NO_L2[name], dim) for _ in range(3))
    for step in range(1, k.max() + 1):
        held = step <= k
        apart.push(ids[held], part[held], step=step)
    counted.push(ids, part * k[:, None].astype(np.float32), step=1, counts=k)
    summed.push(ids, part * k[:, None].astype(np.float32), step=1)
    state = ADAPTIVE_STATE[name](dim)
    rows = {n: {i: r for i, r in zip(t.export()["ids"].tolist(), t.export()["data"])}
            for n, t in (("apart", apart), ("counted", counted), ("summed", summed))}
    for i in ids.tolist():
        np.testing.assert_allclose(rows["counted"][i][state], rows["apart"][i][state], rtol=1e-5, atol=1e-7)
    far = [i for i in ids.tolist() if k[i] > 1]
    assert all(not np.allclose(rows["summed"][i][state], rows["apart"][i][state], rtol=1e-3) for i in far)

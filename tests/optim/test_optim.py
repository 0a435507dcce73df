"""Sparse optimizers: against the numpy reference, against torch where they coincide, bitwise determinism."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.reference import init_row
from cardinal.optim import OPTIMIZERS, make_optimizer
from cardinal.optim.reference import initial_state, update_row

SPECS = {
    "sgd": {"lr": 0.1, "l2": 0.01},
    "adagrad": {"lr": 0.1, "initial_accumulator": 0.1, "l2": 0.01},
    "rowwise_adagrad": {"lr": 0.1, "initial_accumulator": 0.1, "l2": 0.01},
    "adam": {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "l2": 0.01},
    "ftrl": {"lr": 0.1, "beta": 1.0, "l1": 0.01, "l2": 0.1, "initial_accumulator": 0.1},
}


# every optimizer on plain rows, and row-wise Adagrad on rows whose last column is a wide part's weight
CASES = [(name, 0) for name in sorted(OPTIMIZERS)] + [("rowwise_adagrad", 1)]


def make_table(name, dim=4, seed=3, wide=0):
    return EmbeddingTable(TableConfig("t", dim, init_scale=0.5, seed=seed, wide=wide),
                          make_optimizer({"name": name, **SPECS[name]}))


def run_pushes(table, pushes):
    for step, (ids, grads) in enumerate(pushes, 1):
        table.push(ids, grads, step=step)


def random_pushes(rng, n_pushes=6, dim=4, id_range=12):
    return [(rng.integers(-id_range, id_range, rng.integers(1, 20)).astype(np.int64), None) for _ in range(n_pushes)], dim


def with_grads(rng, pushes, dim):
    return [(ids, rng.standard_normal((len(ids), dim)).astype(np.float32)) for ids, _ in pushes]


@pytest.mark.parametrize("name, wide", CASES)
@given(seed=st.integers(0, 2**32 - 1))
def test_matches_numpy_reference(name, wide, seed):
    rng = np.random.default_rng(seed)
    pushes, dim = random_pushes(rng)
    pushes = with_grads(rng, pushes, dim)
    table = make_table(name, dim, wide=wide)
    run_pushes(table, pushes)
    opt = table.optimizer
    ref = {}
    for ids, grads in pushes:
        summed = {}
        for k, g in zip(ids.tolist(), grads):  # duplicates summed in order of appearance
            summed[k] = summed[k] + g if k in summed else g.copy()
        for k, g in summed.items():
            if k not in ref:
                ref[k] = np.concatenate([init_row(3, k, dim, 0.5), initial_state(name, opt.config, dim, opt.wide)])
            update_row(name, opt.config, ref[k], g, dim, opt.wide)
    got = table.export()
    assert sorted(got["ids"].tolist()) == sorted(ref)
    for k, row in zip(got["ids"].tolist(), got["data"]):
        np.testing.assert_allclose(row, ref[k], rtol=2e-5, atol=1e-6)


TORCH = {
    "sgd": lambda p: torch.optim.SGD([p], lr=0.1, weight_decay=0.01),
    "adagrad": lambda p: torch.optim.Adagrad([p], lr=0.1, initial_accumulator_value=0.1, weight_decay=0.01, eps=1e-10),
    "adam": lambda p: torch.optim.Adam([p], lr=0.01, betas=(0.8, 0.99), weight_decay=0.01, eps=1e-8),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_matches_torch_when_every_row_is_pushed_every_step(name, rng):
    dim, ids = 5, np.arange(-8, 8, dtype=np.int64)
    table = make_table(name, dim)
    start = table.pull(ids, step=0)
    weight = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = TORCH[name](weight)
    for step in range(1, 9):
        grads = rng.standard_normal((len(ids), dim)).astype(np.float32)
        table.push(ids, grads, step=step)
        weight.grad = torch.from_numpy(grads)
        opt.step()
    np.testing.assert_allclose(table.pull(ids, create=False), weight.detach().numpy(), rtol=1e-5, atol=1e-7)


def test_rowwise_adagrad_is_adagrad_at_dim_1(rng):
    ids = np.arange(10, dtype=np.int64)
    a = EmbeddingTable(TableConfig("t", 1), make_optimizer({"name": "adagrad", "lr": 0.1}))
    b = EmbeddingTable(TableConfig("t", 1), make_optimizer({"name": "rowwise_adagrad", "lr": 0.1}))
    for step in range(5):
        g = rng.standard_normal((10, 1)).astype(np.float32)
        a.push(ids, g, step=step)
        b.push(ids, g, step=step)
    # the same math, associated differently (lr / (sqrt(s) + eps) * g): equal to float rounding
    np.testing.assert_allclose(a.pull(ids, create=False), b.pull(ids, create=False), rtol=1e-6)


@pytest.mark.parametrize("counted", [False, True])
def test_rowwise_wide_column_trains_as_a_row_of_its_own(counted, rng):
    """Values and wide weight in one row train bitwise as two tables would (TorchRec's layout: the
    first-order weights a table of dim 1), and a row without a wide part keeps fbgemm's one word."""
    ids = np.arange(-6, 6, dtype=np.int64)
    spec = {"name": "rowwise_adagrad", **SPECS["rowwise_adagrad"]}
    packed = EmbeddingTable(TableConfig("t", 5, wide=1), make_optimizer(spec))
    values = EmbeddingTable(TableConfig("t", 4), make_optimizer(spec))
    weight = EmbeddingTable(TableConfig("t", 1, first_column=4), make_optimizer(spec))
    for step in range(1, 6):
        g = rng.standard_normal((len(ids), 5)).astype(np.float32)
        counts = {"counts": rng.integers(1, 4, len(ids)).astype(np.int32)} if counted else {}
        packed.push(ids, g, step=step, **counts)
        values.push(ids, g[:, :4].copy(), step=step, **counts)
        weight.push(ids, g[:, 4:].copy(), step=step, **counts)
    rows = {n: dict(zip(t.export()["ids"].tolist(), t.export()["data"])) for n, t in
            (("packed", packed), ("values", values), ("weight", weight))}
    for i in ids.tolist():  # [v0..v3 w | s_values s_w] against [v0..v3 | s] and [w | s]
        expect = np.concatenate([rows["values"][i][:4], rows["weight"][i][:1], rows["values"][i][4:],
                                 rows["weight"][i][1:]])
        assert rows["packed"][i].tobytes() == expect.tobytes()
    assert values.optimizer.state_width(4) == 1 and "wide" not in values.optimizer.describe()
    assert packed.optimizer.state_width(5) == 2 and packed.optimizer.describe()["wide"] == 1


def test_adam_rows_not_pushed_do_not_decay(rng):
    table = make_table("adam")
    table.push(np.array([1, 2], np.int64), np.ones((2, 4), np.float32), step=1)
    before = table.pull(np.array([2], np.int64), create=False)
    for step in range(2, 6):
        table.push(np.array([1], np.int64), np.ones((1, 4), np.float32), step=step)
    np.testing.assert_array_equal(table.pull(np.array([2], np.int64), create=False), before)
    steps = table.export()["data"][:, -1]
    assert sorted(steps.tolist()) == [1.0, 5.0]  # per-row step counts


def test_ftrl_l1_gives_exact_zeros():
    table = EmbeddingTable(TableConfig("t", 4), make_optimizer({"name": "ftrl", "l1": 10.0}))
    table.push(np.array([5], np.int64), np.full((1, 4), 0.01, np.float32), step=1)
    assert (table.pull(np.array([5], np.int64), create=False) == 0).all()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_same_pushes_give_bitwise_identical_tables(name, rng):
    pushes, dim = random_pushes(rng, n_pushes=10, id_range=1000)
    pushes = with_grads(rng, pushes, dim)
    a, b = make_table(name, dim), make_table(name, dim)
    run_pushes(a, pushes)
    run_pushes(b, pushes)
    assert a.digest() == b.digest()
    ea, eb = a.export(), b.export()
    assert all(ea[k].tobytes() == eb[k].tobytes() for k in ea)


def test_bad_optimizer_specs_are_named():
    with pytest.raises(ValueError, match="unknown optimizer 'adamw'"):
        make_optimizer({"name": "adamw"})
    with pytest.raises(ValueError, match="no setting 'momentum'"):
        make_optimizer({"name": "sgd", "momentum": 0.9})
    with pytest.raises(ValueError, match="beta1"):
        make_optimizer({"name": "adam", "beta1": 1.0})
    with pytest.raises(ValueError, match="lr"):
        make_optimizer({"name": "sgd", "lr": float("nan")})


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_fresh_state_matched_to_fetched_values_steps_from_them(name):
    """A worker cache's copy of rows: values fetched, state fresh. After ``match_values`` a zero
    gradient leaves the values where they are, and a positive one moves each of them down."""
    opt = make_optimizer({"name": name, **SPECS[name], "l2": 0.0})
    dim, rng = 4, np.random.default_rng(0)
    values = rng.standard_normal((6, dim)).astype(np.float32)
    values[0] = 0.0
    for grad, check in ((0.0, lambda after: np.testing.assert_allclose(after, values, atol=1e-6)),
                        (0.5, lambda after: np.testing.assert_array_less(after, values))):
        data = np.zeros((6, dim + opt.state_width(dim)), np.float32)
        opt.init_state(data, 0, 6, dim)
        data[:, :dim] = values
        opt.match_values(data, dim)
        opt.apply(data, np.arange(6, dtype=np.int64), np.full((6, dim), grad, np.float32), dim)
        check(data[:, :dim])

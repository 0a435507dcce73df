"""The guarded optimizer kernels (``optim/guard.py``): the plain update bit for bit, and a
clean stop at the first row they make non-finite, with every changed row's copy kept."""

import numpy as np
import pytest

from cardinal.embedding import row_kernels as RK
from cardinal.optim import OPTIMIZERS, make_optimizer

DIM = 5
KINDS = sorted(OPTIMIZERS) + ["delta"]


def rows_and_grads(kind, rng, n=40):
    opt = make_optimizer({"name": "adam" if kind == "delta" else kind})
    data = rng.uniform(0.01, 1, (3 * n, DIM + opt.state_width(DIM))).astype(np.float32)  # state > 0: valid
    rows = rng.permutation(3 * n)[:n].astype(np.int64)
    grads = rng.standard_normal((n, DIM)).astype(np.float32)
    return opt, data, rows, grads


def update(kind, opt, data, rows, grads, backup=None):
    if kind == "delta":
        return RK.add_values(data, rows, grads, np.empty((0, 0), np.float32) if backup is None else backup)
    if backup is None:
        return opt.apply(data, rows, grads, DIM)
    return opt.apply_guarded(data, rows, grads, DIM, backup)


@pytest.mark.parametrize("kind", KINDS)
def test_guarded_update_is_the_plain_update_bitwise(kind, rng):
    opt, data, rows, grads = rows_and_grads(kind, rng)
    plain, guarded = data.copy(), data.copy()
    update(kind, opt, plain, rows, grads)
    backup = np.full((len(rows), data.shape[1]), np.nan, np.float32)
    assert update(kind, opt, guarded, rows, grads, backup) == -1
    assert plain.tobytes() == guarded.tobytes()
    assert backup.tobytes() == data[rows].tobytes()  # each row saved before it was changed


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [0, 17, 39])
def test_guarded_update_stops_at_the_first_non_finite_row(kind, bad, rng):
    opt, data, rows, grads = rows_and_grads(kind, rng)
    grads[bad, 3] = 3e38 if kind in ("delta", "sgd") else 1e30  # sgd / delta: the value; others: state
    grads[bad + 1:, :] = np.float32(np.inf)  # never reached: the kernel stops at ``bad``
    if kind == "sgd":
        opt = make_optimizer({"name": "sgd", "lr": 10.0})
    if kind == "delta":
        data[rows[bad], 3] = 2e38  # finite, and past float32 once the delta is added
    plain = data.copy()
    update(kind, opt, plain, rows[:bad], grads[:bad])
    got, backup = data.copy(), np.zeros((len(rows), data.shape[1]), np.float32)
    assert update(kind, opt, got, rows, grads, backup) == bad
    assert not np.isfinite(got[rows[bad]]).all()
    got_before = np.delete(got, rows[bad:], axis=0).tobytes()
    assert got_before == np.delete(plain, rows[bad:], axis=0).tobytes()  # rows before it updated as plain
    assert got[rows[bad + 1:]].tobytes() == data[rows[bad + 1:]].tobytes()  # rows after it untouched
    assert backup[:bad + 1].tobytes() == data[rows[:bad + 1]].tobytes()
    RK.restore_rows(got, rows, bad + 1, backup)
    assert got.tobytes() == data.tobytes()

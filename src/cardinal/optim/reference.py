"""Numpy references of the sparse optimizers: one row at a time, in float32, from the formulas.

``update_row`` is one ordinary update; ``counted_update_row`` one push of a row's ``k``
accumulated gradients (their sum ``g``), as each optimizer's module docstring writes it.
``wide``: the row's last columns that are a wide part's weights (``optim/base.py``): row-wise
Adagrad updates each as a row of its own; the other optimizers' state is per column already.
"""

import numpy as np

f32 = np.float32


def update_row(name: str, cfg, row: np.ndarray, g: np.ndarray, dim: int, wide: int = 0) -> None:
    """Apply one update to ``row`` = [values | state] in place."""
    w = row[:dim]
    if name == "sgd":
        w -= f32(cfg.lr) * (g + f32(cfg.l2) * w)
    elif name == "adagrad":
        g = g + f32(cfg.l2) * w
        s = row[dim:2 * dim]
        s += g * g
        w -= f32(cfg.lr) * (g / (np.sqrt(s) + f32(cfg.eps)))
    elif name == "rowwise_adagrad":
        _rowwise(cfg, row, g + f32(cfg.l2) * w, dim, wide, f32(1))
    elif name == "adam":
        m, v = row[dim:2 * dim], row[2 * dim:3 * dim]
        row[3 * dim] += 1
        t = float(row[3 * dim])
        g = g + f32(cfg.l2) * w
        m[:] = f32(cfg.beta1) * m + (1 - f32(cfg.beta1)) * g
        v[:] = f32(cfg.beta2) * v + (1 - f32(cfg.beta2)) * g * g
        step = f32(cfg.lr / (1 - cfg.beta1 ** t))
        w -= step * (m / (np.sqrt(v) / f32(np.sqrt(1 - cfg.beta2 ** t)) + f32(cfg.eps)))
    elif name == "ftrl":
        _ftrl(cfg, row, w, g, dim, g * g)
    else:
        raise ValueError(name)


def _ftrl(cfg, row: np.ndarray, w: np.ndarray, g: np.ndarray, dim: int, n_add: np.ndarray) -> None:
    """FTRL-proximal on ``row``: z takes the gradient ``g``, n grows by ``n_add``."""
    z, n = row[dim:2 * dim], row[2 * dim:3 * dim]
    n_new = n + n_add
    z += g - (np.sqrt(n_new) - np.sqrt(n)) / f32(cfg.lr) * w
    n[:] = n_new
    denom = (f32(cfg.beta) + np.sqrt(n)) / f32(cfg.lr) + f32(cfg.l2)
    w[:] = np.where(np.abs(z) <= f32(cfg.l1), f32(0), -(z - np.sign(z) * f32(cfg.l1)) / denom)


def _rowwise(cfg, row: np.ndarray, g: np.ndarray, dim: int, wide: int, k) -> None:
    """Row-wise Adagrad on ``row``, ``g`` (l2 included) the sum of ``k`` updates: one accumulator
    over the dim - wide values (row[dim]), then one for each wide column (row[dim + 1 + t])."""
    n = dim - wide
    groups = [(slice(0, n), dim)] + [(slice(n + t, n + t + 1), dim + 1 + t) for t in range(wide)]
    for cols, at in groups:
        mean = g[cols] / k
        row[at] += k * f32(np.sum(mean * mean, dtype=np.float32) / f32(cols.stop - cols.start))
        row[cols] -= (f32(cfg.lr) / (np.sqrt(row[at]) + f32(cfg.eps))) * g[cols]


def counted_update_row(name: str, cfg, row: np.ndarray, g: np.ndarray, dim: int, k: int, wide: int = 0) -> None:
    """Apply one counted update (``k`` updates summed in ``g``) to ``row`` = [values | state] in place."""
    w, k = row[:dim], f32(k)
    if name != "ftrl":
        g = g + k * f32(cfg.l2) * w  # k steps' worth of lazy L2
    mean = g / k
    if name == "sgd":
        w -= f32(cfg.lr) * g
    elif name == "adagrad":
        s = row[dim:2 * dim]
        s += k * mean * mean
        w -= f32(cfg.lr) * g / (np.sqrt(s) + f32(cfg.eps))
    elif name == "rowwise_adagrad":
        _rowwise(cfg, row, g, dim, wide, k)
    elif name == "adam":
        m, v = row[dim:2 * dim], row[2 * dim:3 * dim]
        row[3 * dim] += k
        t = float(row[3 * dim])
        b1k, b2k = f32(cfg.beta1 ** float(k)), f32(cfg.beta2 ** float(k))
        m[:] = b1k * m + (1 - b1k) * mean
        v[:] = b2k * v + (1 - b2k) * mean * mean
        step = f32(float(k) * cfg.lr / (1 - cfg.beta1 ** t))
        w -= step * (m / (np.sqrt(v) / f32(np.sqrt(1 - cfg.beta2 ** t)) + f32(cfg.eps)))
    elif name == "ftrl":
        _ftrl(cfg, row, w, g, dim, k * mean * mean)
    else:
        raise ValueError(name)


def initial_state(name: str, cfg, dim: int, wide: int = 0) -> np.ndarray:
    width = {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1 + wide, "adam": 2 * dim + 1, "ftrl": 2 * dim}[name]
    state = np.zeros(width, np.float32)
    if name in ("adagrad", "rowwise_adagrad"):
        state[:] = cfg.initial_accumulator
    if name == "ftrl":
        state[dim:] = cfg.initial_accumulator
    return state

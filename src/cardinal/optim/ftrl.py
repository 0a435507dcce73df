"""FTRL-proximal (McMahan et al. 2013, per-coordinate learning rates, lr_power = -1/2).

Per element, with accumulators z and n:
    n' = n + g^2;  sigma = (sqrt(n') - sqrt(n)) / lr;  z += g - sigma * w;  n = n'
    w = 0                                          if |z| <= l1
    w = -(z - sign(z) l1) / ((beta + sqrt(n)) / lr + l2)   otherwise
State: [z (dim) | n (dim)]. l1 > 0 drives rarely useful coordinates to exactly zero.

Counted (``counts``, see ``base.py``): ``g`` sums a row's ``k`` pending gradients. z is linear
in the gradients, so it takes the sum as one update; n would grow by (sum g)^2, up to k times
the parts' sum of squares, so it grows by what k updates of the mean gradient add:

    n' = n + k (g / k)^2;  sigma = (sqrt(n') - sqrt(n)) / lr;  z += g - sigma * w;  n = n'

Exact in z and n when the parts are equal and w did not move in between; k separate updates
would each have subtracted sigma_i w_i with the w of their time. The weight is then recomputed
from z and n as always (l1 and l2 act on the result, not per update, so k does not scale them).
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.adagrad import fill_state
from cardinal.optim.base import OptimizerConfig, SparseOptimizer


@dataclass(frozen=True)
class FTRLConfig(OptimizerConfig):
    lr: float = 0.05
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0
    initial_accumulator: float = 0.1


@nb.njit(nogil=True, cache=True)
def ftrl_kernel(data, rows, grads, dim, lr, beta, l1, l2):
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(dim):
            w = data[r, j]
            g = grads[i, j]
            n = data[r, 2 * dim + j]
            n_new = n + g * g
            sigma = (np.sqrt(n_new) - np.sqrt(n)) / lr
            z = data[r, dim + j] + g - sigma * w
            data[r, dim + j] = z
            data[r, 2 * dim + j] = n_new
            if abs(z) <= l1:
                data[r, j] = np.float32(0.0)
            else:
                data[r, j] = -(z - np.sign(z) * l1) / ((beta + np.sqrt(n_new)) / lr + l2)


@nb.njit(nogil=True, cache=True)
def ftrl_counted_kernel(data, rows, grads, counts, dim, lr, beta, l1, l2):
    """counts,  # (u,) int32 >= 1"""
    for i in range(rows.shape[0]):
        r = rows[i]
        k = np.float32(counts[i])
        for j in range(dim):
            w = data[r, j]
            g = grads[i, j]
            mean = g / k
            n = data[r, 2 * dim + j]
            n_new = n + k * (mean * mean)
            sigma = (np.sqrt(n_new) - np.sqrt(n)) / lr
            z = data[r, dim + j] + g - sigma * w
            data[r, dim + j] = z
            data[r, 2 * dim + j] = n_new
            if abs(z) <= l1:
                data[r, j] = np.float32(0.0)
            else:
                data[r, j] = -(z - np.sign(z) * l1) / ((beta + np.sqrt(n_new)) / lr + l2)


class FTRL(SparseOptimizer):
    name = "ftrl"
    Config = FTRLConfig

    def state_width(self, dim: int) -> int:
        return 2 * dim

    def init_state(self, data, start, stop, dim):
        fill_state(data, start, stop, 2 * dim, 3 * dim, np.float32(self.config.initial_accumulator))

    def match_values(self, data, dim):
        """z from w and n, the inverse of the weight's formula: w = 0 gives z = 0 (|z| <= l1)."""
        lr, beta, l1, l2 = self.f32("lr", "beta", "l1", "l2")
        w, n = data[:, :dim], data[:, 2 * dim:3 * dim]
        data[:, dim:2 * dim] = -w * ((beta + np.sqrt(n)) / lr + l2) - np.sign(w) * l1

    def scaled(self, factor: float) -> "SparseOptimizer":
        """FTRL recomputes each weight from its accumulators with the lr, so a smaller lr for one
        push would rescale the whole weight, not that push's step: no staleness compensation."""
        raise ValueError("consistency.async.compensation = 'lr' does not apply to FTRL (its lr rescales the whole "
                         "weight); use 'none' with FTRL")

    def kernel(self, dim, counted=False):
        return ftrl_counted_kernel if counted else ftrl_kernel, self.f32("lr", "beta", "l1", "l2")

"""Plain SGD on the pushed rows: w -= lr * (g + l2 * w) (``l2``: see ``optim/l2.py``).

Counted (``counts``, see ``base.py``): a row's ``k`` accumulated gradients, summed to ``g``:

    w -= lr * (g + k * l2 * w)

Exact without l2: k pushes of the parts move w by lr times their sum, whatever their order,
so accumulating changes nothing but float rounding. With l2 each of the k steps would have
decayed w by (1 - lr l2); the counted update decays it by (1 - k lr l2), the first-order
term of (1 - lr l2)^k, and measures the decay from the row's value before the k steps.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.base import OptimizerConfig, SparseOptimizer
from cardinal.optim.l2 import variants


@dataclass(frozen=True)
class SGDConfig(OptimizerConfig):
    lr: float = 0.01
    l2: float = 0.0


def _sgd(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def sgd_kernel(data, rows, grads, dim, lr, l2):
        for i in range(rows.shape[0]):
            r = rows[i]
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + l2 * w if with_l2 else grads[i, j]
                data[r, j] = w - lr * g
    return sgd_kernel


def _sgd_counted(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def sgd_counted_kernel(data, rows, grads, counts, dim, lr, l2):
        """counts,  # (u,) int32 >= 1"""
        for i in range(rows.shape[0]):
            r = rows[i]
            kl2 = np.float32(counts[i]) * l2
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + kl2 * w if with_l2 else grads[i, j]
                data[r, j] = w - lr * g
    return sgd_counted_kernel


sgd_kernel = variants(_sgd)
sgd_counted_kernel = variants(_sgd_counted)


class SGD(SparseOptimizer):
    name = "sgd"
    Config = SGDConfig

    def state_width(self, dim: int) -> int:
        return 0

    def kernel(self, dim, counted=False):
        return (sgd_counted_kernel if counted else sgd_kernel)(self.config.l2), self.f32("lr", "l2")

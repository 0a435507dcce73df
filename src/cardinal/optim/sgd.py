"""Plain SGD on the pushed rows: w -= lr * (g + l2 * w) (``l2``: see ``optim/l2.py``)."""

from dataclasses import dataclass

import numba as nb

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


sgd_kernel = variants(_sgd)


class SGD(SparseOptimizer):
    name = "sgd"
    Config = SGDConfig

    def state_width(self, dim: int) -> int:
        return 0

    def apply(self, data, rows, grads, dim):
        sgd_kernel(self.config.l2)(data, rows, grads, dim, *self.f32("lr", "l2"))

"""Plain SGD on the pushed rows: w -= lr * (g + weight_decay * w)."""

from dataclasses import dataclass

import numba as nb

from cardinal.optim.base import OptimizerConfig, SparseOptimizer


@dataclass(frozen=True)
class SGDConfig(OptimizerConfig):
    lr: float = 0.01
    weight_decay: float = 0.0


@nb.njit(nogil=True, cache=True)
def sgd_kernel(data, rows, grads, dim, lr, wd):
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(dim):
            w = data[r, j]
            data[r, j] = w - lr * (grads[i, j] + wd * w)


class SGD(SparseOptimizer):
    name = "sgd"
    Config = SGDConfig

    def state_width(self, dim: int) -> int:
        return 0

    def apply(self, data, rows, grads, dim):
        sgd_kernel(data, rows, grads, dim, *self.f32("lr", "weight_decay"))

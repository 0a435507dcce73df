"""Row-wise Adagrad (as fbgemm's ``EXACT_ROWWISE_ADAGRAD``): one accumulator per row.

    g += weight_decay * w;  s += mean(g * g);  w -= lr * g / (sqrt(s) + eps)
State: one float per row (width = 1), the cheapest adaptive optimizer for embeddings.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.adagrad import AdagradConfig, fill_state
from cardinal.optim.base import SparseOptimizer


@dataclass(frozen=True)
class RowWiseAdagradConfig(AdagradConfig):
    """The same hyper-parameters as element-wise Adagrad."""


@nb.njit(nogil=True, cache=True)
def rowwise_adagrad_kernel(data, rows, grads, dim, lr, eps, wd):
    inv_dim = np.float32(1.0) / np.float32(dim)
    for i in range(rows.shape[0]):
        r = rows[i]
        sq = np.float32(0.0)
        for j in range(dim):
            g = grads[i, j] + wd * data[r, j]
            sq += g * g
        s = data[r, dim] + sq * inv_dim
        data[r, dim] = s
        scale = lr / (np.sqrt(s) + eps)
        for j in range(dim):
            w = data[r, j]
            data[r, j] = w - scale * (grads[i, j] + wd * w)


class RowWiseAdagrad(SparseOptimizer):
    name = "rowwise_adagrad"
    Config = RowWiseAdagradConfig

    def state_width(self, dim: int) -> int:
        return 1

    def init_state(self, data, start, stop, dim):
        if self.config.initial_accumulator:
            fill_state(data, start, stop, dim, dim + 1, np.float32(self.config.initial_accumulator))

    def apply(self, data, rows, grads, dim):
        rowwise_adagrad_kernel(data, rows, grads, dim, *self.f32("lr", "eps", "weight_decay"))

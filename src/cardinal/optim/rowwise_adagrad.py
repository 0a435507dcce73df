"""Row-wise Adagrad (as fbgemm's ``EXACT_ROWWISE_ADAGRAD``): one accumulator per row.

    g += l2 * w;  s += mean(g * g);  w -= lr * g / (sqrt(s) + eps)
State: one float per row (width = 1), the cheapest adaptive optimizer for embeddings.

A row with a wide part (``wide`` = t > 0, ``base.py``): the mean runs over the dim - t embedding
values, and each of the t first-order weights keeps an accumulator of its own (width = 1 + t),
updated as a row of dim 1 in a table of its own would be: s_j += g_j^2. Shared, the accumulator
would be the weight's: its gradient is the logit's own, 98% of the row's squared gradient on the
default recipe (``benchmarks/rowwise_trace.py``), so the values would take an eighth of their own
rate and the weight about sqrt(dim) times its own (the AUC either way: ``benchmarks/rowwise.py``).
Without a wide part, the row and its state are fbgemm's.

Counted (``counts``, see ``base.py``), as element-wise Adagrad (``adagrad.py``): the k updates
summed in ``g`` are taken to share their mean gradient g / k,

    g += k * l2 * w;  s += k * mean((g / k)^2);  w -= lr * g / (sqrt(s) + eps)

so s grows by what k equal updates would add (not by the square of their sum, up to k times
more), and the one step uses the accumulator after all k: slightly shorter than k steps.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.adagrad import AdagradConfig, fill_state
from cardinal.optim.base import SparseOptimizer
from cardinal.optim.l2 import variants


@dataclass(frozen=True)
class RowWiseAdagradConfig(AdagradConfig):
    """The same hyper-parameters as element-wise Adagrad."""


def _rowwise_adagrad(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def rowwise_adagrad_kernel(data, rows, grads, dim, wide, lr, eps, l2):
        n = dim - wide  # the values sharing data[r, dim]; the wide part's weights follow, an accumulator each
        inv_n = np.float32(1.0) / np.float32(n)
        for i in range(rows.shape[0]):
            r = rows[i]
            sq = np.float32(0.0)
            for j in range(n):
                g = grads[i, j] + l2 * data[r, j] if with_l2 else grads[i, j]
                sq += g * g
            s = data[r, dim] + sq * inv_n
            data[r, dim] = s
            scale = lr / (np.sqrt(s) + eps)
            for j in range(n):
                w = data[r, j]
                g = grads[i, j] + l2 * w if with_l2 else grads[i, j]
                data[r, j] = w - scale * g
            for j in range(n, dim):
                w = data[r, j]
                g = grads[i, j] + l2 * w if with_l2 else grads[i, j]
                s = data[r, dim + 1 + j - n] + g * g
                data[r, dim + 1 + j - n] = s
                data[r, j] = w - lr / (np.sqrt(s) + eps) * g
    return rowwise_adagrad_kernel


def _rowwise_adagrad_counted(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def rowwise_adagrad_counted_kernel(data, rows, grads, counts, dim, wide, lr, eps, l2):
        """counts,  # (u,) int32 >= 1"""
        n = dim - wide
        inv_n = np.float32(1.0) / np.float32(n)
        for i in range(rows.shape[0]):
            r = rows[i]
            k = np.float32(counts[i])
            kl2 = k * l2
            sq = np.float32(0.0)
            for j in range(n):
                g = grads[i, j] + kl2 * data[r, j] if with_l2 else grads[i, j]
                mean = g / k
                sq += mean * mean
            s = data[r, dim] + k * (sq * inv_n)
            data[r, dim] = s
            scale = lr / (np.sqrt(s) + eps)
            for j in range(n):
                w = data[r, j]
                g = grads[i, j] + kl2 * w if with_l2 else grads[i, j]
                data[r, j] = w - scale * g
            for j in range(n, dim):
                w = data[r, j]
                g = grads[i, j] + kl2 * w if with_l2 else grads[i, j]
                mean = g / k
                s = data[r, dim + 1 + j - n] + k * (mean * mean)
                data[r, dim + 1 + j - n] = s
                data[r, j] = w - lr / (np.sqrt(s) + eps) * g
    return rowwise_adagrad_counted_kernel


rowwise_adagrad_kernel = variants(_rowwise_adagrad)
rowwise_adagrad_counted_kernel = variants(_rowwise_adagrad_counted)


class RowWiseAdagrad(SparseOptimizer):
    name = "rowwise_adagrad"
    Config = RowWiseAdagradConfig

    def state_width(self, dim: int) -> int:
        return 1 + self.wide

    def with_wide(self, wide: int) -> "RowWiseAdagrad":
        if isinstance(wide, bool) or not isinstance(wide, int) or wide < 0:
            raise ValueError(f"rowwise_adagrad: wide must be an integer >= 0, got {wide!r}")
        bound = RowWiseAdagrad(self.config)
        bound.wide = wide
        return bound

    def describe(self) -> dict:
        return {**super().describe(), **({"wide": self.wide} if self.wide else {})}

    def init_state(self, data, start, stop, dim):
        if self.config.initial_accumulator:
            fill_state(data, start, stop, dim, dim + 1 + self.wide, np.float32(self.config.initial_accumulator))

    def kernel(self, dim, counted=False):
        assert 0 <= self.wide < dim, (self.wide, dim)
        kernel = rowwise_adagrad_counted_kernel if counted else rowwise_adagrad_kernel
        return kernel(self.config.l2), (self.wide, *self.f32("lr", "eps", "l2"))

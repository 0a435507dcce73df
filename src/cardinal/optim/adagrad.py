"""Element-wise Adagrad, as ``torch.optim.Adagrad`` (no lr decay).

    g += l2 * w;  s += g * g;  w -= lr * g / (sqrt(s) + eps)
State: one accumulator per element (width = dim).

Counted (``counts``, see ``base.py``): ``g`` sums a row's ``k`` pending gradients. Taking the sum
as one gradient would grow s by (sum g)^2, up to k times the sum of the squares; instead the k
updates are taken to share their mean gradient g / k:

    g += k * l2 * w;  s += k * (g / k)^2;  w -= lr * g / (sqrt(s) + eps)

Exact in s when the k parts are equal (a hot row's gradient changing little over s steps); when
they vary, s grows by (sum g)^2 / k, less than their sum of squares (by their variance: a
noisy row's learning rate stays a little higher than without the cache). The step is lr g over
the accumulator after all k updates, where k separate steps would each have used a smaller
accumulator: accumulated steps are slightly shorter (never longer) than the steps they replace.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.base import OptimizerConfig, SparseOptimizer
from cardinal.optim.l2 import variants


@dataclass(frozen=True)
class AdagradConfig(OptimizerConfig):
    lr: float = 0.05
    eps: float = 1e-10
    initial_accumulator: float = 0.0
    l2: float = 0.0


def _adagrad(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def adagrad_kernel(data, rows, grads, dim, lr, eps, l2):
        for i in range(rows.shape[0]):
            r = rows[i]
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + l2 * w if with_l2 else grads[i, j]
                s = data[r, dim + j] + g * g
                data[r, dim + j] = s
                data[r, j] = w - lr * (g / (np.sqrt(s) + eps))
    return adagrad_kernel


def _adagrad_counted(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def adagrad_counted_kernel(data, rows, grads, counts, dim, lr, eps, l2):
        """counts,  # (u,) int32 >= 1"""
        for i in range(rows.shape[0]):
            r = rows[i]
            k = np.float32(counts[i])
            kl2 = k * l2
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + kl2 * w if with_l2 else grads[i, j]
                mean = g / k
                s = data[r, dim + j] + k * (mean * mean)
                data[r, dim + j] = s
                data[r, j] = w - lr * (g / (np.sqrt(s) + eps))
    return adagrad_counted_kernel


adagrad_kernel = variants(_adagrad)
adagrad_counted_kernel = variants(_adagrad_counted)


@nb.njit(nogil=True, cache=True)
def fill_state(data, start, stop, lo, hi, value):
    for r in range(start, stop):
        for j in range(lo, hi):
            data[r, j] = value


class Adagrad(SparseOptimizer):
    name = "adagrad"
    Config = AdagradConfig

    def state_width(self, dim: int) -> int:
        return dim

    def init_state(self, data, start, stop, dim):
        if self.config.initial_accumulator:
            fill_state(data, start, stop, dim, 2 * dim, np.float32(self.config.initial_accumulator))

    def kernel(self, dim, counted=False):
        return (adagrad_counted_kernel if counted else adagrad_kernel)(self.config.l2), self.f32("lr", "eps", "l2")

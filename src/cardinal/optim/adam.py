"""Adam with a step count per row (lazy Adam): rows not pushed neither decay nor step.

As ``torch.optim.Adam`` for a row pushed at every step:
    t += 1;  g += l2 * w  (coupled L2, as torch's Adam weight_decay; see optim/l2.py)
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
State: [m (dim) | v (dim) | t (1)]. t is a float32 count: exact to 2^24 updates of one row,
after which it saturates, harmlessly, since 1 - b^t is then 1.0 for any usable beta.

Counted (``counts``, see ``base.py``): ``g`` sums a row's ``k`` pending gradients. Taken as one
ordinary gradient it would advance t by 1 (k - 1 steps of bias correction lost), decay m and v
once, put k^2 times a part's square into v, and move w one step where k were due. Instead the
k updates are taken to share their mean gradient g / k, for which k Adam steps have this form:

    t += k;  g += k * l2 * w;  m = b1^k m + (1 - b1^k) g / k;  v = b2^k v + (1 - b2^k) (g / k)^2
    w -= k * lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

t, m and v are exactly what k steps of the mean gradient leave (b^k sums the geometric series).
The step is k steps' worth measured with the moments after all k; separate steps would each use
the moments of their own time, which in steady state (m / sqrt(v) changing slowly) is the same.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from cardinal.optim.base import OptimizerConfig, SparseOptimizer
from cardinal.optim.l2 import variants


@dataclass(frozen=True)
class AdamConfig(OptimizerConfig):
    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    l2: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"optimizer.{name} must be in [0, 1), got {getattr(self, name)}")


def _adam(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def adam_kernel(data, rows, grads, dim, lr, beta1, beta2, eps, l2):
        one = np.float32(1.0)
        m0, v0, t0 = dim, 2 * dim, 3 * dim  # state offsets within a row
        for i in range(rows.shape[0]):
            r = rows[i]
            t = data[r, t0] + one
            data[r, t0] = t
            bc1 = 1.0 - np.float64(beta1) ** np.float64(t)
            bc2_sqrt = np.float32(np.sqrt(1.0 - np.float64(beta2) ** np.float64(t)))
            step_size = np.float32(np.float64(lr) / bc1)
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + l2 * w if with_l2 else grads[i, j]
                m = beta1 * data[r, m0 + j] + (one - beta1) * g
                v = beta2 * data[r, v0 + j] + (one - beta2) * g * g
                data[r, m0 + j] = m
                data[r, v0 + j] = v
                data[r, j] = w - step_size * (m / (np.sqrt(v) / bc2_sqrt + eps))
    return adam_kernel


def _adam_counted(with_l2: bool):
    @nb.njit(nogil=True, cache=True)
    def adam_counted_kernel(data, rows, grads, counts, dim, lr, beta1, beta2, eps, l2):
        """counts,  # (u,) int32 >= 1"""
        one = np.float32(1.0)
        m0, v0, t0 = dim, 2 * dim, 3 * dim  # state offsets within a row
        for i in range(rows.shape[0]):
            r = rows[i]
            k = np.float32(counts[i])
            kl2 = k * l2
            b1k = np.float32(np.float64(beta1) ** np.float64(k))  # beta ** 1 is beta, bit for bit
            b2k = np.float32(np.float64(beta2) ** np.float64(k))
            t = data[r, t0] + k
            data[r, t0] = t
            bc1 = 1.0 - np.float64(beta1) ** np.float64(t)
            bc2_sqrt = np.float32(np.sqrt(1.0 - np.float64(beta2) ** np.float64(t)))
            step_size = np.float32(np.float64(lr) * np.float64(k) / bc1)
            for j in range(dim):
                w = data[r, j]
                g = grads[i, j] + kl2 * w if with_l2 else grads[i, j]
                mean = g / k
                m = b1k * data[r, m0 + j] + (one - b1k) * mean
                v = b2k * data[r, v0 + j] + (one - b2k) * mean * mean
                data[r, m0 + j] = m
                data[r, v0 + j] = v
                data[r, j] = w - step_size * (m / (np.sqrt(v) / bc2_sqrt + eps))
    return adam_counted_kernel


adam_kernel = variants(_adam)
adam_counted_kernel = variants(_adam_counted)


class Adam(SparseOptimizer):
    name = "adam"
    Config = AdamConfig

    def state_width(self, dim: int) -> int:
        return 2 * dim + 1

    def kernel(self, dim, counted=False):
        return (adam_counted_kernel if counted else adam_kernel)(self.config.l2), self.f32("lr", "beta1", "beta2", "eps",
                                                                                          "l2")

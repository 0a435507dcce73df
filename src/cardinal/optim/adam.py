"""Adam with a step count per row (lazy Adam): rows not pushed neither decay nor step.

As ``torch.optim.Adam`` for a row pushed at every step:
    t += 1;  g += l2 * w  (coupled L2, as torch's Adam weight_decay; see optim/l2.py)
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
State: [m (dim) | v (dim) | t (1)]. t is a float32 count: exact to 2^24 updates of one row,
after which it saturates, harmlessly, since 1 - b^t is then 1.0 for any usable beta.
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


adam_kernel = variants(_adam)


class Adam(SparseOptimizer):
    name = "adam"
    Config = AdamConfig

    def state_width(self, dim: int) -> int:
        return 2 * dim + 1

    def apply(self, data, rows, grads, dim, counts=None):
        if counts is not None:
            raise NotImplementedError(f'{self.name}: counted pushes are not implemented yet')
        adam_kernel(self.config.l2)(data, rows, grads, dim, *self.f32("lr", "beta1", "beta2", "eps", "l2"))

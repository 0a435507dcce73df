"""How pulled rows become pooled bags: one strategy per file behind this small interface.

The module hands a strategy one table's rows and its layout, and gets back a tensor
differentiable in ``rows``:

    rows     (U, dim)               one row per unique id, a leaf tensor
    inverse  (nnz,) int64           positions in rows, every field's bags one after another
    offsets  (n_fields * B + 1,)    bag f * B + i is field f of example i (field-major)
    ->       (B, n_fields, dim)     per example, one pooled row per field (sum or mean)

Today's strategy is ``CompiledPooling`` (numba kernels on CPU tensors, a one-pass backward);
``TorchPooling`` does the same with torch ops, on whichever device ``rows`` lives (there
``inverse`` and ``offsets`` may come as tensors already on that device).
"""

from abc import ABC, abstractmethod

import numpy as np
import torch


class Pooling(ABC):
    @abstractmethod
    def pool(self, rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int,
             mean: bool) -> torch.Tensor:
        """(B, n_fields, dim): each bag's rows summed (averaged when ``mean``; an empty bag is 0)."""

"""``TorchPooling``: the same pooling as the compiled kernels, with torch ops on any device.

    vectors = rows[inverse]                         (nnz, dim), one per id use
    slot[k] = (b % B) * n_fields + b // B           for use k in bag b (the compiled layout)
    out     = zeros(B * n_fields, dim).index_add_(0, slot, vectors)   (* 1/size when mean)

Autograd gives the backward (a scatter-add into (U, dim)); no ``.numpy()`` on the rows, so
it runs where ``rows`` lives. It agrees with ``CompiledPooling`` (tests compare the two).
"""

import numpy as np
import torch

from cardinal.worker.pooling.base import Pooling


class TorchPooling(Pooling):
    def pool(self, rows: torch.Tensor, inverse: np.ndarray, offsets: np.ndarray, n_fields: int,
             mean: bool) -> torch.Tensor:
        device, dim = rows.device, rows.shape[1]
        n_bags = len(offsets) - 1
        batch = n_bags // n_fields
        sizes = torch.from_numpy(np.diff(offsets)).to(device)                  # (n_bags,)
        bags = torch.arange(n_bags, device=device)
        slots = (bags % max(batch, 1)) * n_fields + bags // max(batch, 1)      # (n_bags,)
        slot = torch.repeat_interleave(slots, sizes)                           # (nnz,)
        vectors = rows[torch.from_numpy(inverse).to(device)]                   # (nnz, dim)
        out = torch.zeros(n_bags, dim, dtype=rows.dtype, device=device).index_add(0, slot, vectors)
        if mean:
            scale = torch.ones(n_bags, dtype=rows.dtype, device=device)
            scale[slots] = 1 / sizes.clamp(min=1).to(rows.dtype)
            out = out * scale[:, None]
        return out.view(-1, n_fields, dim)

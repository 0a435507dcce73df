"""``TorchPooling``: the same pooling as the compiled kernels, with torch ops on any device.

    pooled = F.embedding_bag(inverse, rows, offsets, sum | mean)    (n_fields * B, dim), bag order
    out    = pooled.view(n_fields, B, dim).transpose(0, 1)          (B, n_fields, dim), as compiled

No ``.numpy()`` on the rows, so it runs where ``rows`` lives; ``inverse`` and ``offsets`` may be
numpy arrays or tensors already on that device (``worker/device.py`` stages them there).

Deterministic on CUDA too, which is why it is ``embedding_bag`` and not ``index_add``: a float
``index_add`` (and the scatter-add backward of ``rows[inverse]``) uses atomics on CUDA, so the
order of additions, and the bits, change from run to run. ``embedding_bag``'s sum/mean forward
gives each bag to one thread and its backward into a dense weight sorts the ids and reduces
each id's segment (a sort-based segment sum), so PyTorch lists only mode "max" as
nondeterministic (``torch.use_deterministic_algorithms``). The compiled kernels sum in id-use
order, this in PyTorch's order: the two agree to float rounding, not bit for bit (tests compare
them with torch's float32 tolerance).
"""

import numpy as np
import torch
import torch.nn.functional as F

from cardinal.worker.pooling.base import Pooling


def _on(x: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) and x.device == device else torch.as_tensor(x).to(device)


class TorchPooling(Pooling):
    def pool(self, rows: torch.Tensor, inverse: np.ndarray | torch.Tensor, offsets: np.ndarray | torch.Tensor,
             n_fields: int, mean: bool) -> torch.Tensor:
        device, dim = rows.device, rows.shape[1]
        batch = (len(offsets) - 1) // n_fields
        pooled = F.embedding_bag(_on(inverse, device), rows, _on(offsets, device), mode="mean" if mean else "sum",
                                 include_last_offset=True)                 # (n_fields * B, dim), field-major
        return pooled.view(n_fields, batch, dim).transpose(0, 1)           # (B, n_fields, dim)

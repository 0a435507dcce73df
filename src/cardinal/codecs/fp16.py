"""fp16: IEEE half precision, 2 bytes a value, round to nearest even.

About 3 significant decimal digits (relative error <= 2**-11 for normal values); values of
magnitude past 65504 become +-inf and those under 6e-8 become 0, so fp16 suits values of a
known, moderate range (gradients that may be tiny suit bf16 better). NaN stays NaN.
The conversion is torch's (vectorized; about 25x numpy's ``astype`` here, the same bits).
"""

import numpy as np

from cardinal.codecs.base import Codec


class FP16(Codec):
    name = "fp16"
    overflow = 65520.0  # half of the way from 65504 to the next step, 65536: rounds (to even) to inf

    def row_bytes(self, dim: int) -> int:
        return 2 * dim

    def _encode(self, rows, out):
        import torch  # only when fp16 is used

        if out is None:
            return torch.from_numpy(rows).to(torch.float16).numpy().reshape(-1).view(np.uint8)
        torch.from_numpy(out.view(np.float16).reshape(rows.shape)).copy_(torch.from_numpy(rows))
        return out

    def _decode(self, data, n, dim, out):
        import torch

        halves = data.view(np.float16)
        if not halves.flags.writeable:  # torch wants writable memory (bytes off the wire are not)
            halves = halves.copy()
        if out is None:
            return torch.from_numpy(halves).float().numpy().reshape(n, dim)
        torch.from_numpy(out).copy_(torch.from_numpy(halves).reshape(n, dim))
        return out

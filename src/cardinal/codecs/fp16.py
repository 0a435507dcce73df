"""fp16: IEEE half precision, 2 bytes a value, round to nearest even (numpy's conversion).

About 3 significant decimal digits (relative error <= 2**-11 for normal values); values of
magnitude past 65504 become +-inf and those under 6e-8 become 0, so fp16 suits values of a
known, moderate range (gradients that may be tiny suit bf16 better). NaN stays NaN.
"""

import numpy as np

from cardinal.codecs.base import Codec


class FP16(Codec):
    name = "fp16"

    def row_bytes(self, dim: int) -> int:
        return 2 * dim

    def _encode(self, rows):
        with np.errstate(over="ignore"):  # overflow to inf is the documented behaviour
            return rows.astype(np.float16).reshape(-1).view(np.uint8)

    def _decode(self, data, n, dim):
        return data.view(np.float16).astype(np.float32).reshape(n, dim)

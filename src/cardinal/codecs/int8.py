"""int8 with a per-row scale: 1 byte a value plus 4 bytes a row.

Symmetric: scale = max|x| / 127 (float32) for each row, q = round_half_even(x / scale) in
[-127, 127], decoded as q * scale, so every value is within scale / 2 of the original and the
largest keeps its magnitude (a row of subnormals too tiny for that steps by the least float32;
a subnormal scale rounded down is taken one float32 up, so the largest value does not clip).
A zero row has scale 0 and decodes to zeros. Rows must be finite
(a row holding inf or NaN has no scale): encoding one is a ValueError.

    layout: [ n float32 scales | n x dim int8 values ]   (row_bytes = 4 + dim)
"""

import numba as nb
import numpy as np

from cardinal.codecs.base import Codec


@nb.njit(nogil=True, cache=True)
def _quantize(rows, scales, q):  # rows (n, dim) float32 -> scales (n,) float32, q (n, dim) int8; False: non-finite
    n, dim = rows.shape
    for r in range(n):
        m = np.float32(0.0)
        for j in range(dim):
            a = abs(rows[r, j])
            if not a <= np.float32(3.4028235e38):  # inf or NaN
                return False
            m = max(m, a)
        s = m / np.float32(127.0)
        if m > 0 and s == 0:  # under 127 x the least subnormal: the step is that subnormal
            s = np.float32(1e-45)
        elif 0 < s < np.float32(1.1754944e-38) and m / s > np.float32(127.0):  # a subnormal scale rounded down:
            # the largest value would clip to 127 steps, more than half a step from itself
            s = np.nextafter(s, np.float32(np.inf))
        scales[r] = s
        for j in range(dim):
            if s == 0:
                q[r, j] = 0
            else:
                v = np.rint(rows[r, j] / s)
                q[r, j] = np.int8(min(max(v, np.float32(-127.0)), np.float32(127.0)))
    return True


@nb.njit(nogil=True, cache=True)
def _dequantize(scales, q, out):  # scales (n,) float32, q (n, dim) int8 -> out (n, dim) float32
    n, dim = q.shape
    for r in range(n):
        s = scales[r]
        for j in range(dim):
            out[r, j] = np.float32(q[r, j]) * s


class INT8(Codec):
    name = "int8"

    def row_bytes(self, dim: int) -> int:
        return 4 + dim

    def _encode(self, rows, out):
        n, dim = rows.shape
        out = np.empty(n * (4 + dim), np.uint8) if out is None else out
        scales, q = out[:4 * n].view(np.float32), out[4 * n:].view(np.int8).reshape(n, dim)
        if not _quantize(rows, scales, q):
            bad = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
            raise ValueError(f"codec int8: row {bad} holds inf or NaN, which has no scale; use fp32 or bf16")
        return out

    def _decode(self, data, n, dim, out):
        scales, q = data[:4 * n].view(np.float32), data[4 * n:].view(np.int8).reshape(n, dim)
        out = np.empty((n, dim), np.float32) if out is None else out
        _dequantize(scales, q, out)
        return out

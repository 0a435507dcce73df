"""bf16: the top 16 bits of each float32, 2 bytes a value, rounded to nearest even.

bfloat16 keeps float32's exponent range (no overflow for any finite float32 short of the
largest, which rounds to inf as IEEE rounding says) and 8 significant bits (relative error
<= 2**-8). Inf stays inf; any NaN becomes the quiet NaN 0x7FC0 (as torch's conversion does).
numpy has no bfloat16, so the conversion works on the uint32 bits, in compiled kernels:

    bits = 0x3F8C_CCCD (1.1f)  ->  (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 = 0x3F8D
"""

import numba as nb
import numpy as np

from cardinal.codecs.base import Codec


@nb.njit(nogil=True, cache=True)
def _to_bf16(bits, out):  # bits (m,) uint32 -> out (m,) uint16
    for i in range(bits.size):
        b = np.uint32(bits[i])
        if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN
            out[i] = np.uint16(0x7FC0)
        else:
            out[i] = np.uint16((np.uint64(b) + np.uint64(0x7FFF) + np.uint64((b >> np.uint32(16)) & np.uint32(1)))
                               >> np.uint64(16))


@nb.njit(nogil=True, cache=True)
def _from_bf16(halves, out):  # halves (m,) uint16 -> out (m,) uint32 (float32 bits)
    for i in range(halves.size):
        out[i] = np.uint32(halves[i]) << np.uint32(16)


class BF16(Codec):
    name = "bf16"
    overflow = float(np.uint32(0x7F7F8000).view(np.float32))  # about 3.3962e38: rounds (to even) to inf

    def row_bytes(self, dim: int) -> int:
        return 2 * dim

    def _encode(self, rows, out):
        out = np.empty(rows.size * 2, np.uint8) if out is None else out
        _to_bf16(rows.reshape(-1).view(np.uint32), out.view(np.uint16))
        return out

    def _decode(self, data, n, dim, out):
        out = np.empty((n, dim), np.float32) if out is None else out
        _from_bf16(data.view(np.uint16), out.reshape(-1).view(np.uint32))
        return out

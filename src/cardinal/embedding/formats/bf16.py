"""bf16: the top 16 bits of each float32 value, two values a word; stochastic rounding.

bfloat16 keeps float32's exponent range and 8 significant bits. Rounding adds 16 random bits
below the kept ones and truncates, so a value rounds away from zero with probability equal
to the fraction it had past the lower step (unbiased); a value already a bf16 is unchanged,
inf stays inf, any NaN becomes 0x7FC0:

    bits 0x3F8C_CCCD (1.1f), noise 0x8000  ->  (0x3F8C_CCCD + 0x8000) >> 16 = 0x3F8D
"""

import numba as nb
import numpy as np

from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.rounding import noise, row_key
from cardinal.embedding.hashing import U64


@nb.njit(nogil=True, cache=True)
def decode_bf16(halves, rows, dim, out):
    """halves,  # (R, 2 * width) uint16: the words as halves (little-endian: value 2k in the low half)
    rows,    # (n,) int64; out (n, dim) uint32: float32 bits"""
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(dim):
            out[i, j] = np.uint32(halves[r, j]) << np.uint32(16) if r >= 0 else np.uint32(0)


@nb.njit(nogil=True, cache=True)
def encode_bf16(bits, ids, step, halves, rows):
    """bits,  # (n, dim) uint32: the float32 values' bits; halves as in decode_bf16"""
    for i in range(rows.shape[0]):
        r = rows[i]
        key = row_key(ids[i], step)
        for j in range(bits.shape[1]):
            b = U64(bits[i, j])
            if (b & U64(0x7FFFFFFF)) > U64(0x7F800000):  # NaN
                halves[r, j] = np.uint16(0x7FC0)
            else:
                halves[r, j] = np.uint16((b + (noise(key, j) & U64(0xFFFF))) >> U64(16))


class BF16(RowFormat):
    name = "bf16"

    def value_words(self, dim):
        return (dim + 1) // 2

    def decode(self, data, rows, dim, out):
        decode_bf16(data.view(np.uint16), rows, dim, out.view(np.uint32))

    def encode(self, values, ids, step, data, rows):
        encode_bf16(values.view(np.uint32), ids, np.uint32(step), data.view(np.uint16), rows)
